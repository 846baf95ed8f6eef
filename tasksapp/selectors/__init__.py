"""Reads. Entry points (views, admin, API, commands) call these; they never write."""

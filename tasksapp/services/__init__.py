"""Writes. Entry points (views, admin, API, Celery tasks, commands) call these."""

from .jobs import JobInputError, job_cancel, job_retry, job_schedule

__all__ = ["JobInputError", "job_cancel", "job_retry", "job_schedule"]

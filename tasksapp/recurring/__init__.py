"""Probabilistic sub-interval planning (golden-ratio / random phases): pure decisions
about phases and occurrence times.

Nothing in this package touches the database except the named statements in `sql.py`,
which the planning services run.
"""

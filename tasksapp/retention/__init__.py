"""Retention: finished jobs and old bookkeeping rows are removed in small batches once
older than their age, after what the dashboard shows over time was kept in per-minute
and per-hour rollups. See docs/OPERATIONS.md ("Retention")."""

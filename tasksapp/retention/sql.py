"""Retention's statements on PostgreSQL, named, in one place (kept apart from the job
store's claim and transition statements: nothing here touches a job that can still run).

Removal is batched: each DELETE takes at most `batch` rows, picked oldest first from
`job_finished_at_idx` and locked with SKIP LOCKED, so it never waits for a row another
transaction holds (an operator's retry) and holds its own locks for one short statement.
A row re-checked under its lock that no longer qualifies (retried meanwhile) is skipped.
"""

from __future__ import annotations

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.models import FINAL_STATES
from tasksapp.retention.models import LAG_BOUNDS_MS

FINAL = ", ".join(f"'{state}'" for state in FINAL_STATES)
# Rolled up with the finished states: an attempt that failed and waits for its retry.
ROLLED_STATES = (*FINAL_STATES, "failed")
ROLLED = ", ".join(f"'{state}'" for state in ROLLED_STATES)
LAG_STATES = "'succeeded', 'dead'"  # the dashboard's lag: runs that really started

# Non-cumulative bucket counts, the bounds being constants (never input).
_LAG_RANGES = (
    [f"lag_ms <= {LAG_BOUNDS_MS[0]}"]
    + [
        f"lag_ms > {low} AND lag_ms <= {high}"
        for low, high in zip(LAG_BOUNDS_MS, LAG_BOUNDS_MS[1:], strict=False)
    ]
    + [f"lag_ms > {LAG_BOUNDS_MS[-1]}"]
)
_LAG_BUCKETS = ",\n       ".join(
    f"count(*) FILTER (WHERE {where}) AS lag_b{i:02d}" for i, where in enumerate(_LAG_RANGES)
)
_LAG_COLUMNS = ", ".join(f"lag_b{i:02d}" for i in range(len(LAG_BOUNDS_MS) + 1))

# Jobs that finished in [since, until), grouped by span bucket, handler, recurring task and
# state: the rollup rows, whether stored or read for the part not rolled up yet. The
# recurring task id is compared as text: a payload written through the API may hold
# anything there, and a cast must never fail the run.
AGGREGATE_FINISHED = f"""
SELECT to_timestamp(floor(extract(epoch FROM finished_at) / %(span)s) * %(span)s) AS bucket,
       handler,
       CASE WHEN payload->>'recurring_task_id' ~ '^[0-9]{{1,18}}$'
            THEN (payload->>'recurring_task_id')::bigint ELSE 0 END AS task_id,
       state,
       count(*) AS jobs,
       sum(attempts) AS attempts,
       sum(CASE WHEN jsonb_typeof(errors) = 'array' THEN jsonb_array_length(errors) ELSE 0 END)
           AS failures,
       count(*) FILTER (WHERE attempts > 1) AS retried,
       count(lag_ms) AS lag_count,
       coalesce(sum(lag_ms), 0) AS lag_sum_ms,
       {_LAG_BUCKETS}
FROM (SELECT finished_at, handler, payload, state, attempts, errors,
             CASE WHEN state IN ({LAG_STATES}) AND started_at IS NOT NULL
                  THEN extract(epoch FROM started_at - run_at)::float8 * 1000 END AS lag_ms
      FROM {JOB_TABLE}
      WHERE finished_at >= %(since)s AND finished_at < %(until)s
        AND state IN ({ROLLED})) finished
GROUP BY 1, 2, 3, 4
"""

_SUMS = ("jobs", "attempts", "failures", "retried", "lag_count", "lag_sum_ms")
_ADD = ", ".join(
    f"{column} = r.{column} + EXCLUDED.{column}"
    for column in (*_SUMS, *(f"lag_b{i:02d}" for i in range(len(LAG_BOUNDS_MS) + 1)))
)

# Adds the aggregate to the stored rollups: a bucket rolled in several runs (an hour is
# rolled a few minutes at a time) sums up.
ROLL_UP = f"""
INSERT INTO tasksapp_jobrollup AS r
    (span, bucket, handler, task_id, state, {", ".join(_SUMS)}, {_LAG_COLUMNS})
SELECT %(span)s, bucket, handler, task_id, state, {", ".join(_SUMS)}, {_LAG_COLUMNS}
FROM ({AGGREGATE_FINISHED}) aggregated
ON CONFLICT (span, bucket, handler, task_id, state) DO UPDATE SET {_ADD}
"""

# Slice plans whose jobs may still wait or retry (as `slice_plans_with_pending_jobs`):
# the planner and the member services may add jobs to them, so their jobs stay.
_OPEN_OCCURRENCES = """
SELECT DISTINCT task_id::text AS task, period::text AS period
FROM tasksapp_sliceplan WHERE ends_at + period_length > %(now)s
"""

# A finished job's recurring task as retention groups jobs: the payload's text, "" for
# none. The same expression as job_retention_idx's (migration 0015), so the index serves.
TASK_OF = "COALESCE(payload ->> 'recurring_task_id', '')"

# The (handler, recurring task, state) groups of finished jobs, read as a loose index scan
# of job_retention_idx: one probe per group, however many rows each holds.
FINISHED_GROUPS = f"""
WITH RECURSIVE grp AS (
    (SELECT handler, {TASK_OF} AS task, state FROM {JOB_TABLE}
     WHERE finished_at IS NOT NULL ORDER BY 1, 2, 3 LIMIT 1)
    UNION ALL
    SELECT next.handler, next.task, next.state FROM grp, LATERAL (
        SELECT handler, {TASK_OF} AS task, state FROM {JOB_TABLE}
        WHERE finished_at IS NOT NULL
          AND (handler, {TASK_OF}, state) > (grp.handler, grp.task, grp.state)
        ORDER BY 1, 2, 3 LIMIT 1) next
)
SELECT handler, task, state FROM grp WHERE state IN ({FINAL})
"""

# One batch of one group's jobs that finished before `before`: a range of
# job_retention_idx, oldest first, so rows other groups keep longer are never read. Never
# removed: a job a graph run points at (its graph's retention removes it with the run),
# a planned job whose slice plan is still open, a job not rolled up yet (`before` is
# never after the rollup mark).
DELETE_FINISHED = f"""
WITH open_occurrences AS ({_OPEN_OCCURRENCES}),
doomed AS (
    SELECT c.id FROM {JOB_TABLE} c
    WHERE c.handler = %(handler)s
      AND COALESCE(c.payload ->> 'recurring_task_id', '') = %(task)s
      AND c.state = %(state)s
      AND c.finished_at IS NOT NULL AND c.finished_at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM tasksapp_graphrun g WHERE g.job_id = c.id)
      AND NOT EXISTS (SELECT 1 FROM tasksapp_taskrun t WHERE t.job_id = c.id)
      AND NOT EXISTS (SELECT 1 FROM open_occurrences o
                      WHERE o.task = c.payload->>'recurring_task_id'
                        AND o.period = c.payload->>'occurrence')
    ORDER BY c.finished_at
    LIMIT %(batch)s
    FOR UPDATE OF c SKIP LOCKED
)
DELETE FROM {JOB_TABLE} j USING doomed WHERE j.id = doomed.id
"""

# How many jobs of one group finished before `before` (what a run would remove at most).
COUNT_FINISHED = f"""
SELECT count(*) FROM {JOB_TABLE}
WHERE handler = %(handler)s AND {TASK_OF} = %(task)s AND state = %(state)s
  AND finished_at IS NOT NULL AND finished_at < %(before)s
"""

# Sizes of the hot tables and their indexes (the dashboard's system section).
TABLE_SIZES = """
SELECT c.relname, pg_table_size(c.oid), pg_indexes_size(c.oid), c.reltuples::bigint,
       s.n_dead_tup, s.last_autovacuum
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
  AND c.relname = ANY(%(tables)s)
ORDER BY pg_total_relation_size(c.oid) DESC
"""

# The tables whose B-tree indexes retention rebuilds: the jobs and their search rows
# (migration 0028; the same ids, deleted together).
REBUILT_TABLES = f"'{JOB_TABLE}'::regclass, to_regclass('tasksapp_job_search')"

# The valid B-tree indexes of those tables, each with its size, its entries (as the last
# VACUUM, ANALYZE or REINDEX counted them) and the average width of its columns (the
# planner's statistics, INCLUDE columns too): what `index_bloat` needs. No statistics
# yet: width NULL.
JOB_INDEXES = f"""
SELECT c.relname, pg_relation_size(c.oid), c.reltuples,
       (SELECT sum(s.avg_width) FROM unnest(i.indkey::int2[]) AS k(attnum)
        JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        JOIN pg_stats s ON s.schemaname = current_schema()
                       AND s.tablename = i.indrelid::regclass::text AND s.attname = a.attname)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam AND am.amname = 'btree'
WHERE i.indrelid IN ({REBUILT_TABLES}) AND i.indisvalid
ORDER BY pg_relation_size(c.oid) DESC
"""

# A REINDEX CONCURRENTLY of those tables running now (another retention run's).
REBUILDING = f"""
SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index
               WHERE relid IN ({REBUILT_TABLES}))
"""

# What an interrupted REINDEX CONCURRENTLY leaves: the invalid new index (`_ccnew`) or
# the invalid old one (`_ccold`). Both are dropped (PostgreSQL's advice); the rebuild is
# tried again when the index is still bloated.
FAILED_REBUILDS = f"""
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid IN ({REBUILT_TABLES}) AND NOT i.indisvalid
  AND c.relname ~ '_cc(new|old)[0-9]*$'
"""

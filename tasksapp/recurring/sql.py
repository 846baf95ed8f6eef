"""Named, hand-written statements of the planner (PostgreSQL).

MEMBER_SLICE is the planner's half of planning a slice: one range scan of the partial
index `member_active_phase_idx`, proportional to the slice, not to all members; the job
store inserts its jobs from it in the same statement. Its run time is the float8 product
and floor of `phase_offset`, so Python and SQL agree to the microsecond. Re-running it is
harmless: a job's idempotency key is `plan:<task>:<period>:<member>`, and conflicts are
skipped.
"""

from tasksapp.engine.sql import JOB_TABLE
from tasksapp.engine.store.postgres_sql import LEASED

MEMBER_TABLE = "tasksapp_member"
TASK_TABLE = "tasksapp_recurringtask"

# Serialises ordinal allocation (the lowest free ordinal first), per transaction.
ORDINAL_LOCK_CLASS = 7_316_010

# The active members of one phase range of a slice (only `member_ids`, if not NULL), and
# when each runs in the slice's period.
MEMBER_SLICE = f"""
    SELECT m.id,
           %(period_start)s::timestamptz
               + floor(m.phase * %(period_us)s::float8) * interval '1 microsecond' AS run_at
    FROM {MEMBER_TABLE} m
    WHERE m.active AND m.phase >= %(phase_from)s AND m.phase < %(phase_to)s
      AND (%(member_ids)s::bigint[] IS NULL OR m.id = ANY(%(member_ids)s::bigint[]))"""

# Members being created, deleted or (de)activated hold this while they look at planned
# slices; planning a slice holds FOR UPDATE on its task. So a member either is seen by
# the slice's insert or sees the slice plan, never neither (see recurring.services.members).
LOCK_TASKS_SHARED = f"SELECT id FROM {TASK_TABLE} WHERE active ORDER BY id FOR SHARE"

LOCK_ORDINALS = "SELECT pg_advisory_xact_lock(%(lock_class)s, 0)"

# A task's plan page: active members per slice, and its jobs' load over one period.
MEMBERS_PER_SLICE = f"""
SELECT least(floor(phase * %(slices)s)::int, %(slices)s - 1), count(*)
FROM {MEMBER_TABLE} WHERE active GROUP BY 1
"""
# The jobs in flight are read apart: job_handler_run_at_idx leaves them out, job_lease_idx
# holds them.
_OF_THE_PERIOD = "handler = %(handler)s AND run_at >= %(start)s AND run_at < %(end)s"
JOB_LOAD = f"""
SELECT least(floor(extract(epoch FROM run_at - %(start)s) / %(width)s)::int, %(buckets)s - 1),
       count(*)
FROM (SELECT run_at FROM {JOB_TABLE} WHERE {_OF_THE_PERIOD} AND NOT (state IN ({LEASED}))
      UNION ALL
      SELECT run_at FROM {JOB_TABLE} WHERE {_OF_THE_PERIOD} AND state IN ({LEASED})) jobs
GROUP BY 1
"""

# Bulk fill for demos and benchmarks: members `start` .. `stop - 1`, ordinals equal to
# their number and golden-ratio phases (the same 64-bit fixed point as golden_phase).
INSERT_GOLDEN_MEMBERS = f"""
INSERT INTO {MEMBER_TABLE} (external_id, ordinal, phase, active)
SELECT %(prefix)s::text || n, n,
       div(mod(n::numeric * 11400714819323198485, 18446744073709551616), 2048)::float8
           / 9007199254740992::float8,
       true
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS n
"""

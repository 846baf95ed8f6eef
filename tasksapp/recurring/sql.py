"""Named, hand-written statements of the planner (PostgreSQL).

PLAN_MEMBERS is the whole cost of planning a slice: one range scan of the partial index
`member_active_phase_idx` and one set-based insert, proportional to the slice, not to all
members. Its run time is the float8 product and floor of `phase_offset`, so Python and
SQL agree to the microsecond. Re-running it is harmless: a job's idempotency key is
`plan:<task>:<period>:<member>`, and conflicts are skipped.
"""

from tasksapp.engine.sql import JOB_TABLE

MEMBER_TABLE = "tasksapp_member"
TASK_TABLE = "tasksapp_recurringtask"

# Serialises ordinal allocation (the lowest free ordinal first), per transaction.
ORDINAL_LOCK_CLASS = 7_316_010

PLAN_MEMBERS = f"""
WITH slice AS (
    SELECT m.id,
           %(period_start)s::timestamptz
               + floor(m.phase * %(period_us)s::float8) * interval '1 microsecond' AS run_at
    FROM {MEMBER_TABLE} m
    WHERE m.active AND m.phase >= %(phase_from)s AND m.phase < %(phase_to)s
      AND (%(member_ids)s::bigint[] IS NULL OR m.id = ANY(%(member_ids)s::bigint[]))
), planned AS (
    INSERT INTO {JOB_TABLE} (handler, payload, run_at, state, attempts, max_attempts,
                             retry_policy, delivery, time_limit, idempotency_key,
                             lease_token, claimed_by, last_error, errors)
    SELECT %(handler)s::text,
           %(payload)s::jsonb || jsonb_build_object(
               'member_id', slice.id, 'recurring_task_id', %(task_id)s::bigint,
               'occurrence', %(period)s::bigint),
           slice.run_at, 'scheduled', 0, %(max_attempts)s::integer, %(retry_policy)s::jsonb,
           %(delivery)s::text, %(time_limit)s::float8, %(key_prefix)s::text || slice.id, 0,
           '', '', '[]'::jsonb
    FROM slice
    WHERE slice.run_at >= %(not_before)s
    ORDER BY slice.run_at
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM planned),
       (SELECT count(*) FROM slice WHERE slice.run_at < %(not_before)s)
"""

# Members being created, deleted or (de)activated hold this while they look at planned
# slices; planning a slice holds FOR UPDATE on its task. So a member either is seen by
# the slice's insert or sees the slice plan, never neither (see services.planning).
LOCK_TASKS_SHARED = f"SELECT id FROM {TASK_TABLE} WHERE active ORDER BY id FOR SHARE"

LOCK_ORDINALS = "SELECT pg_advisory_xact_lock(%(lock_class)s, 0)"

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

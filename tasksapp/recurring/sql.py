"""Named, hand-written statements of the planner (PostgreSQL).

MEMBER_SLICE is the planner's half of planning a slice: one range scan of the partial
index `member_active_phase_idx`, proportional to the slice, not to all members; the job
store inserts its jobs from it in the same statement. Its run time is the float8 product
and floor of `phase_offset`, so Python and SQL agree to the microsecond. Re-running it is
harmless: a job's idempotency key is `plan:<task>:<period>:<member>`, and conflicts are
skipped.
"""

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.store.postgres_sql import CANCELLED, DUE, LEASED, SCHEDULED

MEMBER_TABLE = "tasksapp_member"
AUDIENCE_MEMBER_TABLE = "tasksapp_audiencemember"
TASK_TABLE = "tasksapp_recurringtask"
FREE_ORDINAL_TABLE = "tasksapp_freeordinal"

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
      AND m.content_type_id IS NULL
      AND (%(member_ids)s::bigint[] IS NULL OR m.id = ANY(%(member_ids)s::bigint[]))"""

# The same for a task with a time zone: a member runs at its wall-clock offset
# w = floor(phase × period) from the period's local midnight, in the regime of the
# period that holds w (localtime.regimes: `walls` their first walls, ascending, the first
# below 0; `bases` and `floors` theirs), at max(base + w, floor): a time the clocks skip
# runs at the jump, a doubled one at its first occurrence. A NULL floor is ignored.
_WALL_US = "floor({phase} * %(period_us)s::float8)"
_REGIME = "width_bucket(" + _WALL_US + ", %(walls)s::float8[])"
_LOCAL_RUN_AT = (
    "greatest((%(bases)s::timestamptz[])["
    + _REGIME
    + "] + "
    + _WALL_US
    + " * interval '1 microsecond', (%(floors)s::timestamptz[])["
    + _REGIME
    + "])"
)
MEMBER_SLICE_LOCAL = f"""
    SELECT m.id, {_LOCAL_RUN_AT.format(phase="m.phase")} AS run_at
    FROM {MEMBER_TABLE} m
    WHERE m.active AND m.phase >= %(phase_from)s AND m.phase < %(phase_to)s
      AND m.content_type_id IS NULL
      AND (%(member_ids)s::bigint[] IS NULL OR m.id = ANY(%(member_ids)s::bigint[]))"""

# Members being created, deleted or (de)activated hold this while they look at planned
# slices; planning a slice holds FOR UPDATE on its task. So a member either is seen by
# the slice's insert or sees the slice plan, never neither (see recurring.services.members).
LOCK_TASKS_SHARED = f"SELECT id FROM {TASK_TABLE} WHERE active ORDER BY id FOR SHARE"

LOCK_ORDINALS = "SELECT pg_advisory_xact_lock(%(lock_class)s, 0)"

# A task's plan page: active members per slice, and its jobs' load over one period.
MEMBERS_PER_SLICE = f"""
SELECT least(floor(phase * %(slices)s)::int, %(slices)s - 1), count(*)
FROM {MEMBER_TABLE} WHERE active AND content_type_id IS NULL GROUP BY 1
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
INSERT INTO {MEMBER_TABLE} (external_id, ordinal, phase, active, object_id)
SELECT %(prefix)s::text || n, n,
       div(mod(n::numeric * 11400714819323198485, 18446744073709551616), 2048)::float8
           / 9007199254740992::float8,
       true, ''
FROM generate_series(%(start)s::bigint, %(stop)s::bigint - 1) AS n
"""

# --- members leaving and coming back, a batch per statement ------------------------------
# The keys of the planned jobs of the members in `{members}` (a relation of id, phase,
# phase_task): one key per slice plan of `plans` whose task plans that phase and whose
# phase range holds it. `phase_task` names whose phase it is: 0, the member's own, which
# the tasks without audience plan; an audience task's id, the member's phase in that task
# (shifted or random, on its audience-member row), which only that task plans. A plan is
# found by its phases and grid (phase_task, slices, slice_index) from the phase, its
# neighbours tried too and the exact bounds of `slice_bounds` checked, so the cost
# follows the members, not the number of slices planned.
SLICE_PLAN_TABLE = "tasksapp_sliceplan"
_MEMBER_JOB_KEYS = """
    SELECT 'plan:' || p.task_id || ':' || p.period || ':' || m.id AS key, p.id AS plan_id,
           m.id AS member_id, m.phase, p.period_start, p.period_length
    FROM (SELECT m.id, m.phase, m.phase_task, g.slices,
                 floor(m.phase * g.slices)::int + near.step AS slice_index
          FROM {members} m
          JOIN (SELECT DISTINCT phase_task, slices FROM plans) g ON g.phase_task = m.phase_task
          CROSS JOIN (VALUES (-1), (0), (1)) AS near(step)
          OFFSET 0) m  -- not flattened: the plans are hashed once, by phases, grid and index
    JOIN plans p ON p.phase_task = m.phase_task AND p.slices = m.slices
                AND p.slice_index = m.slice_index
    WHERE m.phase >= p.slice_index::float8 / p.slices
      AND m.phase < (p.slice_index + 1)::float8 / p.slices"""
# Whose phases a task's plans hold (see _MEMBER_JOB_KEYS).
_PHASE_TASK = "CASE WHEN t.audience = '' THEN 0 ELSE t.id END AS phase_task"
# Plans whose jobs may still wait or retry (selectors.slice_plans_with_pending_jobs).
_PENDING_PLANS = f"""plans AS (
    SELECT p.id, p.task_id, p.period, p.slice_index, p.slices, p.period_start, p.period_length,
           {_PHASE_TASK}
    FROM {SLICE_PLAN_TABLE} p
    JOIN {TASK_TABLE} t ON t.id = p.task_id
    WHERE p.ends_at + p.period_length > %(now)s)"""
# Plans of active tasks whose window has not ended (selectors.slice_plans_open).
_OPEN_PLANS = f"""plans AS (
    SELECT p.id, p.task_id, p.period, p.slice_index, p.slices, p.period_start, p.period_length,
           {_PHASE_TASK}, t.timezone <> 'UTC' AS zoned
    FROM {SLICE_PLAN_TABLE} p
    JOIN {TASK_TABLE} t ON t.id = p.task_id AND t.active
    WHERE p.ends_at > %(now)s)"""
# The phases of members `{members}` (id, phase, content_type_id) and of their
# audience-member rows `{rows}` (id, phase, phase_task): a member an audience brought in
# is planned by its audience tasks alone, at its phase in each.
_PHASES = """phases AS (
    SELECT id, phase, 0::bigint AS phase_task FROM {members} WHERE content_type_id IS NULL
    UNION ALL
    SELECT id, phase, phase_task FROM {rows})"""
# The jobs are found by key, one probe of the unique index each. Their guards (state, run
# time) are written `(...) IS TRUE`, which no index serves: a guard's index never drives
# the statement, whatever the row estimates of members changed in the same statement
# (none, as the statistics see them, for a batch being activated).
#
# The waiting jobs of the members' `phases` cancelled, as job_cancel_waiting cancels one:
# a job claimed meanwhile is not interrupted, that occurrence runs.
_CANCEL_WAITING = f"""cancelled AS (
    UPDATE {JOB_TABLE} j SET state = {CANCELLED}, finished_at = %(now)s, lease_expires_at = NULL
    FROM ({_MEMBER_JOB_KEYS.format(members="phases")}) k
    WHERE j.idempotency_key = k.key AND (j.state IN ({DUE})) IS TRUE
    RETURNING 1)"""
# The members inactive before the statement, as it found them (`changed` is what the update
# did; a CTE's own row estimate, unlike the member table's, does not take inactive members
# for rare and plan the jobs' lookup as if there were one), and their audience-member rows.
_ASKED_PHASES = _PHASES.format(
    members="(SELECT * FROM asked WHERE inactive) a",
    rows=f"""(SELECT am.member_id AS id, am.phase, am.task_id AS phase_task
              FROM {AUDIENCE_MEMBER_TABLE} am JOIN asked a ON a.id = am.member_id
              WHERE a.inactive) r""",
)

# Members deleted (their audience-member rows with them), their ordinals freed for the
# next members created, their waiting jobs in every task cancelled:
# (members deleted, jobs cancelled).
DELETE_MEMBERS = f"""
WITH {_PENDING_PLANS},
gone AS (
    DELETE FROM {MEMBER_TABLE} WHERE id = ANY(%(ids)s::bigint[])
    RETURNING id, ordinal, phase, content_type_id),
dropped AS (
    DELETE FROM {AUDIENCE_MEMBER_TABLE} am USING gone g WHERE am.member_id = g.id
    RETURNING am.member_id AS id, am.phase, am.task_id AS phase_task),
freed AS (
    INSERT INTO {FREE_ORDINAL_TABLE} (ordinal) SELECT ordinal FROM gone
    ON CONFLICT DO NOTHING),
{_PHASES.format(members="gone", rows="dropped")},
{_CANCEL_WAITING}
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM cancelled)
"""

# Active members deactivated (phase kept; their audience-member rows follow, which is
# what an audience task's slice reads), their waiting jobs in every task cancelled:
# (members deactivated, jobs cancelled).
DEACTIVATE_MEMBERS = f"""
WITH {_PENDING_PLANS},
changed AS (
    UPDATE {MEMBER_TABLE} SET active = false
    WHERE id = ANY(%(ids)s::bigint[]) AND active RETURNING id, phase, content_type_id),
followed AS (
    UPDATE {AUDIENCE_MEMBER_TABLE} am SET active = false FROM changed c WHERE am.member_id = c.id
    RETURNING am.member_id AS id, am.phase, am.task_id AS phase_task),
{_PHASES.format(members="changed", rows="followed")},
{_CANCEL_WAITING}
SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM cancelled)
"""

# Inactive members activated (their audience-member rows follow), their cancelled jobs
# still ahead in the open slices of every task scheduled again as job_retry does (same run
# time, one more attempt allowed than used):
# (members activated, jobs restored, and the slice plans and members of the jobs still
# ahead that are missing: slices planned while the members were away, each to be planned
# for those members alone).
ACTIVATE_MEMBERS = f"""
WITH {_OPEN_PLANS},
asked AS MATERIALIZED (
    SELECT id, phase, content_type_id, NOT active AS inactive
    FROM {MEMBER_TABLE} WHERE id = ANY(%(ids)s::bigint[])),
changed AS (
    UPDATE {MEMBER_TABLE} SET active = true
    WHERE id = ANY(%(ids)s::bigint[]) AND NOT active RETURNING id),
followed AS (
    UPDATE {AUDIENCE_MEMBER_TABLE} am SET active = true FROM changed c WHERE am.member_id = c.id),
{_ASKED_PHASES},
keys AS ({_MEMBER_JOB_KEYS.format(members="phases")}),
restored AS (
    UPDATE {JOB_TABLE} j SET state = {SCHEDULED}, finished_at = NULL, claimed_by = '',
        lease_expires_at = NULL, cancel_requested_at = NULL,
        max_attempts = greatest(j.max_attempts, j.attempts + 1)
    FROM keys k
    WHERE j.idempotency_key = k.key AND (j.state = {CANCELLED} AND j.run_at >= %(now)s) IS TRUE
    RETURNING 1),
missing AS (
    SELECT k.plan_id, k.member_id FROM keys k JOIN plans p ON p.id = k.plan_id
    WHERE (p.zoned  -- a zoned day's time is the insert's to read (it skips those passed)
           OR k.period_start
              + floor(k.phase * (extract(epoch FROM k.period_length) * 1000000)::float8)
                * interval '1 microsecond' >= %(now)s)
      AND NOT EXISTS (SELECT FROM {JOB_TABLE} j WHERE j.idempotency_key = k.key))
SELECT (SELECT count(*) FROM changed), (SELECT count(*) FROM restored),
       ARRAY(SELECT plan_id FROM missing ORDER BY plan_id, member_id),
       ARRAY(SELECT member_id FROM missing ORDER BY plan_id, member_id)
"""


# --- audiences: members following the host's objects, per task ---------------------------
# A task with an audience plans its own members (tasksapp_audiencemember), each with its
# phase in that task and the member's active flag: one range scan of the partial index
# audience_member_slice_idx per slice, these rows alone (no join to the members,
# whose cost would follow the population). Members an audience brought in (content_type
# set) are not planned by tasks without an audience.
AUDIENCE_TEMP = "tempo_audience"

MEMBER_SLICE_AUDIENCE = f"""
    SELECT am.member_id AS id,
           %(period_start)s::timestamptz
               + floor(am.phase * %(period_us)s::float8) * interval '1 microsecond' AS run_at
    FROM {AUDIENCE_MEMBER_TABLE} am
    WHERE am.task_id = %(task_id)s AND am.active
      AND am.phase >= %(phase_from)s AND am.phase < %(phase_to)s
      AND (%(member_ids)s::bigint[] IS NULL OR am.member_id = ANY(%(member_ids)s::bigint[]))
      AND (%(joined_at)s::timestamptz IS NULL OR am.joined_at = %(joined_at)s)"""
MEMBER_SLICE_AUDIENCE_LOCAL = f"""
    SELECT am.member_id AS id, {_LOCAL_RUN_AT.format(phase="am.phase")} AS run_at
    FROM {AUDIENCE_MEMBER_TABLE} am
    WHERE am.task_id = %(task_id)s AND am.active
      AND am.phase >= %(phase_from)s AND am.phase < %(phase_to)s
      AND (%(member_ids)s::bigint[] IS NULL OR am.member_id = ANY(%(member_ids)s::bigint[]))
      AND (%(joined_at)s::timestamptz IS NULL OR am.joined_at = %(joined_at)s)"""
AUDIENCE_MEMBERS_PER_SLICE = f"""
SELECT least(floor(am.phase * %(slices)s)::int, %(slices)s - 1), count(*)
FROM {AUDIENCE_MEMBER_TABLE} am WHERE am.task_id = %(task_id)s AND am.active GROUP BY 1
"""

# The audience's keys, as text, held for one sync (the audience's own query fills it).
AUDIENCE_TEMP_CREATE = f"""
CREATE TEMP TABLE IF NOT EXISTS {AUDIENCE_TEMP} (object_id text PRIMARY KEY) ON COMMIT DROP"""
AUDIENCE_TEMP_CLEAR = f"TRUNCATE {AUDIENCE_TEMP}"
AUDIENCE_TEMP_FILL = (
    f"INSERT INTO {AUDIENCE_TEMP} (object_id) SELECT DISTINCT a.pk::text FROM ({{query}}) a(pk)"
)

# A member for each object of the audience that has none: ordinals the lowest freed
# first, then above every ordinal given (as member_create_many), phases by the strategy
# (golden: the same 64-bit fixed point as golden_phase). Run under LOCK_ORDINALS.
AUDIENCE_MEMBERS_CREATE = f"""
WITH new AS (
    SELECT a.object_id, row_number() OVER (ORDER BY a.object_id) AS rn
    FROM {AUDIENCE_TEMP} a
    WHERE NOT EXISTS (SELECT FROM {MEMBER_TABLE} m
                      WHERE m.content_type_id = %(ct)s AND m.object_id = a.object_id)),
free AS MATERIALIZED (
    SELECT ordinal, row_number() OVER (ORDER BY ordinal) AS rn FROM {FREE_ORDINAL_TABLE}
    ORDER BY ordinal LIMIT (SELECT count(*) FROM new)),
taken AS (DELETE FROM {FREE_ORDINAL_TABLE} f WHERE f.ordinal IN (SELECT ordinal FROM free)),
numbered AS (
    SELECT new.object_id,
           coalesce(free.ordinal,
                    greatest((SELECT max(ordinal) FROM {MEMBER_TABLE}),
                             (SELECT max(ordinal) FROM free), -1)
                    + new.rn - (SELECT count(*) FROM free)) AS ordinal
    FROM new LEFT JOIN free USING (rn))
INSERT INTO {MEMBER_TABLE} (external_id, ordinal, phase, active, content_type_id, object_id)
SELECT %(label)s || ':' || object_id, ordinal,
       CASE WHEN %(random)s THEN random()
            ELSE div(mod(ordinal::numeric * 11400714819323198485, 18446744073709551616), 2048)
                     ::float8 / 9007199254740992::float8 END,
       true, %(ct)s, object_id
FROM numbered
ON CONFLICT DO NOTHING
"""

# The audience's members that are not the task's yet join it, each with its phase in the
# task: golden, the member's phase shifted by the task's (phases.shifted_phase); random,
# a uniform one; the member's active flag with it. Their joined_at is the pass's own
# clock reading, which names them (MEMBER_SLICE_AUDIENCE, AUDIENCE_RESTORE).
AUDIENCE_CLOCK = "SELECT clock_timestamp()"
AUDIENCE_JOIN = f"""
INSERT INTO {AUDIENCE_MEMBER_TABLE} (task_id, member_id, phase, active, joined_at)
SELECT %(task_id)s, m.id,
       CASE WHEN %(random)s THEN random()
            WHEN m.phase + %(shift)s::float8 >= 1 THEN m.phase + %(shift)s::float8 - 1
            ELSE m.phase + %(shift)s::float8 END,
       m.active, %(joined_at)s
FROM {AUDIENCE_TEMP} a JOIN {MEMBER_TABLE} m
     ON m.content_type_id = %(ct)s AND m.object_id = a.object_id
ON CONFLICT (task_id, member_id) DO NOTHING
"""

# The task's members whose object left the audience (or is gone) leave it, and their
# waiting jobs are cancelled with the reason: (members left, jobs cancelled). Only the
# objects `only` (keys as text) are looked at, if not NULL.
_TASK_PENDING_PLANS = f"""plans AS (
    SELECT id, task_id, period, slice_index, slices, period_start, period_length,
           task_id AS phase_task
    FROM {SLICE_PLAN_TABLE} WHERE task_id = %(task_id)s AND ends_at + period_length > %(now)s)"""
AUDIENCE_LEAVE = f"""
WITH {_TASK_PENDING_PLANS},
gone AS (
    DELETE FROM {AUDIENCE_MEMBER_TABLE} am USING {MEMBER_TABLE} m
    WHERE am.task_id = %(task_id)s AND m.id = am.member_id
      AND (%(only)s::text[] IS NULL OR m.object_id = ANY(%(only)s::text[]))
      AND NOT (m.content_type_id = %(ct)s AND EXISTS (
          SELECT FROM {AUDIENCE_TEMP} a WHERE a.object_id = m.object_id))
    RETURNING am.member_id AS id, am.phase, am.task_id AS phase_task),
cancelled AS (
    UPDATE {JOB_TABLE} j SET state = {CANCELLED}, finished_at = %(now)s,
        lease_expires_at = NULL, last_error = %(reason)s
    FROM ({_MEMBER_JOB_KEYS.format(members="gone")}) k
    WHERE j.idempotency_key = k.key AND (j.state IN ({DUE})) IS TRUE
    RETURNING 1)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM cancelled)
"""

# Members who joined in this pass (joined_at) and had left before: their
# cancelled jobs still ahead in the task's open slices are scheduled again.
AUDIENCE_RESTORE = f"""
WITH plans AS (
    SELECT id, task_id, period, slice_index, slices, period_start, period_length,
           task_id AS phase_task
    FROM {SLICE_PLAN_TABLE} WHERE task_id = %(task_id)s AND ends_at > %(now)s),
joined AS (
    SELECT member_id AS id, phase, task_id AS phase_task FROM {AUDIENCE_MEMBER_TABLE}
    WHERE task_id = %(task_id)s AND joined_at = %(joined_at)s)
UPDATE {JOB_TABLE} j SET state = {SCHEDULED}, finished_at = NULL, claimed_by = '',
    lease_expires_at = NULL, cancel_requested_at = NULL, last_error = '',
    max_attempts = greatest(j.max_attempts, j.attempts + 1)
FROM ({_MEMBER_JOB_KEYS.format(members="joined")}) k
WHERE j.idempotency_key = k.key AND (j.state = {CANCELLED} AND j.run_at >= %(now)s) IS TRUE
"""

# Members standing for objects of the model that no longer exist and that no task holds
# any more: deleted, their ordinals freed for the next members. The object is looked up
# by its primary key in its own type (`{pk_type}`: the member's text cast back), which
# its index serves: compared as text, a plan made while the statistics do not know yet of
# the members the same pass created (one, they say, not a million) probed the model's
# whole table once per member.
AUDIENCE_ORPHANS_DELETE = f"""
WITH gone AS (
    DELETE FROM {MEMBER_TABLE} m
    WHERE m.content_type_id = %(ct)s
      AND (%(only)s::text[] IS NULL OR m.object_id = ANY(%(only)s::text[]))
      AND NOT EXISTS (SELECT FROM {{table}} o WHERE o.{{pk}} = m.object_id::{{pk_type}})
      AND NOT EXISTS (SELECT FROM {AUDIENCE_MEMBER_TABLE} am WHERE am.member_id = m.id)
    RETURNING m.ordinal)
INSERT INTO {FREE_ORDINAL_TABLE} (ordinal) SELECT ordinal FROM gone ON CONFLICT DO NOTHING
"""

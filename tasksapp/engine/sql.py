"""Named, hand-written statements of the engine's hot path (PostgreSQL).

Every statement that changes `state` is a conditional UPDATE guarded on the expected
state and, after a claim, on the fencing token (`lease_token`). The partial indexes that
serve them are declared on the Job model (job_due_idx, job_lease_idx).
"""

JOB_TABLE = "tasksapp_job"
NOTIFY_CHANNEL = "tempo_jobs"
# Jobs inserted or re-scheduled to run within this window are announced by NOTIFY;
# a dispatcher's lookahead must not exceed it.
NOTIFY_WINDOW_SECONDS = 900

POLL_DUE = f"""
SELECT id, floor(extract(epoch FROM run_at) * 1000)::bigint, run_at
FROM {JOB_TABLE}
WHERE state IN ('scheduled', 'failed')
  AND run_at < clock_timestamp() + make_interval(secs => %(lookahead)s)
  AND (%(all_partitions)s OR (id %% %(partitions)s) = ANY(%(owned)s))
  AND (%(after_run_at)s::timestamptz IS NULL
       OR (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint))
ORDER BY run_at, id
LIMIT %(limit)s
"""

# The claim returns run_at in ms with its microseconds (a float): the dispatcher orders
# and splits its batches by it. (The worker waits for the run_at its start returns.)
# Joined with unnest, not `id = ANY(array)`: with tens of thousands of ids the latter
# is checked linearly for every row the plan visits (16 s for 50,000 ids, 70 ms joined).
CLAIM_DUE = f"""
UPDATE {JOB_TABLE} j
SET state = 'claimed', lease_token = j.lease_token + 1, claimed_by = %(owner)s,
    claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[]) AS t(id)
WHERE j.id = t.id
  AND j.state IN ('scheduled', 'failed')
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id, j.lease_token, (extract(epoch FROM j.run_at) * 1000)::float8
"""

# The worker starts a job as soon as its message arrives, up to `lead` seconds before
# run_at (the dispatcher claims 40 ms ahead), and waits for run_at itself before calling
# the handler (tasksapp.engine.worker.executor). The last column is the database clock,
# read before the answer left: the worker's lower bound of the database time from then on.
START_CLAIMED = f"""
UPDATE {JOB_TABLE} j
SET state = 'running', attempts = j.attempts + 1,
    started_at = greatest(j.run_at, clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = greatest(j.run_at, clock_timestamp()) + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = 'claimed'
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id, j.lease_token, j.handler, j.payload, j.attempts, j.max_attempts, j.delivery,
          j.retry_policy, j.idempotency_key, j.run_at, j.time_limit,
          (extract(epoch FROM clock_timestamp()) * 1000)::float8
"""

# One round trip's reading of the database clock (a worker tightening its bound of it).
DB_CLOCK_MS = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8"

# started_at becomes the moment the handler began (the worker's lower bound of the
# database time then, in ms), where the worker sent one.
SUCCEED_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = 'succeeded', finished_at = clock_timestamp(), result = t.result::jsonb,
    started_at = coalesce(to_timestamp(t.began_ms / 1000), j.started_at),
    lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[],
            %(began_ms)s::float8[])
     AS t(id, token, result, began_ms)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = 'running'
RETURNING j.id
"""

FAIL_RUNNING = f"""
UPDATE {JOB_TABLE}
SET state = %(state)s,
    run_at = CASE WHEN %(state)s = 'failed'
                  THEN clock_timestamp() + make_interval(secs => %(delay)s) ELSE run_at END,
    finished_at = clock_timestamp(), last_error = %(error)s, claimed_by = '',
    started_at = coalesce(to_timestamp(%(began_ms)s::float8 / 1000), started_at),
    lease_expires_at = NULL,
    errors = errors || jsonb_build_array(jsonb_build_object(
        'attempt', attempts, 'at', clock_timestamp(), 'error', %(error)s, 'kind', %(kind)s))
WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
RETURNING id
"""

RENEW_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = 'running'
"""

# Expired leases in the owned partitions: claimed jobs go back to `scheduled` (their
# message was lost); running jobs are handled per delivery mode. Returns how many were
# reaped and when the next lease in these partitions expires.
REAP_EXPIRED = f"""
WITH expired AS (
    SELECT id FROM {JOB_TABLE}
    WHERE state IN ('claimed', 'running') AND lease_expires_at < clock_timestamp()
      AND (%(all_partitions)s OR (id %% %(partitions)s) = ANY(%(owned)s))
    ORDER BY lease_expires_at
    LIMIT 10000
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE {JOB_TABLE} j
    SET state = CASE WHEN j.state = 'claimed' THEN 'scheduled'
                     WHEN j.delivery = 'at_most_once' THEN 'lost'
                     WHEN j.attempts >= j.max_attempts THEN 'dead'
                     ELSE 'failed' END,
        run_at = CASE WHEN j.state = 'running' THEN clock_timestamp() ELSE j.run_at END,
        finished_at = CASE WHEN j.state = 'running' THEN clock_timestamp()
                           ELSE j.finished_at END,
        last_error = CASE WHEN j.state = 'running' THEN %(error)s ELSE j.last_error END,
        errors = CASE WHEN j.state = 'running'
                      THEN j.errors || jsonb_build_array(jsonb_build_object(
                          'attempt', j.attempts, 'at', clock_timestamp(),
                          'error', %(error)s, 'kind', 'lease_expired'))
                      ELSE j.errors END,
        claimed_by = '', lease_expires_at = NULL
    FROM expired WHERE j.id = expired.id
    RETURNING j.id
)
SELECT (SELECT count(*) FROM reaped),
       (SELECT floor(extract(epoch FROM min(lease_expires_at)) * 1000)::bigint
        FROM {JOB_TABLE}
        WHERE state IN ('claimed', 'running') AND lease_expires_at >= clock_timestamp()
          AND (%(all_partitions)s OR (id %% %(partitions)s) = ANY(%(owned)s)))
"""

# Partition ownership: session-level advisory locks, released by Postgres when the
# process (its connection) dies. Key space: (PARTITION_LOCK_CLASS, partition).
PARTITION_LOCK_CLASS = 7_316_001
DISPATCHER_LOCK_CLASS = 7_316_002

# pg_locks spans the whole server: only this database's advisory locks count.
LIVE_DISPATCHERS_AND_HELD_PARTITIONS = """
WITH ours AS (
    SELECT classid, objid, pid FROM pg_locks
    WHERE locktype = 'advisory' AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT
  COALESCE((SELECT array_agg(pid) FROM ours WHERE classid = %(dispatcher_class)s), '{}'),
  COALESCE((SELECT array_agg(objid::int) FROM ours WHERE classid = %(partition_class)s), '{}'),
  extract(epoch FROM clock_timestamp()) * 1000
"""

TRY_LOCK_PARTITION = "SELECT pg_try_advisory_lock(%(partition_class)s, %(partition)s)"

UNLOCK_PARTITIONS = """
SELECT pg_advisory_unlock(%(partition_class)s, p) FROM unnest(%(partitions)s::int[]) AS p
"""

LOCK_DISPATCHER = "SELECT pg_advisory_lock(%(dispatcher_class)s, %(dispatcher_id)s)"
UNLOCK_DISPATCHER = "SELECT pg_advisory_unlock(%(dispatcher_class)s, %(dispatcher_id)s)"
LIVE_DISPATCHER_IDS = """
SELECT objid::int FROM pg_locks
WHERE locktype = 'advisory' AND granted AND classid = %(dispatcher_class)s
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""

# The trigger that sends these notifications is installed by migration 0002.

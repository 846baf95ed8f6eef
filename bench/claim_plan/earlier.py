"""The hot statements in their earlier forms, as the engine ran them, for bench/claim_plan
to run beside today's (tasksapp/engine/store/postgres_sql.py):

- PARTIAL_*: until commit 7e4e97b: state tests written plainly, so the planner could
  reach the rows through a partial index (job_due_idx, job_lease_idx), and ids joined
  to `unnest(ids)`;
- JOINED_*: until commit 5859c81: state tests written `IS TRUE` (no partial index), ids
  and fencing tokens joined to `unnest(ids, tokens)`.

Both take the fencing tokens as a list beside the ids (`tokens`), and a success's results
and begin times as lists (`results`, `began_ms`).
"""

PARTIAL_CLAIM_LIMITED = """WITH candidates AS (
    SELECT j.id, j.priority, j.run_at, j.concurrency_key AS key
    FROM unnest(%(ids)s::bigint[]) AS t(id) JOIN tasksapp_job j ON j.id = t.id
    WHERE j.state IN ('scheduled', 'failed') AND j.queue = %(queue)s
      AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
), busy_keys AS (
    SELECT a.concurrency_key AS key, count(*) AS n
    FROM tasksapp_job a
    WHERE a.queue = %(queue)s AND a.state IN ('claimed', 'running')
      AND a.concurrency_key IN (SELECT key FROM candidates WHERE key <> '')
    GROUP BY a.concurrency_key
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.key
                                   ORDER BY c.priority DESC, c.run_at, c.id) AS nth_of_key
    FROM candidates c
), allowed AS (
    SELECT r.id FROM ranked r LEFT JOIN busy_keys b ON b.key = r.key
    WHERE %(key_limit)s::int IS NULL OR r.key = ''
       OR r.nth_of_key + coalesce(b.n, 0) <= %(key_limit)s::int
    ORDER BY r.priority DESC, r.run_at, r.id
    LIMIT greatest(0, least(%(room)s::int, coalesce(
        %(limit)s::int - (SELECT count(*) FROM tasksapp_job a
                          WHERE a.queue = %(queue)s AND a.state IN ('claimed', 'running')),
        %(room)s::int)))
), claimed AS (
    UPDATE tasksapp_job j
    SET state = 'claimed', lease_token = j.lease_token + 1, claimed_by = %(owner)s,
        claimed_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
    FROM allowed
    WHERE j.id = allowed.id AND j.state IN ('scheduled', 'failed')
    RETURNING j.id, j.lease_token AS token,
              (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms, j.queue
)
SELECT id, token, run_at_ms, queue, true AS claimed FROM claimed
UNION ALL
SELECT c.id, 0, 0, %(queue)s, false FROM candidates c
WHERE c.id NOT IN (SELECT id FROM claimed)
"""

PARTIAL_CLAIM_DUE = """UPDATE tasksapp_job j
SET state = 'claimed', lease_token = j.lease_token + 1, claimed_by = %(owner)s,
    claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[]) AS t(id)
WHERE j.id = t.id
  AND j.state IN ('scheduled', 'failed')
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id, j.lease_token AS token,
          (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms, j.queue
"""

PARTIAL_START_CLAIMED = """UPDATE tasksapp_job j
SET state = 'running', attempts = j.attempts + 1,
    started_at = greatest(j.run_at, clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = greatest(j.run_at, clock_timestamp()) + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = 'claimed'
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id AS id,
          j.lease_token AS token,
          j.handler AS handler,
          j.payload AS payload,
          j.attempts AS attempt,
          j.max_attempts AS max_attempts,
          j.delivery AS delivery,
          j.retry_policy AS retry_policy,
          j.idempotency_key AS idempotency_key,
          j.run_at AS run_at,
          j.time_limit AS time_limit,
          j.cancel_requested_at IS NOT NULL AS cancel_requested,
          (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS read_ms
"""

PARTIAL_SUCCEED_RUNNING = """UPDATE tasksapp_job j
SET state = 'succeeded', finished_at = clock_timestamp(), result = t.result::jsonb,
    started_at = coalesce(to_timestamp(t.began_ms / 1000), j.started_at),
    lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[],
            %(began_ms)s::float8[])
     AS t(id, token, result, began_ms)
WHERE j.id = t.id AND j.lease_token = t.token AND j.state = 'running'
RETURNING j.id
"""

JOINED_CLAIM_LIMITED = """WITH candidates AS (
    SELECT j.id, j.priority, j.run_at, j.concurrency_key AS key
    FROM unnest(%(ids)s::bigint[]) AS t(id)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at, concurrency_key, state, queue
        FROM tasksapp_job WHERE id = t.id OFFSET 0
    ) j
    WHERE j.state IN ('scheduled', 'failed') AND j.queue = %(queue)s
      AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
), busy_keys AS (
    SELECT a.concurrency_key AS key, count(*) AS n
    FROM tasksapp_job a
    WHERE a.queue = %(queue)s AND a.state IN ('claimed', 'running')
      AND a.concurrency_key IN (SELECT key FROM candidates WHERE key <> '')
    GROUP BY a.concurrency_key
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.key
                                   ORDER BY c.priority DESC, c.run_at, c.id) AS nth_of_key
    FROM candidates c
), allowed AS (
    SELECT r.id FROM ranked r LEFT JOIN busy_keys b ON b.key = r.key
    WHERE %(key_limit)s::int IS NULL OR r.key = ''
       OR r.nth_of_key + coalesce(b.n, 0) <= %(key_limit)s::int
    ORDER BY r.priority DESC, r.run_at, r.id
    LIMIT greatest(0, least(%(room)s::int, coalesce(
        %(limit)s::int - (SELECT count(*) FROM tasksapp_job a
                          WHERE a.queue = %(queue)s AND a.state IN ('claimed', 'running')),
        %(room)s::int)))
), claimed AS (
    UPDATE tasksapp_job j
    SET state = 'claimed', lease_token = j.lease_token + 1, claimed_by = %(owner)s,
        claimed_at = clock_timestamp(),
        lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
    FROM allowed
    WHERE j.id = allowed.id AND (j.state IN ('scheduled', 'failed')) IS TRUE
    RETURNING j.id, j.lease_token AS token,
              (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms, j.queue
)
SELECT id, token, run_at_ms, queue, true AS claimed FROM claimed
UNION ALL
SELECT c.id, 0, 0, %(queue)s, false FROM candidates c
WHERE c.id NOT IN (SELECT id FROM claimed)
"""

JOINED_CLAIM_DUE = """UPDATE tasksapp_job j
SET state = 'claimed', lease_token = j.lease_token + 1, claimed_by = %(owner)s,
    claimed_at = clock_timestamp(),
    lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[]) AS t(id)
WHERE j.id = t.id
  AND (j.state IN ('scheduled', 'failed')) IS TRUE
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id, j.lease_token AS token,
          (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms, j.queue
"""

JOINED_START_CLAIMED = """UPDATE tasksapp_job j
SET state = 'running', attempts = j.attempts + 1,
    started_at = greatest(j.run_at, clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = greatest(j.run_at, clock_timestamp()) + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND (j.state = 'claimed') IS TRUE
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id AS id,
          j.lease_token AS token,
          j.handler AS handler,
          j.payload AS payload,
          j.attempts AS attempt,
          j.max_attempts AS max_attempts,
          j.delivery AS delivery,
          j.retry_policy AS retry_policy,
          j.idempotency_key AS idempotency_key,
          j.run_at AS run_at,
          j.time_limit AS time_limit,
          j.cancel_requested_at IS NOT NULL AS cancel_requested,
          (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS read_ms
"""

JOINED_SUCCEED_RUNNING = """UPDATE tasksapp_job j
SET state = 'succeeded', finished_at = clock_timestamp(), result = t.result::jsonb,
    started_at = coalesce(to_timestamp(t.began_ms / 1000), j.started_at),
    lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[],
            %(began_ms)s::float8[])
     AS t(id, token, result, began_ms)
WHERE j.id = t.id AND j.lease_token = t.token AND (j.state = 'running') IS TRUE
RETURNING j.id
"""

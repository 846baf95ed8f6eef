"""The statements of the job store on PostgreSQL, named, in one place.

Every statement that changes `state` is a conditional UPDATE guarded on the expected
state and, after a claim, on the fencing token (`lease_token`). The partial indexes that
serve them are declared on the Job model (job_due_idx, job_lease_idx). Output columns are
named as the fields of the rows they become (tasksapp.engine.store.rows); state names
come from the model's constants.
"""

from __future__ import annotations

from functools import cache

from psycopg.types.json import Jsonb

from tasksapp.engine.cluster.sql import DISPATCHER_LOCK_HELD, WORKER_LOCK_HELD
from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.models import Delivery, JobState
from tasksapp.engine.models.jobs import DUE_STATES, LEASED_STATES


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# State and delivery names as SQL literals, from the model's constants.
SCHEDULED, CLAIMED, RUNNING, SUCCEEDED, FAILED, DEAD, LOST, CANCELLED = (
    _literal(state)
    for state in (
        JobState.SCHEDULED,
        JobState.CLAIMED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.DEAD,
        JobState.LOST,
        JobState.CANCELLED,
    )
)
DUE = ", ".join(map(_literal, DUE_STATES))  # the predicate of job_due_idx
LEASED = ", ".join(map(_literal, LEASED_STATES))  # the predicate of job_lease_idx
AT_MOST_ONCE = _literal(Delivery.AT_MOST_ONCE)
AT_LEAST_ONCE = _literal(Delivery.AT_LEAST_ONCE)
TRANSACTIONAL = _literal(Delivery.TRANSACTIONAL)
# A claim counts the job's attempt in `attempts` (an attempt that never began is given
# back), so every statement reads the current attempt there, started or not.
HELD = f"({CLAIMED}, {RUNNING})"  # a worker's job: started, or its start deferred

# One more entry of a job's `errors` (aliased `j`), as the one-element array to append.
ERROR_ENTRY = """jsonb_build_array(jsonb_build_object(
    'attempt', j.attempts, 'at', clock_timestamp(), 'error', %(error)s, 'kind', %(kind)s))"""
# ... and a transactional run's lost with its worker (its attempt given back).
LOST_RUN_ENTRY = """jsonb_build_array(jsonb_build_object(
    'attempt', j.attempts, 'at', clock_timestamp(), 'error', %(lost_run_error)s,
    'kind', %(lost_run_kind)s))"""
# ... and a failed attempt's, with the handler's traceback when the worker sent one (a
# key only then: no `null` in every other entry).
TRACED_ERROR_ENTRY = """jsonb_build_array(jsonb_build_object(
    'attempt', j.attempts, 'at', clock_timestamp(), 'error', %(error)s, 'kind', %(kind)s)
    || jsonb_strip_nulls(jsonb_build_object('traceback', %(traceback)s::text)))"""

CLOCK_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::float8"

OWNED_PARTITIONS = "(%(all_partitions)s OR (id %% %(partitions)s) = ANY(%(owned)s))"

POLL_DUE = f"""
SELECT id, floor(extract(epoch FROM run_at) * 1000)::bigint AS run_at_ms, run_at, priority, queue
FROM {JOB_TABLE}
WHERE state IN ({DUE})
  AND run_at < clock_timestamp() + make_interval(secs => %(lookahead)s)
  AND {OWNED_PARTITIONS}
  AND (%(after_run_at)s::timestamptz IS NULL
       OR (run_at, id) > (%(after_run_at)s::timestamptz, %(after_id)s::bigint))
ORDER BY run_at, id
LIMIT %(limit)s
"""

# The hot statements (claim, start, success, renewal, release) reach their rows by one
# primary-key probe per id, whatever the table's statistics say, with work linear in
# their ids:
# - each finds its rows by `j.id = ANY(ids)`, the primary key's index condition (the
#   index walks the sorted ids: rows are locked in ascending id order, so two of these
#   statements over shared rows wait for each other instead of deadlocking); only a
#   table small enough to read in one pass is read so instead;
# - its state test is written `(j.state ...) IS TRUE`, which does not imply the predicate
#   of a partial index (job_due_idx, job_lease_idx), so neither index is a path to the
#   rows;
# - a job's fencing token (and a success's outcome) is looked up in a JSON object keyed
#   by id (`fenced_params`), not joined: joined to `unnest(ids, tokens)`, with statistics
#   that say no row is in the state tested (analysed before a burst), the planner put the
#   table's rows outside a nested loop and the ids inside, one pass over the ids for every
#   row: 0.6-0.9 s for a start of 250 ids on a table of 10,000, 25-38 s for 2,000 ids on
#   50,000, where the probes take 10-20 ms and 70-130 ms (bench/claim_plan,
#   tests/engine/test_statement_plans.py).
# Planned freely from the partial indexes, with statistics that underrated the due or
# leased rows, a statement for one id scanned every due or leased row (10-37 ms where a
# probe takes 1 ms).
#
# The claim returns run_at in ms with its microseconds (a float): the dispatcher orders
# and splits its batches by it. (The worker waits for the run_at its start returns.)
TOKEN_OF_ROW = "(%(tokens)s::jsonb ->> j.id::text)::bigint"
OUTCOME_OF_ROW = "(%(outcomes)s::jsonb -> j.id::text)"  # [token, began_ms, result]


def fenced_params(leases) -> dict:
    """The ids and tokens of (id, token, ...) rows, as the hot statements take them."""
    return {
        "ids": [row[0] for row in leases],
        "tokens": Jsonb({str(row[0]): row[1] for row in leases}),
    }


def outcome_params(outcomes, worker: str = "") -> dict:
    """(id, token, result, began_ms) rows, as SUCCEED_RUNNING takes them; `worker` ran
    them (recorded for those whose start it deferred)."""
    return {
        "worker": worker,
        "ids": [row[0] for row in outcomes],
        "outcomes": Jsonb(
            {str(job_id): [token, began, result] for job_id, token, result, began in outcomes}
        ),
    }


CLAIM_DUE = f"""
UPDATE {JOB_TABLE} j
SET state = {CLAIMED}, lease_token = j.lease_token + 1, claimed_by = %(owner)s,
    claimed_at = clock_timestamp(), attempts = j.attempts + 1,
    lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE j.id = ANY(%(ids)s::bigint[])
  AND (j.state IN ({DUE})) IS TRUE
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING j.id, j.lease_token AS token,
          (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms, j.queue
"""

# --- limited queues ----------------------------------------------------------------------
# A limited queue's claims are serialised by its row's lock, taken in a statement of its
# own: the claim that follows (READ COMMITTED) then sees every claim another dispatcher
# committed before it, so the count of claimed and running jobs is exact. A dispatcher
# never waits for the lock (its other queues' jobs would wait with it): while another
# one claims the queue, it finds no row and tries again a moment later.
QUEUE_TABLE = "tasksapp_jobqueue"

LOCK_QUEUE = f"""
SELECT concurrency_limit, key_concurrency_limit, rate_limit, rate_period,
       (extract(epoch FROM rate_tat) * 1000)::float8 AS rate_tat_ms, {CLOCK_MS} AS now_ms
FROM {QUEUE_TABLE} WHERE name = %(queue)s
FOR UPDATE SKIP LOCKED
"""

# Of the ids asked for, the due jobs of the queue are the candidates; a candidate whose
# key already has `key_limit` jobs claimed or running (counting the candidates ranked
# before it) is held back, and of the rest at most `room` are claimed, and no more than
# the queue's `limit` less its jobs claimed or running: highest priority first, then
# earliest run_at. The candidates not claimed come back as held (claimed = false).
#
# The candidates are read, and the claimed updated, one primary-key probe per id (see
# the hot statements above): the LATERAL subquery, kept apart by OFFSET 0, has nothing
# but the id to go by.
CLAIM_LIMITED = f"""
WITH candidates AS (
    SELECT j.id, j.priority, j.run_at, j.concurrency_key AS key
    FROM unnest(%(ids)s::bigint[]) AS t(id)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at, concurrency_key, state, queue
        FROM {JOB_TABLE} WHERE id = t.id OFFSET 0
    ) j
    WHERE j.state IN ({DUE}) AND j.queue = %(queue)s
      AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
), busy_keys AS (
    SELECT a.concurrency_key AS key, count(*) AS n
    FROM {JOB_TABLE} a
    WHERE a.queue = %(queue)s AND a.state IN ({LEASED})
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
        %(limit)s::int - (SELECT count(*) FROM {JOB_TABLE} a
                          WHERE a.queue = %(queue)s AND a.state IN ({LEASED})),
        %(room)s::int)))
), claimed AS (
    UPDATE {JOB_TABLE} j
    SET state = {CLAIMED}, lease_token = j.lease_token + 1, claimed_by = %(owner)s,
        claimed_at = clock_timestamp(), attempts = j.attempts + 1,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
    WHERE j.id = ANY(ARRAY(SELECT id FROM allowed)) AND (j.state IN ({DUE})) IS TRUE
    RETURNING j.id, j.lease_token AS token,
              (extract(epoch FROM j.run_at) * 1000)::float8 AS run_at_ms, j.queue
)
SELECT id, token, run_at_ms, queue, true AS claimed FROM claimed
UNION ALL
SELECT c.id, 0, 0, %(queue)s, false FROM candidates c
WHERE c.id NOT IN (SELECT id FROM claimed)
"""

SET_RATE_TAT = f"""
UPDATE {QUEUE_TABLE} SET rate_tat = to_timestamp(%(tat_ms)s::float8 / 1000)
WHERE name = %(queue)s
"""

# A start of a rate-limited queue, counted as its claim was (GCRA, in seconds), as a
# reservation: each start takes the next conforming moment, the theoretical arrival time
# less `slack` (a burst less one interval), and moves the time on by one interval. The
# answer is how long to wait for that moment (<= 0: at once); no start asks twice, and
# starts that wait are let through in the order they asked. The upsert waits for a
# concurrent start's row lock and reads the row it left.
START_RATE_TABLE = "tasksapp_queuestartrate"
TAKE_START = f"""
INSERT INTO {START_RATE_TABLE} AS s (queue, tat)
VALUES (%(queue)s, clock_timestamp() + make_interval(secs => %(interval)s))
ON CONFLICT (queue) DO UPDATE
SET tat = greatest(s.tat, clock_timestamp()) + make_interval(secs => %(interval)s)
RETURNING extract(epoch FROM tat - clock_timestamp())::float8 - %(interval)s - %(slack)s
"""

RATE_LIMITS = f"""
SELECT name, rate_limit, rate_period FROM {QUEUE_TABLE} WHERE rate_limit IS NOT NULL
"""

# What a start returns, by StartedJob field, in the order its rows are read
# (postgres._started): the prepared cursor gives plain tuples. `run_at` comes as whole
# microseconds since the epoch, exact and cheaper to read than a timestamptz's text.
# `read_ms` is the database clock, read before the answer left: the worker's lower bound
# of the database time from then on.
STARTED_COLUMNS = {
    "id": "j.id",
    "token": "j.lease_token",
    "handler": "j.handler",
    "payload": "j.payload",
    "attempt": "j.attempts",
    "max_attempts": "j.max_attempts",
    "delivery": "j.delivery",
    "retry_policy": "j.retry_policy",
    "idempotency_key": "j.idempotency_key",
    "run_at": "(extract(epoch FROM j.run_at) * 1000000)::bigint",
    "time_limit": "j.time_limit",
    "cancel_requested": "j.cancel_requested_at IS NOT NULL",
    "queue": "j.queue",
    "read_ms": CLOCK_MS,
}
STARTED_OUTPUT = ",\n          ".join(
    f"{value} AS {name}" for name, value in STARTED_COLUMNS.items()
)

# What a start sets, and which claimed jobs of a message it may start.
START_SET = f"""state = {RUNNING},
    started_at = greatest(j.run_at, clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = greatest(j.run_at, clock_timestamp()) + make_interval(secs => %(ttl)s)"""
STARTABLE = f"""j.id = ANY(%(ids)s::bigint[]) AND j.lease_token = {TOKEN_OF_ROW}
  AND (j.state = {CLAIMED}) IS TRUE
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)"""

# The worker starts a job as soon as its message arrives, up to `lead` seconds before
# run_at (the dispatcher claims 40 ms ahead), and waits for run_at itself before calling
# the handler (tasksapp.engine.worker.attempt).
START_CLAIMED = f"""
UPDATE {JOB_TABLE} j
SET {START_SET}
WHERE {STARTABLE}
RETURNING {STARTED_OUTPUT}
"""

# A start that may be deferred: not at-most-once (whose start must be durable before its
# handler runs), and its claim's lease has half a run lease (`ttl`) left at least, so that
# it does not run out before the deferred start is written (a claim that waited long in
# the broker may be about to expire: its start is written at once). One instant for both
# halves of START_DEFERRING.
DEFERRABLE = f"""(j.delivery <> {AT_MOST_ONCE} AND (j.lease_expires_at
    >= statement_timestamp() + make_interval(secs => %(ttl)s / 2.0)) IS TRUE)"""

# The same start with the DEFERRABLE ones deferred (tuning.DEFERRED_START_SECONDS): those
# stay `claimed` and are only read, and the worker's row records them, so that a
# dispatcher that finds it dead counts their attempts and returns them at once
# (EXPIRE_HELD_OF). The worker writes their start later if they are still running
# (START_HELD), or their start and end in one update (SUCCEED_RUNNING).
START_DEFERRING = f"""
WITH registered AS (
    UPDATE tasksapp_workerprocess
    SET held = coalesce(held, '{{}}'::jsonb) || %(tokens)s::jsonb
    WHERE name = %(worker)s
), started AS (
    UPDATE {JOB_TABLE} j
    SET {START_SET}
    WHERE {STARTABLE} AND NOT {DEFERRABLE}
    RETURNING {STARTED_OUTPUT}, true AS start_written
)
SELECT * FROM started
UNION ALL
SELECT {STARTED_OUTPUT}, false
FROM {JOB_TABLE} j
WHERE {STARTABLE} AND {DEFERRABLE}
"""

# The deferred starts of jobs a worker still runs: claimed -> running, as START_CLAIMED
# would have done, the handler's begin (ms) as started_at where it began. Answers as
# RENEW_RUNNING does.
START_HELD = f"""
UPDATE {JOB_TABLE} j
SET state = {RUNNING},
    started_at = coalesce(to_timestamp((%(began)s::jsonb ->> j.id::text)::float8 / 1000),
                          clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.lease_token = {TOKEN_OF_ROW}
  AND (j.state = {CLAIMED}) IS TRUE
RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
"""

# A worker's record of the jobs whose start it deferred keeps those still claimed.
PRUNE_HELD = f"""
UPDATE tasksapp_workerprocess w
SET held = (SELECT jsonb_object_agg(h.key, h.value)
            FROM jsonb_each(w.held) h JOIN {JOB_TABLE} j ON j.id = h.key::bigint
            WHERE j.lease_token = (h.value)::bigint AND j.state = {CLAIMED})
WHERE w.name = %(worker)s AND w.held IS NOT NULL
"""

# One round trip's reading of the database clock (a worker tightening its bound of it).
DB_CLOCK_MS = f"SELECT {CLOCK_MS} AS read_ms"

# started_at becomes the moment the handler began (the worker's lower bound of the
# database time then, in ms), where the worker sent one. The jobs that succeeded leave
# the worker's record of its deferred starts at once: kept until the next beat's prune,
# the record grew with every job of a burst, and each deferring start rewrote all of it
# (a start of 157 jobs took up to 44 ms after 20,000 of them).
SUCCEED_RUNNING = f"""
WITH succeeded AS (
UPDATE {JOB_TABLE} j
SET state = {SUCCEEDED}, finished_at = clock_timestamp(),
    result = nullif({OUTCOME_OF_ROW} -> 2, 'null'::jsonb),
    started_at = coalesce(to_timestamp(({OUTCOME_OF_ROW} ->> 1)::float8 / 1000), j.started_at,
                          clock_timestamp()),
    claimed_by = CASE WHEN j.state = {CLAIMED} THEN coalesce(nullif(%(worker)s, ''), j.claimed_by)
                      ELSE j.claimed_by END,
    lease_expires_at = NULL
WHERE j.id = ANY(%(ids)s::bigint[])
  AND j.lease_token = ({OUTCOME_OF_ROW} ->> 0)::bigint
  AND (j.state IN {HELD}) IS TRUE
RETURNING j.id
), forgotten AS (
    UPDATE tasksapp_workerprocess w
    SET held = (SELECT jsonb_object_agg(h.key, h.value) FROM jsonb_each(w.held) h
                WHERE h.key NOT IN (SELECT id::text FROM succeeded))
    WHERE w.name = %(worker)s AND w.held IS NOT NULL
      AND EXISTS (SELECT 1 FROM succeeded WHERE w.held ? id::text)
)
SELECT id FROM succeeded
"""

FAIL_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = %(state)s,
    run_at = CASE WHEN %(state)s = {FAILED}
                  THEN clock_timestamp() + make_interval(secs => %(delay)s) ELSE run_at END,
    finished_at = clock_timestamp(), last_error = %(error)s, claimed_by = '',
    started_at = coalesce(to_timestamp(%(began_ms)s::float8 / 1000), started_at,
                          clock_timestamp()),
    lease_expires_at = NULL,
    errors = j.errors || {TRACED_ERROR_ENTRY}
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {HELD}
RETURNING id
"""

# A started job whose handler never began goes back, as if it had not been started: the
# attempt the start counted is given back and the job is due again (the NOTIFY trigger
# announces it). Used by a worker process that must end before it could run them.
RELEASE_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = {SCHEDULED}, attempts = greatest(j.attempts - 1, 0), claimed_by = '',
    started_at = NULL, lease_expires_at = NULL
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.lease_token = {TOKEN_OF_ROW}
  AND (j.state IN {HELD}) IS TRUE
"""

# The renewal also tells the worker which of its jobs an operator cancelled meanwhile.
RENEW_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.lease_token = {TOKEN_OF_ROW}
  AND (j.state = {RUNNING}) IS TRUE
RETURNING j.id, j.cancel_requested_at IS NOT NULL AS cancel_requested
"""

# A running job whose handler stopped at an operator's cancel request (or never began
# because of one, or of a check before it) ends cancelled, the reason in its history; a
# transactional handler's effects rolled back first.
CANCEL_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = {CANCELLED}, finished_at = clock_timestamp(), claimed_by = '',
    started_at = coalesce(to_timestamp(%(began_ms)s::float8 / 1000), started_at),
    lease_expires_at = NULL,
    history = CASE WHEN %(reason)s::text IS NULL THEN j.history
                   ELSE coalesce(j.history, '[]'::jsonb) || jsonb_build_array(
                       jsonb_build_object('event', 'cancelled', 'at', clock_timestamp(),
                                          'reason', %(reason)s::text)) END
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {HELD}
RETURNING id
"""

# A handler asked to run again later: due again in `delay` s, the attempt given back,
# one entry more in its history.
SNOOZE_RUNNING = f"""
UPDATE {JOB_TABLE} j
SET state = {SCHEDULED}, run_at = clock_timestamp() + make_interval(secs => %(delay)s),
    attempts = greatest(j.attempts - 1, 0), claimed_by = '', started_at = NULL,
    lease_expires_at = NULL,
    history = coalesce(j.history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
        'event', 'snoozed', 'at', clock_timestamp(), 'attempt', j.attempts,
        'seconds', %(delay)s::float8))
WHERE id = %(id)s AND lease_token = %(token)s AND state IN {HELD}
RETURNING id
"""

# Expired leases in the owned partitions: a claimed job whose message may still wait in
# the broker (`waiting`, as the dispatcher knows it: tasksapp/engine/dispatcher/inflight.py)
# keeps its claim and token, its lease renewed; a claimed job whose message no worker read
# goes back to `scheduled` (the message was lost), the attempt its claim counted given
# back; a running job, or a claimed one a worker holds with its start deferred (its row's
# `held` has the token), is handled per delivery mode, its attempt counted — except a
# transactional run, which committed nothing: it is due again at once with its attempt
# given back, a `lost_run` entry recorded, while it has fewer than FREE_LOST_RUNS such
# entries; a job an operator asked to cancel ends cancelled. Returns how many were reaped,
# those of them due again at once, and when the next lease in these partitions expires.
# A leased job (aliased `x`) whose attempt began: running, or its start deferred by a
# worker (that worker's row holds its token).
BEGAN = f"""(x.state = {RUNNING} OR EXISTS (SELECT 1 FROM tasksapp_workerprocess w
               WHERE w.held ->> x.id::text = x.lease_token::text))"""
REAP_EXPIRED = f"""
WITH expired AS (
    SELECT x.id, {BEGAN} AS began,
           (x.id = ANY(%(waiting)s::bigint[]) AND x.cancel_requested_at IS NULL) AS queued,
           ({BEGAN} AND x.delivery = {TRANSACTIONAL}
            AND x.cancel_requested_at IS NULL
            AND (SELECT count(*) FROM jsonb_array_elements(x.errors) l
                 WHERE l ->> 'kind' = %(lost_run_kind)s) < %(free_lost_runs)s) AS rerun
    FROM {JOB_TABLE} x
    WHERE x.state IN ({LEASED}) AND x.lease_expires_at < clock_timestamp()
      AND {OWNED_PARTITIONS}
    ORDER BY x.lease_expires_at
    LIMIT 10000
    FOR UPDATE SKIP LOCKED
), kept AS (
    UPDATE {JOB_TABLE} k
    SET lease_expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
    FROM expired e WHERE k.id = e.id AND e.queued AND NOT e.began
    RETURNING k.lease_expires_at
), reaped AS (
    UPDATE {JOB_TABLE} j
    SET state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN {CANCELLED}
                     WHEN NOT e.began OR e.rerun THEN {SCHEDULED}
                     WHEN j.delivery = {AT_MOST_ONCE} THEN {LOST}
                     WHEN j.attempts >= j.max_attempts THEN {DEAD}
                     ELSE {FAILED} END,
        -- the claim counted the attempt: given back if it never began, or runs again
        attempts = CASE WHEN e.rerun OR NOT e.began THEN greatest(j.attempts - 1, 0)
                        ELSE j.attempts END,
        run_at = CASE WHEN e.rerun OR e.began AND j.delivery <> {AT_MOST_ONCE}
                           AND j.attempts < j.max_attempts AND j.cancel_requested_at IS NULL
                      THEN clock_timestamp()  -- a retry or a lost run again, due now
                      ELSE j.run_at END,  -- claimed again, lost or dead: as it was
        started_at = CASE WHEN e.rerun THEN NULL ELSE j.started_at END,
        finished_at = CASE WHEN e.rerun THEN j.finished_at
                           WHEN e.began OR j.cancel_requested_at IS NOT NULL
                           THEN clock_timestamp() ELSE j.finished_at END,
        last_error = CASE WHEN e.rerun THEN %(lost_run_error)s
                          WHEN e.began THEN %(error)s ELSE j.last_error END,
        errors = CASE WHEN e.rerun THEN j.errors || {LOST_RUN_ENTRY}
                      WHEN e.began THEN j.errors || {ERROR_ENTRY} ELSE j.errors END,
        claimed_by = '', lease_expires_at = NULL
    FROM expired e WHERE j.id = e.id AND NOT (e.queued AND NOT e.began)
    RETURNING j.id, j.state, j.run_at, j.priority, j.queue
)
SELECT (SELECT count(*) FROM reaped) AS count,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(
                    id, floor(extract(epoch FROM run_at) * 1000)::bigint, priority, queue)
                ORDER BY run_at), '[]')
        FROM reaped WHERE state IN ({DUE})) AS due,
       (SELECT floor(extract(epoch FROM least(
                    (SELECT min(lease_expires_at) FROM kept),
                    (SELECT min(lease_expires_at) FROM {JOB_TABLE}
                     WHERE state IN ({LEASED}) AND lease_expires_at >= clock_timestamp()
                       AND {OWNED_PARTITIONS}))) * 1000)::bigint) AS next_expiry_ms
"""


# Workers whose liveness session has ended (the process died: PostgreSQL freed its lock)
# are marked as found (their key cleared: one dispatcher acts on each death), their
# running jobs' leases then expire at once instead of running out. Not within `grace` s of
# a server restart: every session ended then, and live workers are still taking their
# locks again.
DEAD_WORKERS = f"""
UPDATE tasksapp_workerprocess w SET liveness_key = NULL
WHERE w.liveness_key IS NOT NULL
  AND pg_postmaster_start_time() < clock_timestamp() - make_interval(secs => %(grace)s)
  AND NOT {WORKER_LOCK_HELD}
RETURNING w.name
"""
EXPIRE_LEASES_OF = f"""
UPDATE {JOB_TABLE} SET lease_expires_at = clock_timestamp()
WHERE state = {RUNNING} AND lease_expires_at > clock_timestamp()
  AND claimed_by = ANY(%(workers)s::text[])
"""
# ... and of the jobs whose start they deferred, still claimed: the reaper counts the
# attempt each died in (their rows still hold them).
EXPIRE_HELD_OF = f"""
UPDATE {JOB_TABLE} j SET lease_expires_at = clock_timestamp()
FROM tasksapp_workerprocess w, jsonb_each_text(w.held) h
WHERE w.name = ANY(%(workers)s::text[]) AND w.held IS NOT NULL
  AND j.id = h.key::bigint AND j.lease_token = h.value::bigint AND j.state = {CLAIMED}
  AND j.lease_expires_at > clock_timestamp()
"""


# A claimed job not started and not held by a worker (its start deferred) whose message
# is lost: its lease ends now and the reaper returns it at once, instead of when the lease
# would have run out. Two cases: the claimer died (its coordination lock is gone: it may
# have died before publishing), and, after a worker's death, a dispatcher's own claims
# whose messages it knows are no longer waiting in the broker (`waiting` are those that
# may be), made over `settle` s ago: the dead worker had taken them. A message that was
# in fact delivered starts nothing when it comes (its token is stale): fenced as ever.
NOT_HELD = """NOT EXISTS (SELECT 1 FROM tasksapp_workerprocess w
                WHERE w.held ->> j.id::text = j.lease_token::text)"""
EXPIRE_CLAIMS_OF_DEAD_DISPATCHERS = f"""
UPDATE {JOB_TABLE} j SET lease_expires_at = clock_timestamp()
FROM tasksapp_dispatcher d
WHERE j.state = {CLAIMED} AND j.lease_expires_at > clock_timestamp()
  AND j.claimed_by = d.name
  AND NOT {DISPATCHER_LOCK_HELD}
  AND {NOT_HELD}
RETURNING j.id
"""
EXPIRE_LOST_CLAIMS_OF = f"""
UPDATE {JOB_TABLE} j SET lease_expires_at = clock_timestamp()
WHERE j.state = {CLAIMED} AND j.lease_expires_at > clock_timestamp()
  AND j.claimed_by = %(owner)s
  AND j.claimed_at < clock_timestamp() - make_interval(secs => %(settle)s)
  AND NOT (j.id = ANY(%(waiting)s::bigint[]))
  AND {NOT_HELD}
RETURNING j.id
"""


def _jobs_insert(values: str, source: str, returning: str) -> str:
    """An insert of new jobs: `values` (NewJob's fields, in its order) for each row of
    `source`; every other column starts the same, stated here once."""
    return f"""
    INSERT INTO {JOB_TABLE} (handler, run_at, payload, max_attempts, retry_policy, delivery,
                             time_limit, idempotency_key, queue, priority, concurrency_key,
                             state, attempts, lease_token, claimed_by, last_error, errors)
    SELECT {values},
           {SCHEDULED}, 0, 0, '', '', '[]'::jsonb
    FROM {source}
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING {returning}"""


INSERT_ROWS = _jobs_insert(
    values="""r.handler, r.run_at, r.payload, r.max_attempts, r.retry_policy, r.delivery,
           r.time_limit, r.idempotency_key, r.queue, r.priority, r.concurrency_key""",
    source="""unnest(%(handlers)s::text[], %(run_ats)s::timestamptz[], %(payloads)s::jsonb[],
                %(max_attempts)s::integer[], %(retry_policies)s::jsonb[], %(deliveries)s::text[],
                %(time_limits)s::float8[], %(keys)s::text[], %(queues)s::text[],
                %(priorities)s::smallint[], %(concurrency_keys)s::text[])
         AS r(handler, run_at, payload, max_attempts, retry_policy, delivery, time_limit,
              idempotency_key, queue, priority, concurrency_key)""",
    returning="id, idempotency_key, created_at",
)

# The planner's insert is the whole cost of planning a slice: the members' query (the
# planner's, `slice`: id and run_at) and one set-based insert, proportional to the slice.
SLICE_JOBS = _jobs_insert(
    values="""%(handler)s::text, slice.run_at,
           %(payload)s::jsonb || jsonb_build_object('member_id', slice.id),
           %(max_attempts)s::integer, %(retry_policy)s::jsonb,
           %(delivery)s::text, %(time_limit)s::float8, %(key_prefix)s::text || slice.id,
           %(queue)s::text, %(priority)s::smallint,
           replace(%(concurrency_key)s::text, '{member}', slice.id::text)""",
    source="slice WHERE slice.run_at >= %(not_before)s ORDER BY slice.run_at",
    returning="1",
)


@cache
def slice_insert(members_sql: str) -> str:
    """The planner's statement around its members' query (one text per query): the jobs
    inserted, and how many were planned and missed, in one round trip."""
    return f"""
WITH slice AS ({members_sql}
), planned AS ({SLICE_JOBS}
)
SELECT (SELECT count(*) FROM planned) AS planned,
       (SELECT count(*) FROM slice WHERE slice.run_at < %(not_before)s) AS missed
"""

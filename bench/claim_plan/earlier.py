"""The hot statements in their earlier forms, as the engine ran them, for bench/claim_plan
to run beside today's (tasksapp/engine/store/postgres_sql.py):

- JOINED_*: until commit 5859c81: state tests written `IS TRUE` (no partial index), ids
  and fencing tokens joined to `unnest(ids, tokens)`;
- PARTIAL_*: until commit 7e4e97b: the same with the state tests written plainly, so the
  planner could reach the rows through a partial index (job_due_idx, job_lease_idx), and
  the limited claim's candidates joined rather than probed.

Both take the fencing tokens as a list beside the ids (`tokens`), and a success's results
and begin times as lists (`results`, `began_ms`). Import after Django is set up.
"""

from tasksapp.engine.db import JOB_TABLE
from tasksapp.engine.store.postgres_sql import CLAIM_LIMITED, STARTED_OUTPUT


def _replaced(statement: str, old: str, new: str) -> str:
    assert old in statement, f"the statement changed: {old!r} is gone"
    return statement.replace(old, new)


JOINED_CLAIM_LIMITED = _replaced(
    CLAIM_LIMITED,
    "    WHERE j.id = ANY(ARRAY(SELECT id FROM allowed))",
    "    FROM allowed\n    WHERE j.id = allowed.id",
)

JOINED_CLAIM_DUE = f"""UPDATE {JOB_TABLE} j
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

JOINED_START_CLAIMED = f"""UPDATE {JOB_TABLE} j
SET state = 'running', attempts = j.attempts + 1,
    started_at = greatest(j.run_at, clock_timestamp()),
    claimed_by = %(worker)s,
    lease_expires_at = greatest(j.run_at, clock_timestamp()) + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS t(id, token)
WHERE j.id = t.id AND j.lease_token = t.token AND (j.state = 'claimed') IS TRUE
  AND j.run_at <= clock_timestamp() + make_interval(secs => %(lead)s)
RETURNING {STARTED_OUTPUT}
"""

JOINED_SUCCEED_RUNNING = f"""UPDATE {JOB_TABLE} j
SET state = 'succeeded', finished_at = clock_timestamp(), result = t.result::jsonb,
    started_at = coalesce(to_timestamp(t.began_ms / 1000), j.started_at),
    lease_expires_at = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)s::text[],
            %(began_ms)s::float8[])
     AS t(id, token, result, began_ms)
WHERE j.id = t.id AND j.lease_token = t.token AND (j.state = 'running') IS TRUE
RETURNING j.id
"""


def _plain(statement: str, state_test: str) -> str:
    """The statement with its state test written plainly, as before the IS TRUE forms."""
    return _replaced(statement, f"({state_test}) IS TRUE", state_test)


PARTIAL_CLAIM_LIMITED = _plain(
    _replaced(
        JOINED_CLAIM_LIMITED,
        "    FROM unnest(%(ids)s::bigint[]) AS t(id)\n    CROSS JOIN LATERAL (\n"
        "        SELECT id, priority, run_at, concurrency_key, state, queue\n"
        f"        FROM {JOB_TABLE} WHERE id = t.id OFFSET 0\n    ) j\n",
        f"    FROM unnest(%(ids)s::bigint[]) AS t(id) JOIN {JOB_TABLE} j ON j.id = t.id\n",
    ),
    "j.state IN ('scheduled', 'failed')",
)
PARTIAL_CLAIM_DUE = _plain(JOINED_CLAIM_DUE, "j.state IN ('scheduled', 'failed')")
PARTIAL_START_CLAIMED = _plain(JOINED_START_CLAIMED, "j.state = 'claimed'")
PARTIAL_SUCCEED_RUNNING = _plain(JOINED_SUCCEED_RUNNING, "j.state = 'running'")

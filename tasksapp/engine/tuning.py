"""The engine's tunings: values the dispatch path was measured with, named here and not
offered as settings, because a deployment has no reason to change them (each one's
measurement is in the decision record named beside it).

They are fields of `TempoSettings` like the settings, so the engine reads them one way.
`settings.TEMPO_TUNING` (a dict of these keys, in the standalone deployment the
environment's `TEMPO_TUNING_<KEY>`) overrides them for the test suite and the benches,
which shrink a timing to make a failure show in seconds or force one message a job; it
is not a supported setting and its keys may change in any release.
"""

from __future__ import annotations

TUNING_DEFAULTS: dict[str, object] = {
    # The rare poll a dispatcher makes with notifications on (docs/decisions/0006).
    "POLL_INTERVAL_SECONDS": 240.0,
    # How often a dispatcher reads the lock ring's members and rebalances partitions; a
    # member's death is heard at once, this only bounds a stall (docs/decisions/0005).
    "COORDINATION_SECONDS": 2.0,
    # A job of a message of several has its start written only once it has run this
    # long: a shorter job's start and end are one update (docs/decisions/0007).
    # Shortened to half a claim's lifetime where that is less (the start is written
    # while the claim holds); 0: every start written before the handler runs.
    "DEFERRED_START_SECONDS": 1.0,
    # How often dispatchers look for worker processes whose liveness lock is gone,
    # besides being told by the worker watching it (docs/decisions/0012); 0: leases alone.
    "WORKER_CHECK_SECONDS": 0.25,
    # Most job ids in one broker message, and how many messages a due round is cut into
    # so that idle workers run it side by side (docs/decisions/0017).
    "MAX_BATCH": 250,
    "FANOUT": 32,
    # Claim only while fewer messages than this wait in a queue (docs/decisions/0017).
    "MAX_QUEUED_MESSAGES": 64,
    # A transactional group commits this many ms after its first job finished
    # (docs/decisions/0009).
    "TRANSACTION_GROUP_MS": 50.0,
    # The engine's own transitions commit asynchronously (docs/decisions/0011).
    "ASYNC_COMMIT": True,
    # Per-job statements prepared once a session; None: on unless DB_POOLER is set.
    "PREPARED_STATEMENTS": None,
    # Redis due index: a take not confirmed within this time is returned by any instance.
    "INDEX_LEASE_SECONDS": 5.0,
}

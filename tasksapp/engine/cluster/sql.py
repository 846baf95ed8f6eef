"""The cluster's statements and names on PostgreSQL: the notification channel and its
payloads, partition ownership and liveness by advisory locks, the lock rings. The jobs'
own statements belong to the job store (tasksapp.engine.store.postgres_sql).
"""

NOTIFY_CHANNEL = "tempo_jobs"
ROUTING_CHANGED = "routing"  # a NOTIFY payload: a queue's settings or the routing mode changed

# Partition ownership: session-level advisory locks, released by Postgres when the
# process (its connection) dies. Key space: (PARTITION_LOCK_CLASS, partition).
PARTITION_LOCK_CLASS = 7_316_001
DISPATCHER_LOCK_CLASS = 7_316_002
# Each instance announces the partition count it is configured with (a shared lock its
# session holds); every instance uses the largest one announced. A count raised on one
# instance is followed by all at their next round; a count lowered takes effect once no
# instance announces a larger one (the rolling restart is complete).
PARTITION_COUNT_CLASS = 7_316_003
# A worker process's liveness: (WORKER_LOCK_CLASS, hashtext(its name)), held by a session
# of its own for as long as the process lives (tasksapp.engine.cluster.liveness).
WORKER_LOCK_CLASS = 7_316_004
TAKE_WORKER_LOCK = (
    "SELECT pg_try_advisory_lock(%(worker_class)s, hashtext(%(name)s)), hashtext(%(name)s)"
)
WORKER_GONE = "worker-gone"  # a NOTIFY payload: a worker process died, look for it now
ANNOUNCE_PARTITION_COUNT = "SELECT pg_advisory_lock_shared(%(count_class)s, %(count)s)"

# pg_locks spans the whole server: only this database's advisory locks count.
LIVE_DISPATCHERS_AND_HELD_PARTITIONS = """
WITH ours AS (
    SELECT classid, objid, pid, mode FROM pg_locks
    WHERE locktype = 'advisory' AND granted
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT
  COALESCE((SELECT array_agg(pid) FROM ours
            WHERE classid = %(dispatcher_class)s AND mode = 'ExclusiveLock'), '{}'),
  COALESCE((SELECT array_agg(objid::int) FROM ours WHERE classid = %(partition_class)s), '{}'),
  extract(epoch FROM clock_timestamp()) * 1000,
  (SELECT max(objid::int) FROM ours WHERE classid = %(count_class)s)
"""

# A peer whose coordination session has sat idle past the stall bound is frozen (SIGSTOP,
# a VM pause) or cut off with its TCP connection still open: its session, and with it
# every partition lock it holds, is ended so the live instances take its share. A
# running instance touches this session every coordination round.
TERMINATE_STALLED_PEERS = """
SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
WHERE pid = ANY(%(peers)s::int[]) AND pid <> pg_backend_pid()
  AND state LIKE 'idle%%' AND state_change < clock_timestamp() - make_interval(secs => %(stall)s)
"""

TRY_LOCK_PARTITION = "SELECT pg_try_advisory_lock(%(partition_class)s, %(partition)s)"

UNLOCK_PARTITIONS = """
SELECT pg_advisory_unlock(%(partition_class)s, p) FROM unnest(%(partitions)s::int[]) AS p
"""

LOCK_DISPATCHER = "SELECT pg_advisory_lock(%(dispatcher_class)s, %(dispatcher_id)s)"
# The lock rings (tasksapp.engine.cluster.lock_ring): the live keys of a lock class (held
# exclusively, by their owners), and the wait on one of them that is granted when its
# owner's session ends. The wait is shared: a watcher that holds a dead key for a moment
# never looks like its owner, to another watcher or to a count of the live.
LIVE_LOCK_KEYS = """
SELECT objid::int FROM pg_locks
WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
  AND classid = %(lock_class)s AND objsubid = 2
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
WAIT_FOR_LOCK = "SELECT pg_advisory_lock_shared(%(lock_class)s, %(key)s)"
UNLOCK_KEY = "SELECT pg_advisory_unlock_shared(%(lock_class)s, %(key)s)"

# The trigger that sends these notifications is installed by migration 0002.

# Whether a worker process's liveness lock (`w`, its row) or a dispatcher's coordination
# lock (`d`, its row) is still held: the job store ends a dead process's leases with them.
WORKER_LOCK_HELD = """EXISTS (
      SELECT 1 FROM pg_locks l
      WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
        AND l.classid = %(worker_class)s
        AND l.objid = w.liveness_key::oid AND l.objsubid = 2
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"""
DISPATCHER_LOCK_HELD = """EXISTS (
      SELECT 1 FROM pg_locks l
      WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock'
        AND l.classid = %(dispatcher_class)s AND l.objid = (d.id %% 2147483648)::oid
        AND l.objsubid = 2
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))"""

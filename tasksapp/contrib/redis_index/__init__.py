"""The Redis due index: dispatchers learn what is due from a sorted set per partition in
Redis instead of polling PostgreSQL (docs/REDIS_MODE.md). PostgreSQL stays the truth and
the claim is the same fenced statement. Enabled by installing this app
(`"tasksapp.contrib.redis_index"` in INSTALLED_APPS) and `TEMPO["DISPATCH_MODE"] = "redis"`."""

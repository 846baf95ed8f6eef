"""Where a dispatcher learns which of its jobs are due: the database (poll ahead, hold in
a timing wheel), or a source an optional app registers for its dispatch mode (the Redis
due index: tasksapp.contrib.redis_index). `base.DueSource` is what the loop asks of each."""

"""Where a dispatcher learns which of its jobs are due: the database (poll ahead, hold in
a timing wheel) or the Redis due index. `base.DueSource` is what the loop asks of both."""

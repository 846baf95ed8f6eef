"""Calendar schedules: a handler run at each fire time of a cron in a real time zone, or
every fixed interval, exactly once per fire time (docs/SCHEDULES.md)."""

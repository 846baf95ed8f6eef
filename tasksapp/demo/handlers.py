"""Demo handlers, scheduled by `manage.py load_demo` so a fresh install has work to show."""

from __future__ import annotations

import logging
import random
import time

from tasksapp.engine.handlers import JobContext, job_handler

log = logging.getLogger(__name__)

ERR_FLAKY = "simulated failure on attempt {attempt} of {max_attempts} (fail rate {rate:.0%})"


class DemoFailure(RuntimeError):
    """The failure `flaky` simulates; the job's retry policy schedules the next attempt."""


@job_handler
def greet(ctx: JobContext) -> dict:
    """Succeeds at once with a small JSON result."""
    greeting = f"Hello, {ctx.payload.get('name', 'world')}!"
    log.info("demo job %s: %s", ctx.job_id, greeting)
    return {"greeting": greeting, "job": ctx.job_id, "attempt": ctx.attempt}


@job_handler
def flaky(ctx: JobContext) -> dict:
    """Works for a moment, then fails with probability `payload["fail_rate"]` (default
    0.2), so retries and, at a rate of 1.0, dead jobs show up."""
    time.sleep(random.uniform(0.05, float(ctx.payload.get("seconds", 0.3))))
    rate = float(ctx.payload.get("fail_rate", 0.2))
    if random.random() < rate:
        error = ERR_FLAKY.format(attempt=ctx.attempt, max_attempts=ctx.max_attempts, rate=rate)
        log.warning("demo job %s: %s", ctx.job_id, error)
        raise DemoFailure(error)
    log.info("demo job %s: succeeded on attempt %s", ctx.job_id, ctx.attempt)
    return {"job": ctx.job_id, "attempt": ctx.attempt}

"""`manage.py tempo health`: the health endpoint's verdict for scripts and container
health checks; exit status 0 when healthy, 1 when not."""

from __future__ import annotations

import json

from tasksapp.management.tempo_cli import subcommand
from tasksapp.web.api.health import health_answer
from tasksapp.web.selectors.health import health_read

UNHEALTHY = 1


def _arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="Print the whole answer as JSON.")


@subcommand(
    "health",
    help="Due jobs and the oldest one's wait per queue, live processes; exit 1 when stalled",
    arguments=_arguments,
)
def health(command, options) -> int | None:
    verdict = health_read()
    if options["json"]:
        command.stdout.write(json.dumps(health_answer(verdict), indent=2))
        return None if verdict.healthy else UNHEALTHY
    for queue in verdict.queues:
        oldest = queue.oldest_due_seconds
        waited = f"{oldest:.1f} s" if oldest is not None else "-"
        paused = " (paused)" if queue.paused else ""
        command.stdout.write(
            f"{queue.queue}: {queue.due} due, oldest waiting {waited}, "
            f"{queue.workers} live workers{paused}"
        )
    for problem in verdict.problems:
        command.stderr.write(problem)
    command.stdout.write(verdict.status)
    return None if verdict.healthy else UNHEALTHY

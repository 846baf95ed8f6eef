"""`manage.py tempo jobs list|show|retry|cancel|run-now`: the filter is the bulk action's
(tasksapp.engine.services.bulk), given as options."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError
from django.core.serializers.json import DjangoJSONEncoder
from django.forms.models import model_to_dict

from tasksapp.engine.models import Job
from tasksapp.engine.services import BulkResult, JobInputError, job_selection
from tasksapp.web.bulk import job_bulk_action_by_command

from . import subcommand, who

MAX_LIST = 1000
ERR_LIMIT = f"--limit must be from 1 to {MAX_LIST}."
ERR_NO_JOB = "job {job_id} does not exist."
# Each option of the filter, and the criterion it gives.
FILTER_OPTIONS = {
    "--id": "ids",
    "--state": "state",
    "--handler-prefix": "handler_prefix",
    "--queue": "queue",
    "--priority": "priority",
    "--error-contains": "error_contains",
    "--key-contains": "key_contains",
    "--run-at-from": "run_at_from",
    "--run-at-to": "run_at_to",
    "--created-from": "created_from",
    "--created-to": "created_to",
    "--finished-from": "finished_from",
    "--finished-to": "finished_to",
}
REPEATED = {"ids", "state"}  # options that may be given several times
LIST_COLUMNS = "{:>10}  {:<9}  {:<12}  {:>2}  {:<19}  {:>5}  {:<40}  {}"


def _filter_arguments(parser: ArgumentParser) -> None:
    group = parser.add_argument_group("filter (every criterion given must hold)")
    for option, criterion in FILTER_OPTIONS.items():
        if criterion in REPEATED:
            kind, metavar = (int, "ID") if criterion == "ids" else (str, "STATE")
            group.add_argument(option, dest=criterion, action="append", type=kind, metavar=metavar)
        elif criterion == "priority":
            group.add_argument(option, dest=criterion, type=int, metavar="0-9")
        else:
            metavar = "ISO-8601" if criterion.endswith(("_from", "_to")) else "TEXT"
            group.add_argument(option, dest=criterion, metavar=metavar)


def filter_of(options: dict[str, Any]) -> dict[str, Any]:
    """The bulk action's filter from the options given."""
    return {
        criterion: options[criterion]
        for criterion in FILTER_OPTIONS.values()
        if options.get(criterion) is not None
    }


def _list_arguments(parser: ArgumentParser) -> None:
    _filter_arguments(parser)
    parser.add_argument("--limit", type=int, default=50, help="at most this many (50)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")


@subcommand("jobs", "list", help="Jobs a filter matches, newest first", arguments=_list_arguments)
def jobs_list(command, options: dict[str, Any]) -> None:
    if not 1 <= options["limit"] <= MAX_LIST:
        raise CommandError(ERR_LIMIT)
    wanted = filter_of(options)
    try:
        jobs = job_selection(filter=wanted).jobs() if wanted else Job.objects.all()
    except JobInputError as exc:
        raise CommandError(str(exc)) from exc
    rows = jobs.order_by("-id")[: options["limit"]]
    if options["json"]:
        for job in rows:
            command.stdout.write(_json(job))
        return
    command.stdout.write(
        LIST_COLUMNS.format("id", "state", "queue", "pr", "run at", "tries", "handler", "error")
    )
    for job in rows:
        command.stdout.write(_line(job))


def _line(job: Job) -> str:
    return LIST_COLUMNS.format(
        job.id,
        job.state,
        job.queue[:12],
        job.priority,
        f"{job.run_at:%Y-%m-%d %H:%M:%S}",
        f"{job.attempts}/{job.max_attempts}",
        job.handler[-40:],
        job.last_error.splitlines()[0][:60] if job.last_error else "",
    )


def _json(job: Job) -> str:
    fields = model_to_dict(job) | {"id": job.id, "created_at": job.created_at}
    return json.dumps(fields, cls=DjangoJSONEncoder, ensure_ascii=False)


def _show_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("job_id", type=int)
    parser.add_argument("--json", action="store_true", help="the job as one JSON object")


@subcommand(
    "jobs", "show", help="One job: its fields, errors and tracebacks", arguments=_show_arguments
)
def jobs_show(command, options: dict[str, Any]) -> None:
    job = Job.objects.filter(id=options["job_id"]).first()
    if job is None:
        raise CommandError(ERR_NO_JOB.format(job_id=options["job_id"]))
    if options["json"]:
        command.stdout.write(_json(job))
        return
    command.stdout.write(command.style.MIGRATE_HEADING(f"job {job.id}: {job.state}"))
    for name, value in model_to_dict(job, exclude=["id", "errors", "result", "payload"]).items():
        command.stdout.write(f"  {name}: {value if value not in (None, '') else '-'}")
    command.stdout.write(f"  payload: {json.dumps(job.payload, ensure_ascii=False)}")
    command.stdout.write(f"  result: {json.dumps(job.result, ensure_ascii=False)}")
    for entry in job.errors:
        attempt, at, kind = entry.get("attempt"), entry.get("at"), entry.get("kind")
        command.stdout.write(f"attempt {attempt} at {at} ({kind}): {entry.get('error')}")
        if entry.get("traceback"):
            command.stdout.write(entry["traceback"].rstrip("\n"))


def _action_arguments(parser: ArgumentParser) -> None:
    _filter_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="count the jobs it would change; change nothing"
    )


def _bulk(command, options: dict[str, Any], action: str) -> None:
    def progress(done: BulkResult) -> None:
        command.stderr.write(f"  {done.matched} matched, {done.changed} so far")

    try:
        result = job_bulk_action_by_command(
            username=who(),
            action=action,
            filter=filter_of(options),
            dry_run=options["dry_run"],
            on_chunk=progress,
        )
    except JobInputError as exc:
        raise CommandError(str(exc)) from exc
    verb = "would change" if result.dry_run else "changed"
    command.stdout.write(f"{action}: {result.matched} matched, {result.changed} {verb}")


@subcommand(
    "jobs",
    "retry",
    help="Retry every dead, lost, cancelled or failed job a filter matches",
    arguments=_action_arguments,
)
def jobs_retry(command, options: dict[str, Any]) -> None:
    _bulk(command, options, "retry")


@subcommand(
    "jobs",
    "cancel",
    help="Cancel every waiting job a filter matches; ask the running ones to stop",
    arguments=_action_arguments,
)
def jobs_cancel(command, options: dict[str, Any]) -> None:
    _bulk(command, options, "cancel")


@subcommand(
    "jobs",
    "run-now",
    help="Move the run time of every waiting job a filter matches to now",
    arguments=_action_arguments,
)
def jobs_run_now(command, options: dict[str, Any]) -> None:
    _bulk(command, options, "run_now")

"""`manage.py tempo queues pause|resume NAME`, recorded in the audit log."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandError

from tasksapp.engine.models import JobQueue
from tasksapp.engine.queues import queue_configure
from tasksapp.engine.services import JobInputError
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import operator_action_record
from tasksapp.web.transactions import audited_atomic

from . import subcommand, who


def _name(parser: ArgumentParser) -> None:
    parser.add_argument("name", help="the queue (created if it has no settings yet)")


def _set_paused(command, name: str, paused: bool) -> None:
    """queue_configure, recorded as the dashboard's pause and resume are."""
    action = "queue_pause" if paused else "queue_resume"
    try:
        with audited_atomic():
            was = JobQueue.objects.filter(name=name).values_list("paused", flat=True).first()
            queue = queue_configure(name=name, paused=paused)
            operator_action_record(
                user=None,
                username=who(),
                via=OperatorAction.Via.COMMAND,
                action=action,
                target_type="queue",
                target_id=queue.name,
                details={"before": {"paused": was}, "after": {"paused": queue.paused}},
            )
    except JobInputError as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(f"queue {queue.name}: {'paused' if queue.paused else 'running'}")


@subcommand(
    "queues", "pause", help="Stop claiming a queue's jobs (running ones finish)", arguments=_name
)
def queues_pause(command, options: dict[str, Any]) -> None:
    _set_paused(command, options["name"], True)


@subcommand("queues", "resume", help="Claim a paused queue's jobs again", arguments=_name)
def queues_resume(command, options: dict[str, Any]) -> None:
    _set_paused(command, options["name"], False)

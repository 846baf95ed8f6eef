"""`manage.py tempo`: jobs list|show|retry|cancel|run-now by the bulk action's filter,
queues pause|resume, each action recorded; and the hook a new subcommand plugs into."""

from __future__ import annotations

import datetime as dt
import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from tasksapp.engine.models import Job, JobQueue, JobState
from tasksapp.engine.services import bulk
from tasksapp.management import tempo_cli
from tasksapp.management.tempo_cli import jobs as cli_jobs
from tasksapp.web.models import OperatorAction
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def tempo(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("tempo", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _dead(**fields) -> Job:
    return JobFactory(state=JobState.DEAD, finished_at=timezone.now(), **fields)


def test_jobs_list_shows_the_jobs_a_filter_matches_newest_first():
    old = _dead(queue="mail", last_error="SMTPError: 421 busy\nmore")
    new = _dead(queue="mail")
    _dead(queue="other")
    out, _ = tempo("jobs", "list", "--queue", "mail", "--state", "dead")
    header, *lines = out.splitlines()
    assert header.split()[:3] == ["id", "state", "queue"]
    assert [int(line.split()[0]) for line in lines] == [new.id, old.id]
    assert lines[1].endswith("SMTPError: 421 busy")


def test_jobs_list_as_json_and_within_its_limit():
    jobs = [_dead(payload={"n": n}) for n in range(3)]
    out, _ = tempo("jobs", "list", "--json", "--limit", "2")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["id"] for row in rows] == [jobs[2].id, jobs[1].id]
    assert rows[0]["payload"] == {"n": 2} and rows[0]["state"] == "dead"
    with pytest.raises(CommandError, match="^--limit must be"):
        tempo("jobs", "list", "--limit", "0")


def test_jobs_list_refuses_a_bad_filter_with_its_message():
    with pytest.raises(CommandError) as raised:
        tempo("jobs", "list", "--state", "gone")
    assert str(raised.value).startswith("filter.state must be a state")


def test_jobs_show_prints_the_job_and_each_traceback():
    job = _dead(
        errors=[
            {
                "attempt": 1,
                "at": "2026-11-29T05:00:00+00:00",
                "kind": "exception",
                "error": "KeyError: 'x'",
                "traceback": "Traceback (most recent call last):\n  boom\nKeyError: 'x'\n",
            },
        ],
    )
    out, _ = tempo("jobs", "show", str(job.id))
    assert f"job {job.id}: dead" in out
    assert "attempt 1 at 2026-11-29T05:00:00+00:00 (exception): KeyError: 'x'" in out
    assert "Traceback (most recent call last):\n  boom\nKeyError: 'x'" in out
    shown = json.loads(tempo("jobs", "show", str(job.id), "--json")[0])
    assert shown["errors"][0]["traceback"].startswith("Traceback")
    with pytest.raises(CommandError, match=r"^job 0 does not exist\.$"):
        tempo("jobs", "show", "0")


def test_jobs_retry_dry_run_then_for_real_recorded_once():
    dead = [_dead(handler="tests.handlers.recording.noop") for _ in range(3)]
    _dead()  # another handler
    out, _ = tempo("jobs", "retry", "--handler-prefix", "tests.handlers.recording.no", "--dry-run")
    assert out.strip() == "retry: 3 matched, 3 would change"
    assert Job.objects.filter(state=JobState.DEAD).count() == 4
    assert not OperatorAction.objects.exists()
    out, err = tempo("jobs", "retry", "--handler-prefix", "tests.handlers.recording.no")
    assert out.strip() == "retry: 3 matched, 3 changed" and "3 matched" in err
    assert {j.state for j in Job.objects.filter(id__in=[j.id for j in dead])} == {"scheduled"}
    (row,) = OperatorAction.objects.all()
    assert (row.action, row.via, row.user) == ("bulk_retry", "command", None)
    assert row.username.startswith("manage.py")
    assert row.details["filter"] == {"handler_prefix": "tests.handlers.recording.no"}
    assert (row.details["matched"], row.details["changed"]) == (3, 3)


def test_jobs_cancel_and_run_now_by_ids():
    later = timezone.now() + dt.timedelta(hours=3)
    first, second, third = (JobFactory(run_at=later) for _ in range(3))
    out, _ = tempo("jobs", "run-now", "--id", str(first.id), "--id", str(second.id))
    assert out.strip() == "run_now: 2 matched, 2 changed"
    first.refresh_from_db()
    assert first.run_at <= timezone.now()
    out, _ = tempo("jobs", "cancel", "--id", str(second.id), "--id", str(third.id))
    assert out.strip() == "cancel: 2 matched, 2 changed"
    states = dict(Job.objects.values_list("id", "state"))
    assert states == {first.id: "scheduled", second.id: "cancelled", third.id: "cancelled"}


def test_an_action_needs_a_filter():
    _dead()
    fields = ", ".join(sorted(bulk.FILTER_FIELDS))
    with pytest.raises(CommandError) as raised:
        tempo("jobs", "retry")
    assert str(raised.value) == bulk.ERR_FILTER_EMPTY.format(fields=fields)
    assert Job.objects.get().state == JobState.DEAD and not OperatorAction.objects.exists()


def test_every_filter_option_gives_its_criterion():
    options = {
        "ids": [1, 2],
        "state": ["dead"],
        "priority": 3,
        **{
            criterion: "x"
            for criterion in cli_jobs.FILTER_OPTIONS.values()
            if criterion not in ("ids", "state", "priority")
        },
    }
    assert set(cli_jobs.filter_of(options)) == bulk.FILTER_FIELDS
    assert cli_jobs.filter_of({"state": None, "queue": "q"}) == {"queue": "q"}


def test_queues_pause_and_resume_are_recorded():
    out, _ = tempo("queues", "pause", "mail")
    assert out.strip() == "queue mail: paused"
    assert JobQueue.objects.get(name="mail").paused
    out, _ = tempo("queues", "resume", "mail")
    assert out.strip() == "queue mail: running"
    assert not JobQueue.objects.get(name="mail").paused
    rows = list(OperatorAction.objects.order_by("id").values_list("action", "via", "details"))
    assert rows == [
        ("queue_pause", "command", {"before": {"paused": None}, "after": {"paused": True}}),
        ("queue_resume", "command", {"before": {"paused": True}, "after": {"paused": False}}),
    ]
    with pytest.raises(CommandError):
        tempo("queues", "pause", "no spaces allowed")


def test_a_new_subcommand_is_one_registered_function(monkeypatch):
    monkeypatch.setattr(tempo_cli, "SUBCOMMANDS", dict(tempo_cli.discovered()))

    def arguments(parser):
        parser.add_argument("--strict", action="store_true")

    @tempo_cli.subcommand("health", help="Say whether every part is up", arguments=arguments)
    def health(command, options):
        command.stdout.write(f"ok (strict: {options['strict']})")

    assert tempo("health", "--strict")[0].strip() == "ok (strict: True)"
    assert tempo("jobs", "list")[0].startswith("        id")  # the others stay


def test_an_unknown_subcommand_is_refused():
    with pytest.raises(CommandError):
        tempo("jobs", "delete")
    with pytest.raises(CommandError):
        tempo()

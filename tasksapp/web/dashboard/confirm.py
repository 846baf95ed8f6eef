"""The confirmation step of the actions that stop work: cancel a job, pause a recurring
task, a schedule or a queue. Their buttons open this page (GET: nothing changes); its
form posts to the action's own URL, with the CSRF token, as the button used to."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from tasksapp.engine.models import LEASED_STATES, Job
from tasksapp.recurring.models import RecurringTask
from tasksapp.schedules.models import Schedule
from tasksapp.web.dashboard.access import operator_required

MAX_QUEUE_NAME = 64
ERR_NO_CONFIRM = "nothing to confirm for {action} on {kind}."
ERR_NO_TARGET = "{kind} {target} does not exist."


@dataclass(frozen=True)
class Confirmation:
    question: str
    effect: str
    button: str
    action_url: str
    back_url: str


def _job_cancel(target: str) -> Confirmation:
    job = Job.objects.filter(id=int(target)).only("id", "handler", "state").first()
    if job is None:
        raise Http404(ERR_NO_TARGET.format(kind="job", target=target))
    if job.state in LEASED_STATES:
        effect = (
            f"Job {job.id} ({job.handler}) is {job.state}: its worker is asked to stop the "
            "handler where it checks; a handler that never checks finishes or ends at its "
            "time limit. The job then ends cancelled."
        )
    else:
        effect = (
            f"Job {job.id} ({job.handler}) is {job.state}: it ends cancelled at once and "
            "does not run. Retry brings it back."
        )
    return Confirmation(
        f"Cancel job {job.id}?",
        effect,
        "Yes, cancel the job",
        reverse("dashboard:job-action", args=[job.id, "cancel"]),
        reverse("dashboard:job-detail", args=[job.id]),
    )


def _task_pause(target: str) -> Confirmation:
    task = RecurringTask.objects.filter(id=int(target)).only("id", "name").first()
    if task is None:
        raise Http404(ERR_NO_TARGET.format(kind="recurring task", target=target))
    return Confirmation(
        f"Pause the recurring task {task.name}?",
        "No more slices are planned while it is paused; jobs already planned still run. "
        "Resume plans from the current slice on.",
        "Yes, pause the task",
        reverse("dashboard:task-action", args=[task.id, "pause"]),
        reverse("dashboard:recurring-detail", args=[task.id]),
    )


def _schedule_pause(target: str) -> Confirmation:
    schedule = Schedule.objects.filter(id=int(target)).only("id", "name").first()
    if schedule is None:
        raise Http404(ERR_NO_TARGET.format(kind="schedule", target=target))
    return Confirmation(
        f"Pause the schedule {schedule.name}?",
        "It fires no more jobs while it is paused; its catch-up rule decides what happens "
        "to the fire times missed when it is resumed.",
        "Yes, pause the schedule",
        reverse("dashboard:schedule-action", args=[schedule.id, "pause"]),
        reverse("dashboard:schedule-detail", args=[schedule.id]),
    )


def _queue_pause(target: str) -> Confirmation:
    if len(target) > MAX_QUEUE_NAME:  # the pause itself checks the name
        raise Http404(ERR_NO_TARGET.format(kind="queue", target=target[:40]))
    return Confirmation(
        f"Pause the queue {target}?",
        "No job of this queue is claimed while it is paused; jobs already running finish.",
        "Yes, pause the queue",
        reverse("dashboard:queue-action", args=[target, "pause"]),
        reverse("dashboard:queues"),
    )


CONFIRMED = {
    ("jobs", "cancel"): _job_cancel,
    ("recurring", "pause"): _task_pause,
    ("schedules", "pause"): _schedule_pause,
    ("queues", "pause"): _queue_pause,
}
NUMERIC_KINDS = ("jobs", "recurring", "schedules")


@login_required
@operator_required
@require_GET
def action_confirm(request: HttpRequest, kind: str, target: str, action: str) -> HttpResponse:
    make = CONFIRMED.get((kind, action))
    if make is None:
        raise Http404(ERR_NO_CONFIRM.format(action=action[:40], kind=kind[:40]))
    if kind in NUMERIC_KINDS and not (target.isascii() and target.isdigit() and len(target) < 19):
        raise Http404(ERR_NO_TARGET.format(kind=kind, target=target[:40]))
    return render(request, "tempo/dashboard/confirm.html", {"confirm": make(target)})

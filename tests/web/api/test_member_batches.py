"""Many members at once through the API (POST /api/members/batch/): deleted, deactivated
and activated with their waiting jobs, one audit row per request, bad input refused."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.recurring.models import FreeOrdinal, Member
from tasksapp.recurring.services import member_create_many, plan_due_slices, recurring_task_create
from tasksapp.web.api.members import MAX_REQUEST_IDS
from tasksapp.web.models import OperatorAction
from tests.web.dashboard.fixtures import HANDLER

pytestmark = pytest.mark.django_db
URL = "/api/members/batch/"


@pytest.fixture
def planned(settings):
    settings.TEMPO_PLANNING = {
        "PHASE_STRATEGY": "golden",
        "HORIZON_SECONDS": 26 * 3600.0,
        "LATE_GRACE_SECONDS": 900.0,
    }
    members = member_create_many(external_ids=[f"m{n}" for n in range(6)])
    recurring_task_create(
        name="sync",
        handler=HANDLER,
        period=dt.timedelta(days=1),
        slices=3,
        epoch=timezone.now() - dt.timedelta(hours=1),
    )
    plan_due_slices()
    return members


def jobs_in(members, state) -> int:
    ids = [m.id for m in members]
    return Job.objects.filter(payload__member_id__in=ids, state=state).count()


def test_deactivate_activate_and_delete_many(operator_api, planned):
    some, others = planned[:4], planned[4:]
    ids = [m.id for m in some]
    waiting = jobs_in(some, JobState.SCHEDULED)
    assert waiting >= len(some)

    answer = operator_api.post(URL, {"action": "deactivate", "ids": ids}, format="json")
    assert answer.status_code == 200
    assert answer.json() == {"action": "deactivate", "members": 4, "jobs": waiting}
    assert not Member.objects.filter(id__in=ids, active=True).exists()
    assert jobs_in(some, JobState.CANCELLED) == waiting

    answer = operator_api.post(URL, {"action": "activate", "ids": ids}, format="json")
    assert answer.json() == {"action": "activate", "members": 4, "jobs": waiting}
    assert jobs_in(some, JobState.SCHEDULED) == waiting

    answer = operator_api.post(URL, {"action": "delete", "ids": [*ids, 10**12]}, format="json")
    assert answer.json() == {"action": "delete", "members": 4, "jobs": waiting}
    assert not Member.objects.filter(id__in=ids).exists()
    assert FreeOrdinal.objects.count() == 4
    assert jobs_in(others, JobState.CANCELLED) == 0

    rows = OperatorAction.objects.order_by("id")
    assert [(r.action, r.target_type, r.target_id) for r in rows] == [
        ("members_deactivate", "members", "ids"),
        ("members_activate", "members", "ids"),
        ("members_delete", "members", "ids"),
    ]
    assert rows.last().details == {
        "ids": [*ids, 10**12],
        "ids_asked": 5,
        "members": 4,
        "jobs": waiting,
    }


@pytest.mark.parametrize(
    "body, field",
    [
        ({"action": "remove", "ids": [1]}, "action"),
        ({"action": "delete", "ids": []}, "ids"),
        ({"action": "delete", "ids": ["x"]}, "ids"),
        ({"action": "delete", "ids": [0]}, "ids"),
        ({"action": "delete", "ids": [2**63]}, "detail"),  # refused by the JSON parser
        ({"action": "delete", "ids": list(range(1, MAX_REQUEST_IDS + 2))}, "ids"),
        ({"action": "delete"}, "ids"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(operator_api, planned, body, field):
    before = sorted(Job.objects.values_list("id", "state"))
    answer = operator_api.post(URL, body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()
    assert Member.objects.count() == len(planned)
    assert sorted(Job.objects.values_list("id", "state")) == before
    assert not OperatorAction.objects.exists()


def test_a_viewer_may_not(viewer_api, planned):
    ids = [m.id for m in planned]
    answer = viewer_api.post(URL, {"action": "delete", "ids": ids}, format="json")
    assert answer.status_code == 403
    assert Member.objects.count() == len(planned)
    assert list(OperatorAction.objects.values_list("action", flat=True)) == ["denied:members_batch"]

"""POST /api/jobs/bulk/ (an operator's action on every job a filter matches, one audit
row each) and POST /api/jobs/bulk-create/ (a batch of jobs, all or none)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tasksapp.engine.models import Job, JobState
from tasksapp.engine.services import bulk as engine_bulk
from tasksapp.engine.services.bulk import ACTIONS, ERR_STATE, BulkAction
from tasksapp.web import bulk as web_bulk
from tasksapp.web.api import bulk as api_bulk
from tasksapp.web.models import OperatorAction
from tests.factories import JobFactory
from tests.web.dashboard.fixtures import (  # noqa: F401 - fixtures
    HANDLER,
    operator,
    operator_api,
    roles,
    viewer,
    viewer_api,
)

pytestmark = pytest.mark.django_db
BULK = "/api/jobs/bulk/"
CREATE = "/api/jobs/bulk-create/"


def _dead(count: int) -> list[int]:
    now = timezone.now()
    return [
        JobFactory(state=JobState.DEAD, finished_at=now, attempts=5, max_attempts=5).id
        for _ in range(count)
    ]


def _states(ids) -> list[str]:
    return list(Job.objects.filter(id__in=ids).order_by("id").values_list("state", flat=True))


def test_a_viewer_is_refused_and_the_refusal_recorded(viewer_api):  # noqa: F811
    ids = _dead(2)
    body = {"action": "retry", "filter": {"state": "dead"}, "dry_run": False}
    response = viewer_api.post(BULK, body, format="json")
    assert response.status_code == 403
    assert _states(ids) == ["dead", "dead"]
    (refusal,) = OperatorAction.objects.all()
    assert (refusal.action, refusal.username) == ("denied:bulk_action", "vera")


def test_a_dry_run_counts_and_changes_and_records_nothing(operator_api):  # noqa: F811
    ids = _dead(3)
    JobFactory()  # scheduled: matched by no filter below
    body = {"action": "retry", "filter": {"ids": ids}, "dry_run": True}
    response = operator_api.post(BULK, body, format="json")
    assert response.status_code == 200
    assert response.json() == {
        "action": "retry",
        "dry_run": True,
        "matched": 3,
        "changed": 3,
        "complete": True,
        "next_after": None,
    }
    assert _states(ids) == ["dead"] * 3
    assert not OperatorAction.objects.exists()


def test_an_action_changes_the_jobs_and_is_recorded_once(operator_api):  # noqa: F811
    ids = _dead(3)
    done = JobFactory(state=JobState.SUCCEEDED, finished_at=timezone.now())
    filter_ = {"handler_prefix": "tests.handlers.", "state": ["dead", "succeeded"]}
    response = operator_api.post(
        BULK, {"action": "retry", "filter": filter_, "dry_run": False}, format="json"
    )
    assert response.status_code == 200
    assert (response.json()["matched"], response.json()["changed"]) == (4, 3)
    assert _states(ids) == ["scheduled"] * 3 and _states([done.id]) == ["succeeded"]
    (row,) = OperatorAction.objects.all()
    assert (row.action, row.via, row.username, row.target_type) == (
        "bulk_retry",
        "api",
        "otto",
        "jobs",
    )
    assert row.details == {
        "filter": filter_,
        "matched": 4,
        "changed": 3,
        "complete": True,
        "next_after": None,
    }


def test_cancel_and_run_now(operator_api):  # noqa: F811
    later = timezone.now() + dt.timedelta(hours=2)
    waiting = [JobFactory(run_at=later, queue="mail").id for _ in range(2)]
    moved = operator_api.post(
        BULK, {"action": "run_now", "filter": {"queue": "mail"}, "dry_run": False}, format="json"
    )
    assert moved.json()["changed"] == 2
    assert all(j.run_at <= timezone.now() for j in Job.objects.filter(id__in=waiting))
    cancelled = operator_api.post(
        BULK, {"action": "cancel", "filter": {"ids": waiting}, "dry_run": False}, format="json"
    )
    assert cancelled.json()["changed"] == 2 and _states(waiting) == ["cancelled"] * 2
    actions = OperatorAction.objects.order_by("id").values_list("action", flat=True)
    assert list(actions) == ["bulk_run_now", "bulk_cancel"]


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"action": "delete", "filter": {"state": "dead"}, "dry_run": False}, "action", None),
        ({"action": "retry", "filter": {"state": "dead"}}, "dry_run", None),
        ({"action": "retry", "filter": "dead", "dry_run": False}, "filter", None),
        (
            {"action": "retry", "filter": {"state": "gone"}, "dry_run": False},
            "filter",
            ERR_STATE.format(states=", ".join(JobState.values), value="gone"),
        ),
        ({"action": "retry", "filter": {}, "dry_run": False}, "filter", None),
        (
            {"action": "retry", "filter": {"state": "dead"}, "dry_run": 0, "after": -1},
            "after",
            None,
        ),
    ],
)
def test_bad_input_is_400_and_changes_and_records_nothing(operator_api, body, field, text):  # noqa: F811
    ids = _dead(1)
    response = operator_api.post(BULK, body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert field in errors, errors
    if text is not None:
        assert errors[field] == [text]
    assert _states(ids) == ["dead"] and not OperatorAction.objects.exists()


def test_a_long_action_answers_within_its_budget_and_goes_on_from_next_after(
    operator_api,  # noqa: F811
    monkeypatch,
):
    monkeypatch.setattr(engine_bulk, "CHUNK_JOBS", 2)
    monkeypatch.setattr(api_bulk, "REQUEST_SECONDS", 1e-9)
    ids = _dead(5)
    answers, after = [], None
    while True:
        body = {"action": "retry", "filter": {"state": "dead"}, "dry_run": False}
        response = operator_api.post(
            BULK, body | ({"after": after} if after else {}), format="json"
        )
        answers.append(response.json())
        after = answers[-1]["next_after"]
        if answers[-1]["complete"]:
            break
    assert [a["changed"] for a in answers] == [2, 2, 1]
    assert [a["next_after"] for a in answers] == [ids[1], ids[3], None]
    assert _states(ids) == ["scheduled"] * 5
    assert OperatorAction.objects.filter(action="bulk_retry").count() == 3


def test_an_interrupted_action_is_recorded_with_what_it_changed(operator, monkeypatch):  # noqa: F811
    monkeypatch.setattr(engine_bulk, "CHUNK_JOBS", 2)
    real = ACTIONS["retry"]
    calls = []

    def change_then_fail(ids):
        calls.append(ids)
        if len(calls) == 2:
            raise RuntimeError("database went away")
        return real.change(ids)

    monkeypatch.setitem(ACTIONS, "retry", BulkAction(real.eligible, change_then_fail))
    ids = _dead(5)
    with pytest.raises(RuntimeError):
        web_bulk.job_bulk_action_audited(
            user=operator, via="api", action="retry", filter={"state": "dead"}, dry_run=False
        )
    assert _states(ids) == ["scheduled", "scheduled", "dead", "dead", "dead"]
    (row,) = OperatorAction.objects.all()
    assert row.details["changed"] == 2 and row.details["complete"] is False
    assert row.details["interrupted_by"] == "RuntimeError"


def test_a_long_list_of_ids_is_recorded_cut(operator):  # noqa: F811
    ids = list(range(1, 1001))
    web_bulk.job_bulk_action_audited(
        user=operator, via="api", action="cancel", filter={"ids": ids}, dry_run=False
    )
    (row,) = OperatorAction.objects.all()
    assert row.details["filter"] == {"ids": ids[: web_bulk.RECORDED_IDS], "ids_count": 1000}
    assert (row.details["matched"], row.details["changed"]) == (0, 0)


# --- bulk create ---------------------------------------------------------------------------


def _job(n: int, **extra) -> dict:
    run_at = (timezone.now() + dt.timedelta(hours=1)).isoformat()
    return {"handler": HANDLER, "run_at": run_at, "payload": {"n": n}, **extra}


def test_a_batch_is_stored_and_answered_in_its_order(operator_api):  # noqa: F811
    response = operator_api.post(
        CREATE, {"jobs": [_job(n, priority=n) for n in range(5)]}, format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["created"] == 5
    stored = Job.objects.in_bulk([r["id"] for r in body["results"]])
    assert [stored[r["id"]].payload["n"] for r in body["results"]] == list(range(5))
    assert all(r["created"] and r["state"] == "scheduled" for r in body["results"])
    assert not OperatorAction.objects.exists()  # scheduling is ordinary traffic


def test_a_batch_with_a_bad_job_stores_nothing_and_names_it(operator_api):  # noqa: F811
    jobs = [_job(0), _job(1, max_attempts=0), _job(2)]
    response = operator_api.post(CREATE, {"jobs": jobs}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["index"] == 1 and "max_attempts" in body["errors"]
    twice = [_job(0, idempotency_key="k"), _job(0, idempotency_key="k")]
    response = operator_api.post(CREATE, {"jobs": twice}, format="json")
    assert response.status_code == 400 and response.json()["index"] == 1
    assert "idempotency_key" in response.json()["errors"]
    assert not Job.objects.exists()


def test_a_key_of_another_job_is_a_conflict_that_stores_nothing(operator_api):  # noqa: F811
    first = operator_api.post(CREATE, {"jobs": [_job(1, idempotency_key="a")]}, format="json")
    again = operator_api.post(CREATE, {"jobs": [_job(1, idempotency_key="a")]}, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["results"][0]["created"] is False
    conflict = operator_api.post(
        CREATE,
        {"jobs": [_job(2, idempotency_key="b"), _job(9, idempotency_key="a")]},
        format="json",
    )
    assert conflict.status_code == 409
    assert conflict.json()["index"] == 1
    assert conflict.json()["job_id"] == first.json()["results"][0]["id"]
    assert Job.objects.count() == 1


@pytest.mark.parametrize("body", [{}, {"jobs": []}, {"jobs": "x"}, [1], {"jobs": [1] * 1001}])
def test_jobs_must_be_a_list_of_one_to_the_limit(operator_api, body):  # noqa: F811
    response = operator_api.post(CREATE, body, format="json")
    assert response.status_code == 400
    assert response.json() == {"jobs": [api_bulk.ERR_JOBS]}


def test_a_viewer_cannot_create_a_batch(viewer_api):  # noqa: F811
    response = viewer_api.post(CREATE, {"jobs": [_job(0)]}, format="json")
    assert response.status_code == 403 and not Job.objects.exists()
    assert OperatorAction.objects.get().action == "denied:job_create_many"

"""Dashboard pages: who may see them, what they show, and empty states."""

from __future__ import annotations

import datetime as dt

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from tasksapp.engine.models import JobState
from tasksapp.graphs.models import GraphState, TaskRun, TaskState
from tasksapp.graphs.planner import graph_plan
from tasksapp.recurring.models import SlicePlan
from tasksapp.recurring.services import member_create_many, recurring_task_create, slice_plan
from tasksapp.web.selectors.jobs import cursor_encode
from tests.web.dashboard.fixtures import HANDLER, make_job, run_demo_graph

pytestmark = pytest.mark.django_db

PAGES = [
    ("dashboard:overview", []),
    ("dashboard:overview-data", []),
    ("dashboard:recurring-list", []),
    ("dashboard:job-list", []),
    ("dashboard:audit", []),
]


@pytest.fixture
def task():
    return recurring_task_create(
        name="daily sync",
        handler=HANDLER,
        period=dt.timedelta(days=1),
        slices=24,
        epoch=timezone.now().replace(hour=0, minute=0, second=0, microsecond=0),
    )


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_anonymous_is_sent_to_login(client, name, args):
    response = client.get(reverse(name, args=args))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


@pytest.mark.parametrize(("name", "args"), PAGES)
def test_user_without_a_role_is_refused(client, stranger, name, args):
    client.force_login(stranger)
    assert client.get(reverse(name, args=args)).status_code == 403


def test_job_and_task_pages_need_a_role(client, stranger, task):
    job = make_job()
    client.force_login(stranger)
    assert client.get(reverse("dashboard:job-detail", args=[job.id])).status_code == 403
    assert client.get(reverse("dashboard:recurring-detail", args=[task.id])).status_code == 403


def test_login_with_password_opens_the_overview(client, viewer):
    response = client.post(
        reverse("dashboard:login"), {"username": "vera", "password": "vera-password-1"}
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_login_refuses_a_wrong_password(client, viewer):
    response = client.post(reverse("dashboard:login"), {"username": "vera", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


def test_logout_is_a_post(viewer_client):
    response = viewer_client.post(reverse("dashboard:logout"))
    assert response.status_code == 302
    assert viewer_client.get("/").status_code == 302


# --- overview -----------------------------------------------------------------------------


def test_overview_empty_states(viewer_client):
    html = viewer_client.get("/").content.decode()
    assert "No dispatcher has sent a heartbeat in the last hour" in html
    assert "No worker has sent a heartbeat" in html
    assert "No dispatcher counters in the last 24 hours" in html
    assert "No dispatcher is alive" in html
    assert "vendor/chart-4.5.0.umd.min.js" in html
    assert "data-role>viewer<" in html


def test_overview_shows_live_data(viewer_client, activity):
    html = viewer_client.get("/").content.decode()
    assert 'data-state="succeeded"' in html
    assert "disp-a" in html and "disp-gone" in html and "worker-1" in html
    assert "0, 1, 2, 3" in html  # partitions led by the live dispatcher
    assert 'class="badge down">down' in html  # the silent one
    assert "No dispatcher is alive" not in html


def test_overview_json(viewer_client, activity):
    data = viewer_client.get(reverse("dashboard:overview-data")).json()
    states = {s["state"]: s for s in data["states"]}
    assert states["succeeded"]["count"] == 27 and states["succeeded"]["exact"]
    assert states["dead"]["count"] == 3
    assert data["lag"]["hour"]["started"] == 30
    assert data["lag"]["hour"]["retries"] == 6
    assert data["lag"]["hour"]["failures"] == 3
    assert 0 < data["lag"]["hour"]["p50_ms"] < data["lag"]["hour"]["p99_ms"] <= 300
    assert sum(data["throughput"]["succeeded"]) == 27
    assert sum(data["throughput"]["failed"]) == 3
    assert data["cost"][0]["cost"] == 3 * 100 + 1 * 10 + 2
    assert data["cost"][0]["statements_per_job"] == pytest.approx(40 / 27)
    owners = {p["partition"]: p["owner"] for p in data["partitions"]}
    assert owners[0] == "disp-a" and owners[4] is None


# --- jobs ---------------------------------------------------------------------------------


def test_job_list_empty_state(viewer_client):
    html = viewer_client.get(reverse("dashboard:job-list")).content.decode()
    assert "No jobs yet" in html


def test_job_list_filters(viewer_client):
    now = timezone.now()
    a = make_job(JobState.SCHEDULED, run_at=now + dt.timedelta(hours=1))
    b = make_job(JobState.DEAD, run_at=now - dt.timedelta(hours=1))
    c = make_job(JobState.SCHEDULED, run_at=now + dt.timedelta(hours=5))
    url = reverse("dashboard:job-list")

    def ids(**query):
        response = viewer_client.get(url, query)
        return [job.id for job in response.context["page"].jobs]

    assert ids() == [c.id, a.id, b.id]
    assert ids(state="dead") == [b.id]
    assert ids(handler=HANDLER, state="scheduled") == [c.id, a.id]
    start = (now + dt.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M")
    end = (now + dt.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")
    assert ids(run_at_from=start, run_at_to=end) == [a.id]
    html = viewer_client.get(url, {"handler": "no.such"}).content.decode()
    assert "No job matches these filters" in html


def test_job_list_filter_errors_are_shown_not_raised(viewer_client):
    url = reverse("dashboard:job-list")
    for query, text in [
        ({"run_at_from": "yesterday"}, "run_at_from: not a date and time"),
        ({"task": "987654"}, "task: no recurring task with id 987654"),
        ({"member": "ghost"}, "member: no member with external id"),
        ({"state": "sleeping"}, "state must be one of"),
        ({"cursor": "not-a-cursor"}, "cursor is not valid"),
    ]:
        response = viewer_client.get(url, query)
        assert response.status_code == 400  # shown on the page, not applied
        assert text in response.content.decode()


def test_job_list_pages_by_keyset(viewer_client):
    now = timezone.now()
    # 120 jobs, some sharing a run time: ties are broken by id.
    jobs = [make_job(run_at=now + dt.timedelta(seconds=i // 3)) for i in range(120)]
    seen, cursor, pages = [], None, 0
    while True:
        query = {"cursor": cursor} if cursor else {}
        page = viewer_client.get(reverse("dashboard:job-list"), query).context["page"]
        seen += [job.id for job in page.jobs]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 3
    expected = sorted(jobs, key=lambda j: (j.run_at, j.id), reverse=True)
    assert seen == [j.id for j in expected]


def test_job_list_by_task_and_member(viewer_client, task):
    members = member_create_many(external_ids=[f"m-{i}" for i in range(40)])
    now = timezone.now()
    period = task.period
    plan = None
    for index in range(24):
        plan = slice_plan(task=task, period=1, slice_index=index, now=now - period)
    assert plan is not None
    other = make_job()
    url = reverse("dashboard:job-list")
    task_jobs = viewer_client.get(url, {"task": task.id}).context["page"].jobs
    assert len(task_jobs) == 40 and other.id not in {j.id for j in task_jobs}
    member = members[7]
    member_jobs = viewer_client.get(url, {"member": member.external_id}).context["page"].jobs
    assert [j.idempotency_key for j in member_jobs] == [f"plan:{task.id}:1:{member.id}"]


def test_job_detail_timeline_and_errors(viewer_client):
    now = timezone.now()
    job = make_job(
        JobState.DEAD,
        created_at=now - dt.timedelta(minutes=10),
        run_at=now - dt.timedelta(minutes=3),
        attempts=2,
        max_attempts=2,
        claimed_at=now - dt.timedelta(minutes=2),
        started_at=now - dt.timedelta(minutes=2),
        finished_at=now - dt.timedelta(minutes=1),
        last_error="boom 2",
        errors=[
            {
                "attempt": 1,
                "at": (now - dt.timedelta(minutes=4)).isoformat(),
                "error": "boom 1",
                "kind": "exception",
            },
            {
                "attempt": 2,
                "at": (now - dt.timedelta(minutes=1)).isoformat(),
                "error": "boom 2",
                "kind": "exception",
            },
        ],
    )
    response = viewer_client.get(reverse("dashboard:job-detail", args=[job.id]))
    html = response.content.decode()
    labels = [e.label for e in response.context["timeline"]]
    assert labels[0] == "created" and labels[-1] == "dead"
    assert "attempt 1 failed" in labels and "attempt 2 failed" in labels
    assert "boom 1" in html and "boom 2" in html
    assert "Transactional" in html
    assert 'id="graph"' not in html
    assert "Viewer: actions are for operators." in html


@pytest.mark.django_db(transaction=True)
def test_job_detail_draws_the_graph_of_a_graph_job_by_layers(viewer_client):
    graph = run_demo_graph()
    assert graph.state == GraphState.SUCCEEDED
    response = viewer_client.get(reverse("dashboard:job-detail", args=[graph.job_id]))
    view = response.context["graph"]
    plan = graph_plan(has=graph.has, wants=graph.wants)
    assert [[t.task for t in layer] for layer in view.layers] == [list(x) for x in plan.layers]
    assert {t.state for t in view.tasks} == {TaskState.SUCCEEDED}
    assert all(t.attempts == 1 and t.started_at and t.finished_at for t in view.tasks)
    html = response.content.decode()
    assert 'id="graph"' in html and "on failure: abort" in html
    for index, layer in enumerate(plan.layers):
        assert f"layer {index}</h3>" in html
        for task in layer:
            assert f'data-task="{task}" data-state="succeeded"' in html
    assert "person-" in html  # the tasks' results


@pytest.mark.django_db(transaction=True)
def test_job_detail_shows_a_failed_task_and_the_skipped_ones(viewer_client):
    graph = run_demo_graph(failure_rate=1.0)
    assert graph.state == GraphState.ABORTED
    task_job = TaskRun.objects.get(graph_run=graph, task="demo.load_tokens").job_id
    response = viewer_client.get(reverse("dashboard:job-detail", args=[task_job]))
    view = response.context["graph"]
    assert view.id == graph.id  # a task's job shows the graph it belongs to
    assert view.layers[0][0].state == TaskState.FAILED
    assert {t.state for layer in view.layers[1:] for t in layer} <= {
        TaskState.SKIPPED,
        TaskState.WAITING,
    }
    html = response.content.decode()
    assert "did not answer" in html and f"graph job #{graph.job_id}" in html
    assert 'data-task="demo.load_tokens" data-state="failed"' in html


def test_job_detail_missing_job_is_404(viewer_client):
    assert viewer_client.get(reverse("dashboard:job-detail", args=[999999])).status_code == 404


# --- recurring tasks ----------------------------------------------------------------------


def test_recurring_list_empty_and_filled(viewer_client, task):
    html = viewer_client.get(reverse("dashboard:recurring-list")).content.decode()
    assert "daily sync" in html and "1 day" in html


def test_recurring_list_empty_state(viewer_client):
    html = viewer_client.get(reverse("dashboard:recurring-list")).content.decode()
    assert "No recurring tasks yet" in html


@pytest.fixture
def mid_hour():
    """The middle of the current hour, ticking: a test comparing the hour of its own
    clock with the page's never runs across an hour's end."""
    with time_machine.travel(timezone.now().replace(minute=30), tick=True):
        yield


def test_recurring_detail_shows_the_period(viewer_client, task, mid_hour):
    members = member_create_many(external_ids=[f"m-{i}" for i in range(48)])
    now = timezone.now()
    current = (now - task.epoch) // task.period
    for index in range(3):
        slice_plan(task=task, period=current, slice_index=index, now=task.epoch)
    url = reverse("dashboard:recurring-detail", args=[task.id])
    response = viewer_client.get(url, {"member": members[5].external_id})
    view = response.context["view"]
    assert view.period == current
    assert len(view.slices) == 24 and view.planned_count == 3
    assert view.active_members == 48
    assert sum(s.members for s in view.slices) == 48
    assert view.slices[0].expected == pytest.approx(2.0)
    assert view.current_slice == now.hour  # 24 hourly slices from midnight
    assert view.slices[now.hour].current
    planned = sum(p.jobs_planned for p in SlicePlan.objects.filter(task=task))
    assert view.jobs_in_period == planned
    assert len(response.context["member_runs"]) == 5
    html = response.content.decode()
    assert "Next runs of a member" in html and 'id="member-runs"' in html
    assert "plan-data" in html


def test_recurring_detail_other_periods_and_bad_input(viewer_client, task):
    url = reverse("dashboard:recurring-detail", args=[task.id])
    response = viewer_client.get(url, {"period": "5"})
    assert response.context["view"].period == 5
    assert "No jobs planned in this period yet" in response.content.decode()
    response = viewer_client.get(url, {"period": "soon", "member": "ghost"})
    html = response.content.decode()
    assert response.status_code == 400
    assert "period must be a whole number" in html
    assert "No member with external id" in html
    assert "No active members" in html


def test_recurring_detail_missing_task_is_404(viewer_client):
    url = reverse("dashboard:recurring-detail", args=[424242])
    assert viewer_client.get(url).status_code == 404


def test_cursor_of_a_job_round_trips():
    job = make_job()
    from tasksapp.web.selectors.jobs import cursor_decode

    assert cursor_decode(cursor_encode(job)) == (job.run_at, job.id)


def test_overview_warns_when_redis_is_unreachable(viewer_client, activity):
    from tasksapp.engine.models import Dispatcher

    html = viewer_client.get("/").content.decode()
    assert 'id="redis-warning"' not in html  # database mode: nothing to say
    Dispatcher.objects.filter(name="disp-a").update(dispatch_mode="redis-unreachable")
    html = viewer_client.get("/").content.decode()
    assert "Redis is unreachable: dispatchers poll the database instead" in html
    data = viewer_client.get(reverse("dashboard:overview-data")).json()
    assert data["redis_warning"].startswith("Redis is unreachable")


def test_overview_shows_table_and_index_sizes_and_the_history(viewer_client, activity):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE tasksapp_job")
        cursor.execute(
            "SELECT pg_table_size('tasksapp_job'), pg_indexes_size('tasksapp_job'),"
            " (SELECT reloptions FROM pg_class WHERE relname = 'tasksapp_job')"
        )
        table_bytes, index_bytes, options = cursor.fetchone()
    assert "fillfactor=85" in options  # migration 0012's storage parameters
    data = viewer_client.get(reverse("dashboard:overview-data")).json()
    sizes = {t["table"]: t for t in data["tables"]}
    assert sizes["tasksapp_job"]["table_bytes"] == table_bytes > 0
    assert sizes["tasksapp_job"]["index_bytes"] == index_bytes > 0
    assert sum(data["history"]["succeeded"]) == 27  # today's, read from the rows
    html = viewer_client.get("/").content.decode()
    assert 'id="table-sizes"' in html and "tasksapp_job" in html and 'id="history-chart"' in html

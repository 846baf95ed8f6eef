"""Who may do what, everywhere: every URL of the dashboard and the API, /metrics,
/api/schema/ and the admin's operator actions, with every method they accept, for each
role. One table (MATRIX) says what each role gets; for a refused request nothing in the
database changes, and a refused mutating request by a logged-in user leaves exactly one
`denied:<action>` record. The guards below fail when a URL, a method or an admin action
exists that the table does not list.

Roles: anonymous; `norole` (logged in, no group, not staff); `staff` (staff, no group:
reaches the admin, may do nothing there); `viewer` and `operator` (their group, and
staff, so that they reach the admin); `superuser`.

Not recorded, by design: anonymous requests (sent to the login page or answered 401,
throttled, never stored) and `norole` requests to the admin, which are the admin's
login page for a user who is not staff (operators.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from tasksapp.engine.models import (
    Dispatcher,
    DispatcherCounter,
    Job,
    JobQueue,
    JobState,
    RoutingMode,
    WorkerProcess,
)
from tasksapp.engine.queues import queue_configure
from tasksapp.graphs.models import GraphRun, TaskRun
from tasksapp.graphs.services import graph_job_schedule
from tasksapp.recurring.models import FreeOrdinal, Member, RecurringTask, SlicePlan
from tasksapp.recurring.services import member_create, member_deactivate, recurring_task_create
from tasksapp.schedules.models import Schedule, ScheduleRun
from tasksapp.schedules.services import schedule_create
from tasksapp.web.models import ApiToken, OperatorAction
from tasksapp.web.operators import DENIED
from tasksapp.web.tokens import api_token_issue
from tests.web.dashboard.fixtures import HANDLER, make_job, roles  # noqa: F401

pytestmark = pytest.mark.django_db

ROLES = ["anonymous", "norole", "staff", "viewer", "operator", "superuser"]
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
# What each role may do: the role a row needs ("view", "operate"; "" for public pages).
MAY = {
    "anonymous": set(),
    "norole": set(),
    "staff": set(),
    "viewer": {"view"},
    "operator": {"view", "operate"},
    "superuser": {"view", "operate"},
}


def statuses(anonymous, norole, staff, viewer, operator, superuser=None) -> dict[str, int]:
    superuser = operator if superuser is None else superuser
    values = (anonymous, norole, staff, viewer, operator, superuser)
    return dict(zip(ROLES, values, strict=True))


# Answers by kind of endpoint (anonymous, no role, staff, viewer, operator[, superuser]).
PAGE = statuses(302, 403, 403, 200, 200)  # a dashboard page: login, then the viewer role
PAGE_ACTION = statuses(302, 403, 403, 403, 302)  # a dashboard action: back to the page
CONFIRM_PAGE = statuses(302, 403, 403, 403, 200)  # an operator's confirmation step
API_READ = statuses(401, 403, 403, 200, 200)
API_WRITE_OK = statuses(401, 403, 403, 403, 200)
API_CREATED = statuses(401, 403, 403, 403, 201)
# An admin action: login page for the non-staff; 403 for staff without view permission;
# the list again (the action is not offered) for a viewer; done and back for operators.
ADMIN_ACTION = statuses(302, 302, 403, 200, 302)


@dataclasses.dataclass(frozen=True)
class Row:
    url: str  # URL name
    method: str
    needs: str  # "view", "operate" or "" (public)
    expected: dict[str, int]
    args: dict[str, str] = dataclasses.field(default_factory=dict)  # URL arg -> object
    body: dict[str, Any] | None = None  # "@name" values are objects' ids
    action: str = ""  # the audit action of an attempt refused ("denied:" + action)

    @property
    def id(self) -> str:
        detail = f" {self.body['action']}" if self.url.startswith("admin:") else ""
        args = ",".join(str(v) for v in self.args.values())
        return f"{self.method} {self.url}{f'[{args}]' if args else ''}{detail}"


def _run_at() -> str:
    return (timezone.now() + dt.timedelta(hours=1)).isoformat()


JOB_BODY = {"handler": HANDLER, "run_at": "@run_at", "payload": {"n": 1}}
GRAPH_BODY = {"has": {"user_id": 7, "latency_scale": 0, "failure_rate": 0}, "wants": ["friends"]}
TASK_BODY = {"name": "matrix", "handler": HANDLER, "period_seconds": 86400, "slices": 24}
SCHEDULE_BODY = {"name": "matrix-new", "handler": HANDLER, "cron": "0 3 * * *"}
SCHEDULE_FORM = {  # the dashboard's form: every field, as a browser sends them
    **SCHEDULE_BODY,
    **{"timezone": "UTC", "jitter_seconds": "0", "catchup": "one", "overlap": "allow"},
    **{"catchup_window_seconds": "3600", "active": "on", "payload": "{}", "queue": "default"},
    **{"priority": "5", "max_attempts": "5", "delivery": "transactional"},
}
FIRE_RANGE = {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"}


def _admin(model: str, action: str, selected: str, audited: str) -> Row:
    return Row(
        f"admin:tasksapp_{model}_changelist",
        "POST",
        "operate",
        ADMIN_ACTION,
        body={"action": action, "_selected_action": [selected]},
        action=audited,
    )


MATRIX: list[Row] = [
    # --- the dashboard -------------------------------------------------------------
    Row("dashboard:overview", "GET", "view", PAGE),
    Row("dashboard:overview-data", "GET", "view", PAGE),
    Row("dashboard:recurring-list", "GET", "view", PAGE),
    Row("dashboard:recurring-detail", "GET", "view", PAGE, {"task_id": "task"}),
    Row(
        "dashboard:task-action",
        "POST",
        "operate",
        PAGE_ACTION,
        {"task_id": "task", "action": "pause"},
        action="pause",
    ),
    Row(
        "dashboard:task-action",
        "POST",
        "operate",
        PAGE_ACTION,
        {"task_id": "paused_task", "action": "resume"},
        action="resume",
    ),
    Row("dashboard:job-list", "GET", "view", PAGE),
    Row("dashboard:job-detail", "GET", "view", PAGE, {"job_id": "job"}),
    *[
        Row(
            "dashboard:job-action",
            "POST",
            "operate",
            PAGE_ACTION,
            {"job_id": job, "action": action},
            action=action.replace("-", "_"),
        )
        for job, action in [
            ("job", "cancel"),
            ("dead_job", "retry"),
            ("job", "run-now"),
            ("graph_job", "cancel-graph"),
        ]
    ],
    # Bulk actions from the job list: the confirmation (counts, changes nothing), the act.
    Row(
        "dashboard:job-bulk",
        "GET",
        "operate",
        CONFIRM_PAGE,
        {"action": "retry"},
        body={"scope": "filter", "state": "dead"},
    ),
    Row(
        "dashboard:job-bulk",
        "POST",
        "operate",
        PAGE_ACTION,
        {"action": "retry"},
        body={"scope": "selected", "ids": ["@dead_job"]},
        action="job-bulk",
    ),
    Row("dashboard:graph-list", "GET", "view", PAGE),
    Row("dashboard:queues", "GET", "view", PAGE),
    Row(
        "dashboard:queue-action",
        "POST",
        "operate",
        PAGE_ACTION,
        {"name": "mail", "action": "pause"},
        action="queue_pause",
    ),
    Row(
        "dashboard:queue-action",
        "POST",
        "operate",
        PAGE_ACTION,
        {"name": "held", "action": "resume"},
        action="queue_resume",
    ),
    Row(
        "dashboard:routing-action",
        "POST",
        "operate",
        PAGE_ACTION,
        {"action": "degrade"},
        body={"reason": "matrix", "critical_priority": "9"},
        action="degrade",
    ),
    Row(
        "dashboard:routing-action",
        "POST",
        "operate",
        PAGE_ACTION,
        {"action": "restore"},
        action="restore",
    ),
    Row("dashboard:schedule-list", "GET", "view", PAGE),
    Row("dashboard:schedule-detail", "GET", "view", PAGE, {"schedule_id": "schedule"}),
    # The form that creates or edits a schedule: operators only, its page too.
    Row("dashboard:schedule-create", "GET", "operate", CONFIRM_PAGE),
    Row(
        "dashboard:schedule-create",
        "POST",
        "operate",
        PAGE_ACTION,
        body={**SCHEDULE_FORM, "name": "matrix-form"},
        action="schedule_create",
    ),
    Row("dashboard:schedule-edit", "GET", "operate", CONFIRM_PAGE, {"schedule_id": "schedule"}),
    Row(
        "dashboard:schedule-edit",
        "POST",
        "operate",
        PAGE_ACTION,
        {"schedule_id": "schedule"},
        body={**SCHEDULE_FORM, "name": "matrix-edited"},
        action="schedule_edit",
    ),
    *[
        Row(
            "dashboard:schedule-action",
            "POST",
            "operate",
            PAGE_ACTION,
            {"schedule_id": schedule, "action": action},
            action="schedule_" + action.replace("-", "_"),
        )
        for schedule, action in [
            ("schedule", "pause"),
            ("paused_schedule", "resume"),
            ("schedule", "run-now"),
            ("schedule", "delete"),
        ]
    ],
    # The confirmation step of the actions that stop work: operators only, changes nothing.
    *[
        Row(
            "dashboard:action-confirm",
            "GET",
            "operate",
            CONFIRM_PAGE,
            {"kind": kind, "target": target, "action": action},
        )
        for kind, target, action in [
            ("jobs", "job", "cancel"),
            ("recurring", "task", "pause"),
            ("schedules", "schedule", "pause"),
            ("queues", "mail", "pause"),
        ]
    ],
    Row("dashboard:audit", "GET", "view", PAGE),
    Row("dashboard:tokens", "GET", "view", PAGE),
    Row(
        "dashboard:token-create",
        "POST",
        "operate",
        statuses(302, 403, 403, 403, 200),  # the page with the key
        body={"name": "matrix", "user": "@username"},
        action="token_create",
    ),
    Row(
        "dashboard:token-revoke",
        "POST",
        "operate",
        PAGE_ACTION,
        {"token_id": "token"},
        action="token_revoke",
    ),
    # The login page: a logged-in user is sent on; a wrong password shows the form again.
    Row("dashboard:login", "GET", "", statuses(200, 302, 302, 302, 302)),
    *[
        Row(
            "dashboard:login",
            method,  # Django's form views take PUT as POST
            "",
            statuses(200, 302, 302, 302, 302),
            body={"username": "nobody", "password": "wrong"},
        )
        for method in ("POST", "PUT")
    ],
    Row("dashboard:logout", "POST", "", statuses(302, 302, 302, 302, 302)),
    # --- the HTTP API (token authentication) ------------------------------------------
    Row("api:jobs", "GET", "view", API_READ),
    Row("api:jobs", "POST", "operate", API_CREATED, body=JOB_BODY, action="job_create"),
    Row("api:job", "GET", "view", API_READ, {"job_id": "job"}),
    Row("api:job-cancel", "POST", "operate", API_WRITE_OK, {"job_id": "job"}, action="cancel"),
    Row(
        "api:job-retry",
        "POST",
        "operate",
        API_WRITE_OK,
        {"job_id": "dead_job"},
        body={},
        action="retry",
    ),
    Row("api:job-run-now", "POST", "operate", API_WRITE_OK, {"job_id": "job"}, action="run_now"),
    Row(
        "api:jobs-bulk",
        "POST",
        "operate",
        API_WRITE_OK,
        body={"action": "retry", "filter": {"ids": ["@dead_job"]}, "dry_run": False},
        action="bulk_action",
    ),
    Row(
        "api:jobs-bulk-create",
        "POST",
        "operate",
        API_CREATED,
        body={"jobs": [JOB_BODY]},
        action="job_create_many",
    ),
    Row(
        "api:graph-jobs",
        "POST",
        "operate",
        API_CREATED,
        body=GRAPH_BODY,
        action="graph_job_create",
    ),
    Row(
        "api:graph-job-cancel",
        "POST",
        "operate",
        API_WRITE_OK,
        {"job_id": "graph_job"},
        action="cancel_graph",
    ),
    Row("api:graph-job-wait", "GET", "view", API_READ, {"job_id": "graph_job"}, {"timeout": 0}),
    Row("api:members", "GET", "view", API_READ),
    Row(
        "api:members",
        "POST",
        "operate",
        API_CREATED,
        body={"external_id": "matrix-new"},
        action="member_create",
    ),
    Row(
        "api:members-batch",
        "POST",
        "operate",
        API_WRITE_OK,
        body={"action": "deactivate", "ids": ["@member"]},
        action="members_batch",
    ),
    Row("api:member", "GET", "view", API_READ, {"member_id": "member"}),
    Row(
        "api:member-deactivate",
        "POST",
        "operate",
        API_WRITE_OK,
        {"member_id": "member"},
        action="deactivate",
    ),
    Row(
        "api:member-activate",
        "POST",
        "operate",
        API_WRITE_OK,
        {"member_id": "inactive_member"},
        action="activate",
    ),
    Row("api:tasks", "GET", "view", API_READ),
    Row(
        "api:tasks",
        "POST",
        "operate",
        API_CREATED,
        body=TASK_BODY,
        action="recurring_task_create",
    ),
    Row("api:task", "GET", "view", API_READ, {"task_id": "task"}),
    Row("api:task-pause", "POST", "operate", API_WRITE_OK, {"task_id": "task"}, action="pause"),
    Row(
        "api:task-resume",
        "POST",
        "operate",
        API_WRITE_OK,
        {"task_id": "paused_task"},
        action="resume",
    ),
    Row(
        "api:member-next-runs",
        "GET",
        "view",
        API_READ,
        {"task_id": "task", "member_id": "member"},
    ),
    Row("api:queues", "GET", "view", API_READ),
    Row(
        "api:queue",
        "PATCH",
        "operate",
        API_WRITE_OK,
        {"name": "mail"},
        body={"concurrency_limit": 3},
        action="queue_configure",
    ),
    Row("api:queue-pause", "POST", "operate", API_WRITE_OK, {"name": "mail"}, action="queue_pause"),
    Row(
        "api:queue-resume", "POST", "operate", API_WRITE_OK, {"name": "held"}, action="queue_resume"
    ),
    Row("api:routing", "GET", "view", API_READ),
    Row(
        "api:routing-degrade",
        "POST",
        "operate",
        API_WRITE_OK,
        body={"reason": "matrix"},
        action="degrade",
    ),
    Row("api:routing-restore", "POST", "operate", API_WRITE_OK, action="restore"),
    Row("api:schedules", "GET", "view", API_READ),
    Row(
        "api:schedules",
        "POST",
        "operate",
        API_CREATED,
        body=SCHEDULE_BODY,
        action="schedule_create",
    ),
    Row("api:schedule", "GET", "view", API_READ, {"schedule_id": "schedule"}),
    Row(
        "api:schedule",
        "PATCH",
        "operate",
        API_WRITE_OK,
        {"schedule_id": "schedule"},
        body={"jitter_seconds": 5},
        action="schedule_edit",
    ),
    Row(
        "api:schedule",
        "DELETE",
        "operate",
        API_WRITE_OK,
        {"schedule_id": "schedule"},
        action="schedule_delete",
    ),
    *[
        Row(
            f"api:schedule-{action}",
            "POST",
            "operate",
            API_WRITE_OK,
            {"schedule_id": schedule},
            action="schedule_" + action.replace("-", "_"),
        )
        for schedule, action in [
            ("schedule", "pause"),
            ("paused_schedule", "resume"),
            ("schedule", "run-now"),
        ]
    ],
    Row(
        "api:schedule-fire-times",
        "GET",
        "view",
        API_READ,
        {"schedule_id": "schedule"},
        FIRE_RANGE,
    ),
    Row("api:schedule-runs", "GET", "view", API_READ, {"schedule_id": "schedule"}),
    Row("api:schema", "GET", "view", API_READ),
    # Any other address under /api/: a JSON 404 for everyone, nothing to refuse.
    *[
        Row("api:not-found", method, "", statuses(404, 404, 404, 404, 404))
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
    ],
    Row("metrics", "GET", "view", API_READ),
    # The health verdict answers everyone alike (load balancers carry no credentials;
    # its details only the viewer role: tests/web/api/test_health.py). The matrix's data
    # has due work and no live process: unhealthy.
    Row("api:health", "GET", "", statuses(503, 503, 503, 503, 503)),
    # --- the admin's operator actions ---------------------------------------------------
    _admin("job", "retry_jobs", "@dead_job", "retry"),
    _admin("job", "cancel_jobs", "@job", "cancel"),
    _admin("job", "run_jobs_now", "@job", "run_now"),
    _admin("job", "cancel_graphs", "@graph_job", "cancel_graph"),
    _admin("member", "deactivate_members", "@member", "deactivate"),
    _admin("member", "activate_members", "@inactive_member", "activate"),
    _admin("recurringtask", "pause_tasks", "@task", "pause"),
    _admin("recurringtask", "resume_tasks", "@paused_task", "resume"),
    _admin("apitoken", "revoke_tokens", "@token", "token_revoke"),
    _admin("jobqueue", "pause_queues", "@queue", "queue_pause"),
    _admin("jobqueue", "resume_queues", "@held_queue", "queue_resume"),
    _admin("schedule", "pause_schedules", "@schedule", "schedule_pause"),
    _admin("schedule", "resume_schedules", "@paused_schedule", "schedule_resume"),
    _admin("schedule", "run_schedules_now", "@schedule", "schedule_run_now"),
]

# Everything a refused request must leave as it was (an API token's last use is
# bookkeeping of the authentication, not a change the request made).
WATCHED = [
    Job,
    Member,
    RecurringTask,
    SlicePlan,
    FreeOrdinal,
    GraphRun,
    TaskRun,
    ApiToken,
    Dispatcher,
    DispatcherCounter,
    WorkerProcess,
    JobQueue,
    RoutingMode,
    Schedule,
    ScheduleRun,
    User,
    Group,
]
NOT_WATCHED_COLUMNS = {ApiToken: {"last_used_at"}, User: {"last_login"}}


def snapshot() -> dict[str, list[dict]]:
    tables = {}
    for model in WATCHED:
        skip = NOT_WATCHED_COLUMNS.get(model, set())
        rows = model.objects.order_by("pk").values()
        tables[model.__name__] = [{k: v for k, v in r.items() if k not in skip} for r in rows]
    tables["group members"] = sorted(User.groups.through.objects.values_list("user", "group"))
    return tables


def _user(role: str) -> User | None:
    if role == "anonymous":
        return None
    user = User.objects.create(
        username=f"matrix-{role}",
        is_staff=role != "norole",
        is_superuser=role == "superuser",
    )
    if role in ("viewer", "operator"):
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def world(roles):  # noqa: F811
    task = recurring_task_create(name="nightly", handler=HANDLER, period=dt.timedelta(days=1))
    paused = recurring_task_create(
        name="paused", handler=HANDLER, period=dt.timedelta(days=1), active=False
    )
    owner = User.objects.create(username="token-owner")
    return {
        "job": make_job(),
        "dead_job": make_job(JobState.DEAD),
        "graph_job": graph_job_schedule(has=GRAPH_BODY["has"], wants=GRAPH_BODY["wants"]).job,
        "member": member_create(external_id="m-active"),
        "inactive_member": member_deactivate(member=member_create(external_id="m-inactive")),
        "task": task,
        "paused_task": paused,
        "token": api_token_issue(owner=owner, name="matrix")[0],
        "queue": queue_configure(name="mail"),
        "held_queue": queue_configure(name="held", paused=True),
        "schedule": schedule_create(name="matrix", handler=HANDLER, cron="* * * * *"),
        "paused_schedule": schedule_create(
            name="matrix-paused", handler=HANDLER, cron="* * * * *", active=False
        ),
    }


def _resolve(value: Any, world: dict, user: User | None) -> Any:
    if isinstance(value, str) and value.startswith("@"):
        name = value[1:]
        if name == "run_at":
            return _run_at()
        if name == "username":
            return user.username if user else "token-owner"
        return world[name].pk
    if isinstance(value, list):
        return [_resolve(v, world, user) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, world, user) for k, v in value.items()}
    return value


def _url(row: Row, world: dict) -> str:
    args = {k: (world[v].pk if v in world else v) for k, v in row.args.items()}
    return reverse(row.url, kwargs=args)


def _is_api(row: Row) -> bool:
    return row.url.startswith("api:") or row.url == "metrics"


def _client(row: Row, user: User | None) -> tuple[Client, dict]:
    """A client logged in as `user`: by an API token for the API, else by a session."""
    client = Client()
    headers = {}
    if user is not None:
        if _is_api(row):
            _, key = api_token_issue(owner=user, name="matrix client", trusted=True)
            headers["Authorization"] = f"Token {key}"
        else:
            client.force_login(user)
    return client, headers


def _request(row: Row, world: dict, user, client, headers, method: str | None = None):
    method = method or row.method
    url = _url(row, world)
    body = _resolve(row.body, world, user) if row.body is not None else None
    call = getattr(client, method.lower())
    if _is_api(row):
        return call(url, body, content_type="application/json", headers=headers)
    if body is None:
        return call(url, headers=headers)
    return call(url, body, headers=headers)


def _via(row: Row) -> str:
    if _is_api(row):
        return "api"
    return "admin" if row.url.startswith("admin:") else "dashboard"


CASES = [pytest.param(row, role, id=f"{row.id} as {role}") for row in MATRIX for role in ROLES]


@pytest.mark.parametrize(("row", "role"), CASES)
def test_matrix(row: Row, role: str, world):
    user = _user(role)
    refused = bool(row.needs) and row.needs not in MAY[role]
    client, headers = _client(row, user)
    before_state = snapshot()
    before_ids = set(OperatorAction.objects.values_list("id", flat=True))

    response = _request(row, world, user, client, headers)

    assert response.status_code == row.expected[role], response.content[:500]
    new = OperatorAction.objects.exclude(id__in=before_ids)
    denied = new.filter(action__startswith=DENIED)
    if not refused:
        assert not denied.exists()
        return
    assert snapshot() == before_state, "a refused request changed the database"
    recorded = (
        row.method in MUTATING
        and user is not None
        and not (role == "norole" and _via(row) == "admin")  # the admin's login page
    )
    if not recorded:
        assert not new.exists()
        return
    record = new.get()
    assert (record.action, record.user, record.username, record.via) == (
        DENIED + row.action,
        user,
        user.username,
        _via(row),
    )
    assert record.details["method"] == row.method
    assert record.details["reason"]


# --- guards: nothing may be missing from the table ---------------------------------------


def _named_patterns(patterns, namespace: str = "") -> set[str]:
    names = set()
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            if pattern.app_name == "admin" or pattern.namespace == "admin":
                continue  # the admin: its operator actions are guarded below
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            names |= _named_patterns(pattern.url_patterns, inner)
        elif isinstance(pattern, URLPattern):
            assert pattern.name, f"an unnamed URL pattern {pattern.pattern} cannot be listed"
            names.add(f"{namespace}{pattern.name}")
    return names


def test_every_url_is_in_the_matrix():
    listed = {row.url for row in MATRIX if not row.url.startswith("admin:")}
    missing = _named_patterns(get_resolver().url_patterns) - listed
    assert not missing, f"URLs with no row in MATRIX: {sorted(missing)}"


def test_every_admin_operator_action_is_in_the_matrix():
    from django.contrib import admin

    listed = {(row.url, row.body["action"]) for row in MATRIX if row.url.startswith("admin:")}
    actions = set()
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != "tasksapp":
            continue
        for name in model_admin.actions or []:
            changelist = f"admin:tasksapp_{model._meta.model_name}_changelist"
            actions.add((changelist, name if isinstance(name, str) else name.__name__))
    assert actions - listed == set(), f"admin actions with no row: {sorted(actions - listed)}"


def _unlisted_methods():
    methods = {}
    for row in MATRIX:
        if not row.url.startswith("admin:"):
            methods.setdefault(row.url, (row, set()))[1].add(row.method)
    for url, (row, listed) in methods.items():
        for method in sorted({"GET", "POST", "PUT", "PATCH", "DELETE"} - listed):
            yield pytest.param(row, method, id=f"{method} {url}")


@pytest.mark.parametrize(("row", "method"), list(_unlisted_methods()))
def test_methods_not_in_the_matrix_are_not_allowed(row: Row, method: str, world):
    """A superuser (who may do anything) gets 405 for every method the table does not
    list, and nothing changes: a view that starts accepting one must get its rows."""
    user = None if row.url == "dashboard:login" else _user("superuser")
    client, headers = _client(row, user)
    before_state = snapshot()
    before = OperatorAction.objects.count()
    response = _request(row, world, user, client, headers, method=method)
    assert response.status_code == 405
    assert snapshot() == before_state and OperatorAction.objects.count() == before


def test_the_matrix_covers_what_the_brief_names(world):
    """The refusals that matter most are in the table: a viewer's retry, run now, member
    activation, recurring-task creation and resume; a user in no group on every write."""
    covered = {(row.url, row.action) for row in MATRIX if row.needs == "operate"}
    for url, action in [
        ("dashboard:job-action", "retry"),
        ("api:job-retry", "retry"),
        ("dashboard:job-action", "run_now"),
        ("api:job-run-now", "run_now"),
        ("api:member-activate", "activate"),
        ("admin:tasksapp_member_changelist", "activate"),
        ("api:tasks", "recurring_task_create"),
        ("api:task-resume", "resume"),
        ("dashboard:task-action", "resume"),
    ]:
        assert (url, action) in covered
    writes = [row for row in MATRIX if row.method in MUTATING and row.needs]
    assert all(row.needs not in MAY["norole"] for row in writes)

from django.contrib.auth import views as auth_views
from django.urls import path

from . import bulk, confirm, schedules, tokens, views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("overview.json", views.overview_data, name="overview-data"),
    path("recurring/", views.recurring_list, name="recurring-list"),
    path("recurring/<int:task_id>/", views.recurring_detail, name="recurring-detail"),
    path("recurring/<int:task_id>/<str:action>/", views.task_action, name="task-action"),
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/bulk/<str:action>/", bulk.job_bulk, name="job-bulk"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path("jobs/<int:job_id>/<str:action>/", views.job_action, name="job-action"),
    path("graphs/", views.graph_list, name="graph-list"),
    path("queues/", views.queue_page, name="queues"),
    path("queues/mode/<str:action>/", views.routing_action, name="routing-action"),
    path("queues/<str:name>/<str:action>/", views.queue_action, name="queue-action"),
    path("schedules/", schedules.schedule_list_page, name="schedule-list"),
    path("schedules/new/", schedules.schedule_create_page, name="schedule-create"),
    path("schedules/<int:schedule_id>/", schedules.schedule_detail_page, name="schedule-detail"),
    path("schedules/<int:schedule_id>/edit/", schedules.schedule_edit_page, name="schedule-edit"),
    path(
        "schedules/<int:schedule_id>/<str:action>/",
        schedules.schedule_action,
        name="schedule-action",
    ),
    path("audit/", views.audit_list, name="audit"),
    path(
        "confirm/<str:kind>/<str:target>/<str:action>/",
        confirm.action_confirm,
        name="action-confirm",
    ),
    path("tokens/", tokens.token_list, name="tokens"),
    path("tokens/new/", tokens.token_create, name="token-create"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke, name="token-revoke"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="tempo/login.html",
            redirect_authenticated_user=True,
            next_page="dashboard:overview",
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="dashboard:login"), name="logout"),
]

from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView

from . import bulk, health, members, schedules, views
from .errors import api_not_found
from .permissions import ViewOrOperate

app_name = "api"
urlpatterns = [
    path("health/", health.HealthView.as_view(), name="health"),
    path("jobs/", views.JobListView.as_view(), name="jobs"),
    path("jobs/bulk/", bulk.JobBulkActionView.as_view(), name="jobs-bulk"),
    path("jobs/bulk-create/", bulk.JobBulkCreateView.as_view(), name="jobs-bulk-create"),
    path("jobs/<int:job_id>/", views.JobDetailView.as_view(), name="job"),
    path("jobs/<int:job_id>/cancel/", views.JobCancelView.as_view(), name="job-cancel"),
    path("jobs/<int:job_id>/retry/", views.JobRetryView.as_view(), name="job-retry"),
    path("jobs/<int:job_id>/run-now/", views.JobRunNowView.as_view(), name="job-run-now"),
    path("graph-jobs/", views.GraphJobCreateView.as_view(), name="graph-jobs"),
    path(
        "graph-jobs/<int:job_id>/cancel/",
        views.GraphJobCancelView.as_view(),
        name="graph-job-cancel",
    ),
    path("graph-jobs/<int:job_id>/wait/", views.GraphJobWaitView.as_view(), name="graph-job-wait"),
    path("members/", views.MemberListView.as_view(), name="members"),
    path("members/batch/", members.MemberBatchView.as_view(), name="members-batch"),
    path("members/<int:member_id>/", views.MemberDetailView.as_view(), name="member"),
    path(
        "members/<int:member_id>/deactivate/",
        views.MemberDeactivateView.as_view(),
        name="member-deactivate",
    ),
    path(
        "members/<int:member_id>/activate/",
        views.MemberActivateView.as_view(),
        name="member-activate",
    ),
    path("recurring-tasks/", views.RecurringTaskListView.as_view(), name="tasks"),
    path("recurring-tasks/<int:task_id>/", views.RecurringTaskDetailView.as_view(), name="task"),
    path(
        "recurring-tasks/<int:task_id>/pause/",
        views.RecurringTaskPauseView.as_view(),
        name="task-pause",
    ),
    path(
        "recurring-tasks/<int:task_id>/resume/",
        views.RecurringTaskResumeView.as_view(),
        name="task-resume",
    ),
    path(
        "recurring-tasks/<int:task_id>/members/<int:member_id>/next-runs/",
        views.MemberNextRunsView.as_view(),
        name="member-next-runs",
    ),
    path("queues/", views.QueueListView.as_view(), name="queues"),
    path("queues/<str:name>/", views.QueueDetailView.as_view(), name="queue"),
    path("queues/<str:name>/pause/", views.QueuePauseView.as_view(), name="queue-pause"),
    path("queues/<str:name>/resume/", views.QueueResumeView.as_view(), name="queue-resume"),
    path("routing/", views.RoutingView.as_view(), name="routing"),
    path("routing/degrade/", views.RoutingDegradeView.as_view(), name="routing-degrade"),
    path("routing/restore/", views.RoutingRestoreView.as_view(), name="routing-restore"),
    # The schema describes every endpoint: for the viewer role, like the API's reads.
    path("schema/", SpectacularAPIView.as_view(permission_classes=[ViewOrOperate]), name="schema"),
    *schedules.urlpatterns,
    # Last: any other address under /api/ is a JSON 404, like every other API answer.
    re_path(r"^.*$", api_not_found, name="not-found"),
]

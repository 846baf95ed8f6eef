from django.contrib import admin
from django.urls import include, path

from tasksapp.web.api.metrics import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("tasksapp.web.api.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("tasksapp.web.dashboard.urls")),
]

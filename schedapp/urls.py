from django.contrib import admin
from django.urls import include, path

# Tempo mounted as any project mounts it (README, "Use Tempo in your Django project"), at
# the root: the dashboard at /, the API at /api/, the metrics at /metrics.
urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("tasksapp.urls")),
]

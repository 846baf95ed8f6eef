from django.contrib import admin

from tasksapp.models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "handler", "state", "run_at", "started_at", "attempts"]
    list_filter = ["state", "delivery"]
    search_fields = ["handler", "idempotency_key"]
    ordering = ["-id"]
    # Written by the dispatcher and the workers, never by hand.
    readonly_fields = [
        "state",
        "attempts",
        "created_at",
        "claimed_at",
        "started_at",
        "finished_at",
        "lease_token",
        "claimed_by",
        "lease_expires_at",
        "last_error",
        "errors",
        "result",
    ]

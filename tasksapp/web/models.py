"""What operators did: one row per action taken through the dashboard, the API or the
admin (retry, cancel, run now, pause, resume, member changes)."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class OperatorAction(models.Model):
    """Who did what, to which object, when, and through which entry point."""

    class Via(models.TextChoices):
        DASHBOARD = "dashboard"
        API = "api"
        ADMIN = "admin"

    at = models.DateTimeField(db_default=Now())
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150, help_text="Kept when the user is deleted.")
    via = models.CharField(max_length=16, choices=Via)
    action = models.CharField(max_length=40)
    target_type = models.CharField(max_length=40)
    target_id = models.CharField(max_length=200)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["-at"], name="operator_action_at_idx"),
            models.Index(fields=["target_type", "target_id"], name="operator_action_target_idx"),
        ]
        permissions = [
            ("view_dashboard", "Can see the operator dashboard and read the API"),
            ("operate", "Can retry, cancel, run now, pause and resume, and write through the API"),
        ]

    def __str__(self) -> str:
        return f"{self.username} {self.action} {self.target_type} {self.target_id}"

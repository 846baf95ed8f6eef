"""What operators did: one row per action taken through the dashboard, the API or the
admin (retry, cancel, run now, pause, resume, member changes, API tokens), and one per
action refused for want of a role; and the API tokens programs authenticate with."""

from django.conf import settings
from django.db import models
from django.db.models.functions import Now


class OperatorAction(models.Model):
    """Who did what, to which object, when, and through which entry point."""

    class Via(models.TextChoices):
        DASHBOARD = "dashboard"
        API = "api"
        ADMIN = "admin"
        COMMAND = "command"

    at = models.DateTimeField(db_default=Now())
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    username = models.CharField(max_length=150, help_text="Kept when the user is deleted.")
    via = models.CharField(max_length=16, choices=Via)
    # An action taken ("retry"), or one refused for want of a role ("denied:retry").
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


class ApiToken(models.Model):
    """A key a program sends as `Authorization: Token <key>` (the HTTP API, /metrics).

    Only the key's SHA-256 digest is stored: the key is shown once, when it is created,
    and cannot be read back. `prefix` (the key's first characters) lets people tell their
    tokens apart. A revoked token stays listed, with when it was revoked."""

    name = models.CharField(max_length=100, help_text="What the token is for.")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="api_tokens",
        help_text="The token acts as this user, with this user's role.",
    )
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(db_default=Now())
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None

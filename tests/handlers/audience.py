"""A recurring handler that works on its member's object (ctx.member_object)."""

from django.db import connection

from tasksapp.engine.handlers import job_handler


@job_handler
def record_member(ctx):
    """One effect row per run, for an active user of the audience only."""
    user = ctx.member_object
    if not user.is_active:
        raise AssertionError(f"user {user.pk} is not in the audience")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO test_effects (job_id, attempt) VALUES (%s, %s)", [ctx.job_id, ctx.attempt]
        )
    return {"user": user.pk}

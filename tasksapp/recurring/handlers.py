"""The demo's recurring work (`manage.py demo_members`)."""

from __future__ import annotations

import logging

from tasksapp.engine.handlers import JobContext, job_handler

log = logging.getLogger(__name__)


@job_handler
def sync_member(ctx: JobContext) -> dict:
    """Stands in for syncing one member's profile with an outside backend."""
    member_id = ctx.payload.get("member_id")
    log.info("demo sync: member %s, occurrence %s", member_id, ctx.payload.get("occurrence"))
    return {"member_id": member_id, "occurrence": ctx.payload.get("occurrence")}


def _install() -> None:
    """Every process loads this module at start-up (the engine's own handler modules):
    members follow their audiences by signals, and handlers get ctx.member_object."""
    from tasksapp.engine import handlers
    from tasksapp.recurring import member_objects, signals

    signals.connect()
    handlers.member_object_loader = member_objects.member_object
    handlers.register_before_handler(member_objects.member_still_in_audience)


_install()

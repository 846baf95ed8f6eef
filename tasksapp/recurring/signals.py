"""Members follow their audience on single saves and deletes: model signals, handled
after commit by the pass for that object alone (services.audience_objects_changed).
What bypasses signals (QuerySet.update, bulk_create, raw SQL) waits for the full pass,
before each planning and on the timer.

Which models are some task's audience is read at most every AUDIENCE_MODELS_TTL seconds
per process (at once after a task is saved here); a task created elsewhere is followed
by signals after that, and by the pass at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.db import DatabaseError, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

log = logging.getLogger(__name__)

AUDIENCE_MODELS_TTL = 5.0
_cache: dict[str, object] = {"until": 0.0, "tasks": {}}


def audience_models_forget(**kwargs) -> None:
    """Read the audiences again on the next save (a task changed)."""
    _cache["until"] = 0.0


def _watched(model) -> bool:
    """Tempo's own rows (members, jobs) are never an audience."""
    return model._meta.app_label not in ("tasksapp", "contenttypes", "django_celery_beat")


def _fresh() -> bool:
    return time.monotonic() < _cache["until"]


def _tasks_of(model) -> list[int]:
    """The active tasks whose audience is `model`'s objects (read again when stale)."""
    if not _fresh():
        _cache["tasks"] = _audience_models()
        _cache["until"] = time.monotonic() + AUDIENCE_MODELS_TTL
    return _cache["tasks"].get(model._meta.concrete_model._meta.label_lower, [])


def _audience_models() -> dict[str, list[int]]:
    from tasksapp.engine.db import tempo_atomic
    from tasksapp.recurring.audiences import AudienceError, audience_model
    from tasksapp.recurring.models import RecurringTask

    found: dict[str, list[int]] = {}
    try:
        with tempo_atomic():  # after commit; a failure here leaves nothing behind
            tasks = list(
                RecurringTask.objects.filter(active=True)
                .exclude(audience="")
                .values_list("id", "audience")
            )
    except DatabaseError:  # before the tables exist (migrations)
        return {}
    for task_id, label in tasks:
        try:
            model = audience_model(label)
        except AudienceError:
            continue
        found.setdefault(model._meta.concrete_model._meta.label_lower, []).append(task_id)
    return found


def _follow(task_ids: list[int], keys: Iterable[object]) -> None:
    from tasksapp.recurring.models import RecurringTask
    from tasksapp.recurring.services.audiences import audience_objects_changed

    if not task_ids:
        return
    keys = list(keys)
    for task in RecurringTask.objects.filter(id__in=task_ids, active=True):
        try:
            audience_objects_changed(task=task, keys=keys)
        except Exception:  # the full pass catches up; the save itself stands
            log.exception("audience of task %s: following %s failed", task.name, keys)


def _changed(model, keys: Iterable[object], using: str | None) -> None:
    """Follow the objects after the commit of the database they were saved on (`using`).
    Inside the saving transaction nothing is queried:
    with the audiences read less than AUDIENCE_MODELS_TTL ago the model is looked up at
    once, else after commit (a save in a transaction rolled back costs nothing)."""
    if not _watched(model):
        return
    keys = [key for key in keys if key is not None]
    if _fresh():
        task_ids = _tasks_of(model)
        if task_ids:
            transaction.on_commit(lambda: _follow(task_ids, keys), using=using)
    else:
        transaction.on_commit(lambda: _follow(_tasks_of(model), keys), using=using)


def _saved(sender, instance, raw=False, using=None, **kwargs) -> None:
    if not raw:
        _changed(sender, [instance.pk], using)


def _deleted(sender, instance, using=None, **kwargs) -> None:
    _changed(sender, [instance.pk], using)


def _relations_changed(
    sender, instance, action, reverse, model, pk_set, using=None, **kwargs
) -> None:
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    _changed(type(instance), [instance.pk], using)  # e.g. user.groups.add(beta)
    if pk_set:
        _changed(model, pk_set, using)  # e.g. beta.user_set.add(*users)


def connect() -> None:
    from tasksapp.recurring.models import RecurringTask

    post_save.connect(_saved, dispatch_uid="tempo-audience-saved")
    post_delete.connect(_deleted, dispatch_uid="tempo-audience-deleted")
    m2m_changed.connect(_relations_changed, dispatch_uid="tempo-audience-relations")
    for signal in (post_save, post_delete):
        signal.connect(audience_models_forget, sender=RecurringTask, dispatch_uid=f"{signal}-t")

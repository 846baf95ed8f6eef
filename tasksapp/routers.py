"""Tempo's tables on a database of their own: `TEMPO_DATABASE = "tempo"` (an alias of
DATABASES) with `DATABASE_ROUTERS = ["tasksapp.routers.TempoRouter"]`
(docs/DEPLOYMENT.md, docs/decisions/0022-tempo-database-alias.md).

The router sends Tempo's models and django-celery-beat's (Tempo's beat entries live
there) to that database, and migrates them only there. Two of Tempo's models stay with
the users, whose foreign keys they hold: the audit rows and the API tokens. The content
types table is migrated on Tempo's database too: the members table refers to it. The
router has no opinion on every other model: the project's own routing or the default
database decides."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import router

from tasksapp.engine.db import tempo_alias, tempo_is_separate

TEMPO_APPS = {"tasksapp", "django_celery_beat"}
# Tempo's models with a foreign key to the user model: on the users' database.
WITH_USERS = {("tasksapp", "operatoraction"), ("tasksapp", "apitoken")}
ALSO_ON_TEMPO = {"contenttypes"}


def _users_database() -> str:
    return router.db_for_write(get_user_model())


class TempoRouter:
    """Reads, writes and migrations of Tempo's models on TEMPO_DATABASE."""

    def _database_of(self, app_label: str, model_name: str | None) -> str | None:
        if not tempo_is_separate() or app_label not in TEMPO_APPS:
            return None
        if (app_label, model_name) in WITH_USERS:
            return _users_database()
        return tempo_alias()

    def db_for_read(self, model, **hints) -> str | None:
        return self._database_of(model._meta.app_label, model._meta.model_name)

    def db_for_write(self, model, **hints) -> str | None:
        return self._database_of(model._meta.app_label, model._meta.model_name)

    def allow_relation(self, obj1, obj2, **hints) -> bool | None:
        """Rows on one database may refer to each other, whoever placed them."""
        if not tempo_is_separate():
            return None
        if obj1._state.db and obj1._state.db == obj2._state.db:
            return True
        return None

    def allow_migrate(self, db: str, app_label: str, model_name=None, **hints) -> bool | None:
        if not tempo_is_separate():
            return None
        if app_label in ALSO_ON_TEMPO and db == tempo_alias():
            return True
        target = self._database_of(app_label, model_name)
        if target is not None:
            return db == target
        if db == tempo_alias():
            return False  # the project's own tables stay off Tempo's database
        return None

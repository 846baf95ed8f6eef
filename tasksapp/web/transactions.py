"""The transaction of an operator's action: its change on Tempo's database and its audit
row on the database of the users (where `OperatorAction` and `ApiToken` live, for their
foreign keys to the user model; docs/decisions/0022-tempo-database-alias.md). On one
database (the default) that is one transaction; on two, the audit row commits first, so
no committed action lacks its row."""

from __future__ import annotations

from django.db import router

from tasksapp.engine.db import atomic_on, tempo_alias
from tasksapp.web.models import OperatorAction


def audit_database() -> str:
    """The alias of the database that holds the audit rows and API tokens."""
    return router.db_for_write(OperatorAction)


def audited_atomic():
    """One transaction on Tempo's database and one on the audit rows' (one if the same)."""
    return atomic_on(tempo_alias(), audit_database())

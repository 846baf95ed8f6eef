"""Lookups the jobs table's indexes serve."""

from __future__ import annotations

from django.db.models import F
from django.db.models.lookups import IContains, Lookup


class TextContains(IContains):
    """Case-insensitive substring. On PostgreSQL `ILIKE`, which a `gin_trgm_ops` index
    serves (Django's icontains compares UPPER() of both sides, which no index holds);
    elsewhere icontains. Wildcards in the text are escaped: plain characters."""

    def as_postgresql(self, compiler, connection):
        lhs, lhs_params = Lookup.process_lhs(self, compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} ILIKE {rhs}", (*lhs_params, *rhs_params)


def text_in(field: str, text: str) -> TextContains:
    """`text` in the column `field`, as a filter expression."""
    return TextContains(F(field), text)

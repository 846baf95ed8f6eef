"""API tokens: how a key is made, stored (its SHA-256 digest only) and checked.

A key is `tempo_` and 43 characters of `secrets.token_urlsafe(32)` (256 random bits). So
much randomness needs no slow password hash: a plain SHA-256 cannot be reversed or
guessed, and it lets a request find its token by an indexed equality on the digest.
The key itself is returned once, by `api_token_issue`, and never stored, logged or
recorded. Creating and revoking tokens is an operator action, for the operator's own
tokens (a superuser's for anyone's): see
`api_token_create_audited` and `api_token_revoke_audited` in tasksapp/web/operators.py.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from tasksapp.web.models import ApiToken

KEY_PREFIX = "tempo_"
PREFIX_LENGTH = len(KEY_PREFIX) + 8  # what is kept and shown of a key
MAX_KEY_LENGTH = 200  # longer is no key of ours: refused before hashing
NAME_MAX_LENGTH = ApiToken._meta.get_field("name").max_length
# A request stamps its token's last use at most once a minute: no write on every request.
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)

ERR_NAME = "name: give the token a name (at most {max} characters) that says what it is for."
ERR_OWNER_INACTIVE = "user: {owner} is not active."
ERR_OWNER_SUPERUSER = "user: only a superuser may create a token for the superuser {owner}."
ERR_TOKEN_MISSING = "API token {token_id} does not exist."
ERR_TOKEN_REVOKED = "API token {token} is already revoked."


class TokenInputError(ValueError):
    """The token cannot be created or revoked as asked; the message says why."""


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_key_new() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def token_name_validated(name: Any) -> str:
    name = name.strip() if isinstance(name, str) else ""
    if not name or len(name) > NAME_MAX_LENGTH:
        raise TokenInputError(ERR_NAME.format(max=NAME_MAX_LENGTH))
    return name


def token_owner_check(*, owner: Any, created_by: Any, trusted: bool = False) -> None:
    """A token acts as its owner: the owner must be active, and only a superuser (or a
    `trusted` caller: the shell's command) may mint a superuser's token (anyone else
    would gain more than they have)."""
    if not owner.is_active:
        raise TokenInputError(ERR_OWNER_INACTIVE.format(owner=owner.get_username()))
    if owner.is_superuser and not (trusted or getattr(created_by, "is_superuser", False)):
        raise TokenInputError(ERR_OWNER_SUPERUSER.format(owner=owner.get_username()))


@sensitive_variables("key")  # kept out of error reports
def api_token_issue(
    *, owner: Any, name: str, created_by: Any = None, trusted: bool = False
) -> tuple[ApiToken, str]:
    """Store a new token for `owner` and return it with its key: the only time the key
    exists outside the caller's hands. Callers check who may do this (operators.py, the
    api_token_create command) and record it."""
    name = token_name_validated(name)
    token_owner_check(owner=owner, created_by=created_by, trusted=trusted)
    key = token_key_new()
    token = ApiToken.objects.create(
        name=name,
        user=owner,
        prefix=key[:PREFIX_LENGTH],
        digest=token_digest(key),
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    return token, key


def api_token_revoke(
    *, token_id: Any, revoker_check: Callable[[ApiToken], None] | None = None
) -> ApiToken:
    """Mark the token revoked (it stays listed). Callers check who may (`revoker_check`
    runs on the locked token and raises TokenInputError to refuse) and record it."""
    tokens = ApiToken.objects.select_for_update(of=("self",)).select_related("user")
    token = tokens.filter(pk=token_id).first()
    if token is None:
        raise TokenInputError(ERR_TOKEN_MISSING.format(token_id=token_id))
    if revoker_check is not None:
        revoker_check(token)
    if token.revoked_at is not None:
        raise TokenInputError(ERR_TOKEN_REVOKED.format(token=token))
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    return token


@sensitive_variables("key")
def api_token_authenticate(*, key: str) -> ApiToken | None:
    """The active token whose key this is, with its active user; None for any other key.
    Stamps the token's last use (at most once per LAST_USED_RESOLUTION)."""
    if not key or len(key) > MAX_KEY_LENGTH:
        return None
    digest = token_digest(key)
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=digest, revoked_at__isnull=True)
        .first()
    )
    if token is None or not hmac.compare_digest(token.digest, digest):
        return None
    if not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def api_token_list() -> QuerySet[ApiToken]:
    """Every token, newest first, with its owner and creator (never a key: none is kept)."""
    return ApiToken.objects.select_related("user", "created_by").order_by("-id")

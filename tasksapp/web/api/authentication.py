"""`Authorization: Token <key>`: the API's and /metrics' authentication for programs,
against hashed API tokens (tasksapp/web/tokens.py). The header form is DRF's own, so
programs that sent DRF tokens keep working with the same header."""

from __future__ import annotations

from django.views.decorators.debug import sensitive_variables
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from tasksapp.web.tokens import api_token_authenticate

KEYWORD = "Token"
ERR_HEADER = "Invalid token header: send `Authorization: Token <key>`."
ERR_TOKEN = "Invalid token: unknown, revoked, or its user is inactive."


class ApiTokenAuthentication(BaseAuthentication):
    """`request.user` is the token's user, `request.auth` the ApiToken."""

    keyword = KEYWORD

    @sensitive_variables("parts", "key")  # kept out of error reports
    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None  # no token: another authentication (the session) may apply
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(ERR_HEADER)
        try:
            key = parts[1].decode("ascii")
        except UnicodeError:
            raise exceptions.AuthenticationFailed(ERR_TOKEN) from None
        token = api_token_authenticate(key=key)
        if token is None:
            raise exceptions.AuthenticationFailed(ERR_TOKEN)
        return token.user, token

    def authenticate_header(self, request) -> str:
        # Makes an unauthenticated request a 401 that names the scheme, not a 403.
        return self.keyword


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """The schema's `tokenAuth` security scheme (drf-spectacular finds it by import)."""

    target_class = "tasksapp.web.api.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'API token, prefixed with "Token ": `Authorization: Token <key>`.',
        }

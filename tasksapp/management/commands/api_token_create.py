"""Create an API token for a user and print its key, once (the key is not stored)."""

import getpass

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.views.decorators.debug import sensitive_variables

from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import operator_action_record
from tasksapp.web.tokens import TokenInputError, api_token_issue
from tasksapp.web.transactions import audited_atomic


def _who() -> str:
    try:
        return f"manage.py ({getpass.getuser()})"
    except (KeyError, OSError):
        return "manage.py"


class Command(BaseCommand):
    help = (
        "Create an API token that acts as USERNAME (with that user's role) and print its key"
        " on standard output, once: only its digest is stored. The creation is recorded in"
        " the audit log. Revoke tokens on the dashboard's API tokens page or in the admin."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="the user the token acts as")
        parser.add_argument("--name", required=True, help="what the token is for")

    @sensitive_variables("key")  # kept out of error reports
    def handle(self, *args, **opts):
        owner = get_user_model().objects.filter(username=opts["username"]).first()
        if owner is None:
            raise CommandError(f"no user {opts['username']!r}.")
        try:
            with audited_atomic():
                # Whoever runs manage.py has the database already: the command is trusted.
                token, key = api_token_issue(owner=owner, name=opts["name"], trusted=True)
                operator_action_record(
                    user=None,
                    username=_who(),
                    via=OperatorAction.Via.COMMAND,
                    action="token_create",
                    target_type="api_token",
                    target_id=token.id,
                    details={
                        "name": token.name,
                        "owner": owner.get_username(),
                        "prefix": token.prefix,
                    },
                )
        except TokenInputError as exc:
            raise CommandError(str(exc)) from exc
        self.stderr.write(
            f"API token {token.name!r} for {owner.get_username()} (key starts with"
            f" {token.prefix}): the key is printed below, once. Send it as"
            " `Authorization: Token <key>`."
        )
        self.stdout.write(key)

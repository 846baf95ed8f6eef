"""The dashboard's API tokens page: every token (name, key prefix, owner, created, last
used, revoked), and for operators a form to create one of their own and a button to
revoke each of theirs (a superuser: for anyone, and anyone's).

A new token's key is in the answer to the create form's POST and nowhere else: not in a
redirect, a message, the session, the audit record or a log line. The answer is not
cached."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_variables
from django.views.decorators.http import require_GET, require_POST

from tasksapp.web.dashboard.access import operator_required, viewer_required
from tasksapp.web.models import OperatorAction
from tasksapp.web.operators import (
    ACTION_REFUSALS,
    PERM_OPERATE,
    api_token_create_audited,
    api_token_revoke_audited,
)
from tasksapp.web.tokens import NAME_MAX_LENGTH, api_token_list

VIA = OperatorAction.Via.DASHBOARD
DONE_REVOKED = "API token {token} revoked: it no longer authenticates."


class TokenForm(forms.Form):
    name = forms.CharField(max_length=NAME_MAX_LENGTH, help_text="What the token is for.")
    user = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(),
        to_field_name="username",
        label="acts as",
        help_text="The token has this user's role.",
    )

    def __init__(self, *args, requester, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        users = get_user_model().objects.filter(is_active=True).order_by("username")
        if not requester.is_superuser:  # the service refuses it too
            users = users.filter(pk=requester.pk)
        self.fields["user"].queryset = users


def _page(request: HttpRequest, form: TokenForm | None, status: int = 200) -> HttpResponse:
    can_operate = request.user.has_perm(PERM_OPERATE)
    if can_operate and form is None:
        form = TokenForm(requester=request.user, initial={"user": request.user.get_username()})
    tokens = list(api_token_list())
    for token in tokens:  # the service refuses the others too
        token.can_revoke = can_operate and (
            request.user.is_superuser or token.user_id == request.user.pk
        )
    context = {"tokens": tokens, "form": form, "can_operate": can_operate}
    return render(request, "tempo/dashboard/tokens.html", context, status=status)


@login_required
@viewer_required
@require_GET
def token_list(request: HttpRequest) -> HttpResponse:
    return _page(request, None)


@sensitive_variables("key")  # kept out of error reports
@never_cache
@login_required
@operator_required
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST, requester=request.user)
    if form.is_valid():
        try:
            token, key = api_token_create_audited(
                user=request.user,
                owner=form.cleaned_data["user"],
                name=form.cleaned_data["name"],
                via=VIA,
            )
        except ACTION_REFUSALS as exc:
            form.add_error(None, str(exc))
        else:
            return render(
                request, "tempo/dashboard/token_created.html", {"token": token, "key": key}
            )
    return _page(request, form, status=400)


@login_required
@operator_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = api_token_revoke_audited(user=request.user, token_id=token_id, via=VIA)
        messages.success(request, DONE_REVOKED.format(token=token))
    except ACTION_REFUSALS as exc:
        messages.error(request, str(exc))
    return redirect("dashboard:tokens")

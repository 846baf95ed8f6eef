"""Form fields shared by the admin's forms."""

from __future__ import annotations

import json

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

ERR_JSON = "Enter valid JSON: {reason}."


class GuardedJSONField(forms.JSONField):
    """forms.JSONField that takes hostile input calmly: input nested thousands deep
    (RecursionError) or integers too long to convert (ValueError) are a form error, and
    a value holding a lone surrogate is shown back as an escape, not a 500."""

    def to_python(self, value):
        try:
            return super().to_python(value)
        except ValidationError:
            raise
        except RecursionError as exc:
            raise ValidationError(ERR_JSON.format(reason="nested too deep")) from exc
        except ValueError as exc:
            raise ValidationError(ERR_JSON.format(reason=str(exc).rstrip("."))) from exc

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except (RecursionError, ValueError):
            return InvalidJSONInput(data)

    def prepare_value(self, value):
        text = super().prepare_value(value)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: show it as its JSON escape
            return json.dumps(value, cls=self.encoder)
        return text

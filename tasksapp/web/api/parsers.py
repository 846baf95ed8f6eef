"""The API's JSON parser: DRF's, with the limits a hostile body runs into.

- A body larger than the payload limit plus 64 KiB (for the other fields) is refused
  with 413 before it is read in full.
- A body nested deeper than TEMPO_MAX_JSON_DEPTH + 2 (the body's object and a field's
  own container: a payload at its deepest) is refused with 400 — also one nested 10,000
  deep, which would otherwise exhaust the parser's recursion.
- Numbers Python would parse into values nothing downstream can hold are refused with
  400: integers beyond 64 bits (`10**400`), floats that overflow to infinity (`1e400`),
  NaN and Infinity.

Every refusal is a DRF exception, so the answer is JSON (tasksapp.web.api.errors).
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from tasksapp.engine.settings import tempo_settings

BODY_HEADROOM = 65_536  # bytes for the fields around the payload
INT64 = 2**63
NUMBER_CHARS = 24  # a refused number is quoted up to this many characters

ERR_TOO_LARGE = (
    "the request body is {size} bytes; the limit is {limit} bytes "
    "(TEMPO_MAX_PAYLOAD_BYTES plus {headroom} for the other fields)"
)
ERR_TOO_DEEP = (
    "the JSON body is nested deeper than {depth} levels "
    "(TEMPO_MAX_JSON_DEPTH, plus two for the body and its field)"
)
ERR_INTEGER = "the JSON body has an integer out of range ({number}): integers must fit in 64 bits"
ERR_FLOAT = "the JSON body has a number out of range ({number}): it overflows a double"
ERR_CONSTANT = "the JSON body has {constant}, which is not JSON: send a number or null"
ERR_ENCODING = "the request body is not valid {encoding}: {reason}"
ERR_JSON = "JSON parse error - {reason}"


class RequestBodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the request body is too large"
    default_code = "request_too_large"


class _BadNumber(ValueError):
    """Raised from inside json.loads by the number hooks; becomes a ParseError."""


def body_limit() -> int:
    """The largest request body the API reads, in bytes."""
    return tempo_settings().max_payload_bytes + BODY_HEADROOM


def body_depth_limit() -> int:
    return tempo_settings().max_json_depth + 2


def _quoted(number: str) -> str:
    if len(number) <= NUMBER_CHARS:
        return number
    return f"{number[:NUMBER_CHARS]}… ({len(number)} characters)"


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > 19 or not -INT64 <= (value := int(text)) < INT64:
        raise _BadNumber(ERR_INTEGER.format(number=_quoted(text)))
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(ERR_FLOAT.format(number=_quoted(text)))
    return value


def _parse_constant(text: str) -> Any:
    raise _BadNumber(ERR_CONSTANT.format(constant=text))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` has containers nested more than `limit` deep (without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _content_length(parser_context: dict) -> int | None:
    request = parser_context.get("request")
    meta = getattr(request, "META", {}) if request is not None else {}
    try:
        return int(meta.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


class GuardedJSONParser(JSONParser):
    """application/json with a size limit (413), a depth limit and number checks (400)."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        limit = body_limit()
        declared = _content_length(parser_context)
        if declared is not None and declared > limit:
            raise self._too_large(declared, limit)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise self._too_large(f"more than {limit}", limit)
        try:
            text = body.decode(encoding)
        except (UnicodeDecodeError, LookupError) as exc:
            raise ParseError(ERR_ENCODING.format(encoding=encoding, reason=exc)) from exc
        depth = body_depth_limit()
        try:
            data = json.loads(
                text,
                parse_int=_parse_int,
                parse_float=_parse_float,
                parse_constant=_parse_constant,
            )
        except RecursionError as exc:
            raise ParseError(ERR_TOO_DEEP.format(depth=depth)) from exc
        except _BadNumber as exc:
            raise ParseError(str(exc)) from exc
        except ValueError as exc:
            raise ParseError(ERR_JSON.format(reason=exc)) from exc
        if _deeper_than(data, depth):
            raise ParseError(ERR_TOO_DEEP.format(depth=depth))
        return data

    @staticmethod
    def _too_large(size: int | str, limit: int) -> RequestBodyTooLarge:
        return RequestBodyTooLarge(
            ERR_TOO_LARGE.format(size=size, limit=limit, headroom=BODY_HEADROOM)
        )

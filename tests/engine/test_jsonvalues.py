"""The JSON-value guard: whatever it accepts is stored by PostgreSQL (jsonb) and SQLite
(text under json_valid, as Django's JSONField keeps it) and reads back equal; whatever
it refuses, it refuses with a message naming the value and the place. safe_text makes any
text storable."""

from __future__ import annotations

import datetime as dt
import json
import math
import sqlite3

import pytest
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasksapp.engine.jsonvalues import (
    MAX_SAFE_INTEGER,
    JsonValueError,
    checked_json,
    safe_json,
    safe_text,
)
from tasksapp.engine.models import Job
from tasksapp.engine.options import JobOptionsError, validated_payload
from tasksapp.engine.services import JobInputError, job_schedule
from tests.factories import JobFactory

HANDLER = "tests.handlers.recording.record"
LIMITS = {"max_bytes": 2_000, "max_depth": 6}
AGAIN = settings(max_examples=300, deadline=None)
WITH_DB = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Any text: ordinary characters, lone surrogates, NUL, and a few that like to break
# things (quotes, backslash, RTL override, combining marks, emoji).
CHARACTERS = st.one_of(
    st.characters(),
    st.characters(categories=["Cs"]),
    st.sampled_from(["\x00", '"', "\\", "<", "\u202e", "\u0301", "😀", "\ufeff", "\uffff"]),
)
TEXT = st.text(CHARACTERS, max_size=12)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, 2**63, 10**400]),
    st.floats(),
    st.floats(min_value=-1e20, max_value=1e20),
    st.sampled_from([5e-324, -0.0, 1e16, float(MAX_SAFE_INTEGER), 1.7976931348623157e308]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
KEYS = st.one_of(TEXT, TEXT, st.integers(-3, 3), st.none())
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(KEYS, children, max_size=4),
    ),
    max_leaves=25,
)


def _storable_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _fits(value) -> bool:
    """The rule, said the simple way: what checked_json must accept."""
    if isinstance(value, str):
        return _storable_text(value)
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE_INTEGER
    if isinstance(value, float):
        return math.isfinite(value) and abs(value) <= MAX_SAFE_INTEGER
    if isinstance(value, list | tuple):
        return all(map(_fits, value))
    if isinstance(value, dict):
        keys_ok = all(isinstance(k, str) and _storable_text(k) for k in value)
        return keys_ok and all(map(_fits, value.values()))
    return False


def _accepted(value) -> bool:
    return (
        _fits(value)
        and _depth(value) <= LIMITS["max_depth"]
        and len(json.dumps(value)) <= LIMITS["max_bytes"]
    )


def _sqlite_round_trip(text: str):
    """Stored as Django's JSONField stores it on SQLite (a json_valid column), read back
    as text and as SQLite's own JSON (json())."""
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE TABLE t (v text CHECK (json_valid(v)))")
        db.execute("INSERT INTO t VALUES (?)", [text])
        stored, normalised = db.execute("SELECT v, json(v) FROM t").fetchone()
    finally:
        db.close()
    return json.loads(stored), json.loads(normalised)


def _postgres_round_trip(text: str):
    with connection.cursor() as cursor:
        cursor.execute("SELECT (%s::jsonb)::text", [text])
        return json.loads(cursor.fetchone()[0])


@AGAIN
@given(VALUES)
def test_exactly_the_values_that_fit_are_accepted_and_they_read_back_equal(value):
    try:
        stored = checked_json(value, what="payload", **LIMITS)
    except JsonValueError as exc:
        assert not _accepted(value)
        assert str(exc).startswith("payload ")
        str(exc).encode("utf-8")  # the message itself can always be shown
        return
    assert _accepted(value)
    assert stored == json.loads(json.dumps(value))
    text = json.dumps(stored)
    json.dumps(stored, ensure_ascii=False).encode("utf-8")  # renders as UTF-8
    as_text, as_sqlite_json = _sqlite_round_trip(text)
    assert as_text == stored and as_sqlite_json == stored


@pytest.mark.django_db
@WITH_DB
@given(VALUES)
def test_what_is_accepted_is_stored_by_this_database_as_jsonb_and_in_a_job(value):
    """PostgreSQL's jsonb (when the tests run on it), and a Job's payload through the ORM
    on whichever database the tests run."""
    try:
        stored = checked_json(value, what="payload", **LIMITS)
    except JsonValueError:
        return
    if connection.vendor == "postgresql":
        assert _postgres_round_trip(json.dumps(stored)) == stored
    job = _one_job()
    wrapped = {"v": stored}  # a bare None would be SQL NULL, not JSON null
    Job.objects.filter(id=job.id).update(payload=wrapped, result=wrapped)
    job.refresh_from_db()
    assert job.payload == wrapped and job.result == wrapped


def _one_job() -> Job:
    job = Job.objects.filter(handler=HANDLER).first()
    return job or JobFactory(handler=HANDLER)


@AGAIN
@given(st.text(CHARACTERS, max_size=300), st.integers(min_value=0, max_value=400))
def test_safe_text_makes_any_text_storable_within_its_length(text, max_chars):
    safe = safe_text(text, max_chars=max_chars)
    assert len(safe) <= max_chars
    assert _storable_text(safe)
    if _storable_text(text) and len(text) <= max_chars:
        assert safe == text
    if len(text) > max_chars >= 40:
        assert safe.endswith(" more characters]")
    _sqlite_round_trip(json.dumps(safe))


@pytest.mark.django_db
@WITH_DB
@given(st.text(CHARACTERS, max_size=200))
def test_safe_text_is_stored_by_this_database_as_text_and_in_json(text):
    safe = safe_text(text, max_chars=1000)
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s", [safe])
        assert cursor.fetchone()[0] == safe
    if connection.vendor == "postgresql":
        assert _postgres_round_trip(json.dumps({"error": safe})) == {"error": safe}


def test_safe_text_joins_a_surrogate_pair_and_replaces_lone_ones_and_nul():
    assert safe_text("a\x00b\ud800c\ud83d\ude00", max_chars=100) == "a\ufffdb\ufffdc😀"
    assert safe_text("x" * 1000, max_chars=30) == "x" * 7 + "… [993 more characters]"
    assert safe_text("x" * 10, max_chars=5) == "xxxxx"  # no room for the marker
    assert safe_text(ValueError("boom\x00"), max_chars=10) == "boom\ufffd"


def test_safe_json_repairs_strings_and_keys_read_back():
    assert safe_json({"k\ud800": ["\x00", 1, None, {"a": "ok"}]}) == {
        "k\ufffd": ["\ufffd", 1, None, {"a": "ok"}]
    }


# --- the messages -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            {"s": "\ud800"},
            "payload contains a lone surrogate (\\ud800) at payload['s']: send valid UTF-8 text",
        ),
        (
            {"a": [1, {"b": "x\x00y"}]},
            "payload must not contain the NUL character (\\u0000), found at payload['a'][1]['b']: "
            "PostgreSQL cannot store it",
        ),
        (
            {"k\udc00": 1},
            "payload contains a lone surrogate (\\udc00) in the key at payload['k\\udc00']: "
            "send valid UTF-8 text",
        ),
        (
            {"n": [10**400]},
            "payload has a number out of range at payload['n'][0]: numbers must lie within "
            f"±{MAX_SAFE_INTEGER} (2**53 - 1); send larger ones as strings",
        ),
        ({"n": 1e300}, "payload has a number out of range at payload['n']: "),
        ({"n": float("inf")}, "payload must be JSON-serialisable: Out of range float"),
        ({"n": float("nan")}, "payload must be JSON-serialisable: Out of range float"),
        (
            {"x": {1: "a"}},
            "payload has a non-string key (1) at payload['x']: JSON object keys are strings",
        ),
        ({"when": dt.date(2030, 1, 1)}, "payload must be JSON-serialisable: Object of type date"),
        ({"s": {1, 2}}, "payload must be JSON-serialisable: Object of type set"),
    ],
)
def test_a_refusal_says_what_and_where(value, message):
    with pytest.raises(JsonValueError) as raised:
        checked_json(value, what="payload", max_bytes=10_000, max_depth=32)
    assert str(raised.value).startswith(message)


def test_the_size_limit_counts_the_json_text_as_the_database_gets_it():
    value = {"s": "é" * 10}  # written as \u00e9: 6 bytes each
    size = len(json.dumps(value))
    assert size == 69
    assert checked_json(value, what="result", max_bytes=size, max_depth=1) == value
    with pytest.raises(JsonValueError) as raised:
        checked_json(
            value, what="result", max_bytes=size - 1, max_depth=1, limit_name="TEMPO_MAX_X"
        )
    assert str(raised.value) == (
        "result is 69 bytes encoded as JSON; the limit is 68 (TEMPO_MAX_X)"
    )


def test_depth_is_counted_in_containers_and_a_very_deep_value_is_refused_without_recursion():
    def nested(levels: int):
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    assert checked_json(nested(32), what="payload", max_bytes=10**6, max_depth=32)
    with pytest.raises(JsonValueError, match=r"^payload is nested deeper than 32 levels"):
        checked_json(nested(33), what="payload", max_bytes=10**6, max_depth=32)
    with pytest.raises(JsonValueError, match=r"nested deeper than 32 levels \(at payload\[0\]"):
        checked_json(nested(200_000), what="payload", max_bytes=10**6, max_depth=32)


def test_the_largest_safe_numbers_are_accepted():
    value = [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, float(MAX_SAFE_INTEGER), 5e-324, -0.0]
    assert checked_json(value, what="payload", max_bytes=1000, max_depth=1) == value


# --- validated_payload: every creator of jobs ---------------------------------------


def test_validated_payload_uses_the_limits_from_the_settings(settings):
    settings.TEMPO = {**settings.TEMPO, "MAX_PAYLOAD_BYTES": 100, "MAX_JSON_DEPTH": 2}
    assert validated_payload({"a": {"b": 1}}) == {"a": {"b": 1}}
    with pytest.raises(JobOptionsError) as raised:
        validated_payload({"s": "x" * 100})
    assert raised.value.field == "payload"
    assert str(raised.value) == (
        "payload is 109 bytes encoded as JSON; the limit is 100 (TEMPO_MAX_PAYLOAD_BYTES)"
    )
    with pytest.raises(JobOptionsError, match="nested deeper than 2 levels"):
        validated_payload({"a": {"b": [1]}})


def test_the_default_limits():
    from tasksapp.engine.settings import tempo_settings

    limits = tempo_settings()
    assert (limits.max_payload_bytes, limits.max_result_bytes, limits.max_json_depth) == (
        1_048_576,
        1_048_576,
        32,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "payload",
    [
        {"s": "\ud800"},
        {"s": "\x00"},
        {"n": 10**400},
        {"big": "x" * 1_048_577},
        {"items": list(range(100_000)), "pad": "x" * 600_000},
    ],
    ids=["surrogate", "nul", "huge-int", "10mb-ish", "long-list"],
)
def test_job_schedule_refuses_a_bad_payload_and_stores_nothing(payload):
    with pytest.raises(JobInputError, match=r"^payload "):
        job_schedule(
            handler=HANDLER, run_at=timezone.now() + dt.timedelta(minutes=5), payload=payload
        )
    assert not Job.objects.exists()

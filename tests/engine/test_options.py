"""JobOptions and the job-option validators: one error type, naming the field, with the
message every caller (services, API, admin) shows."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json

import pytest

from tasksapp.engine.handlers import ERR_HANDLER_PATH
from tasksapp.engine.options import (
    ERR_CONCURRENCY_KEY,
    ERR_DELIVERY,
    ERR_KEY,
    ERR_MAX_ATTEMPTS,
    ERR_PAYLOAD_JSON,
    ERR_PRIORITY,
    ERR_QUEUE,
    ERR_TIME_LIMIT,
    JobOptions,
    JobOptionsError,
    validated_handler,
    validated_idempotency_key,
    validated_payload,
    validated_retry_policy,
)
from tasksapp.engine.retry import DEFAULT_POLICY, ERR_POLICY_DELAYS, ERR_POLICY_TYPE

HANDLER = "tests.handlers.recording.record"
UNREGISTERED = "tests.handlers.recording.NOT_CALLABLE"
DELIVERIES = "transactional, at_least_once, at_most_once"
PRIORITY_NAMES = "low, normal, high, critical"


def _json_reason(value) -> str:
    with pytest.raises((TypeError, ValueError)) as raised:
        json.dumps(value, allow_nan=False)
    return str(raised.value)


def test_defaults_are_the_jobs_defaults():
    assert JobOptions.validated() == JobOptions(
        max_attempts=5, retry_policy=DEFAULT_POLICY, delivery="transactional", time_limit=None
    )


def test_valid_options_are_kept_and_the_policy_normalised():
    policy = {"delays": [1, 2]}
    options = JobOptions.validated(
        max_attempts=3,
        retry_policy=policy,
        delivery="at_most_once",
        time_limit=2.5,
        queue="billing",
        priority="high",
        concurrency_key="member:42",
    )
    assert options.as_fields() == {
        "max_attempts": 3,
        "retry_policy": {"delays": [1.0, 2.0]},
        "delivery": "at_most_once",
        "time_limit": 2.5,
        "queue": "billing",
        "priority": 7,
        "concurrency_key": "member:42",
    }
    assert policy == {"delays": [1, 2]}


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ({"max_attempts": 0}, "max_attempts", ERR_MAX_ATTEMPTS),
        ({"max_attempts": 1001}, "max_attempts", ERR_MAX_ATTEMPTS),
        ({"max_attempts": True}, "max_attempts", ERR_MAX_ATTEMPTS),
        ({"max_attempts": 2.0}, "max_attempts", ERR_MAX_ATTEMPTS),
        ({"max_attempts": "3"}, "max_attempts", ERR_MAX_ATTEMPTS),
        ({"delivery": "twice"}, "delivery", ERR_DELIVERY.format(choices=DELIVERIES)),
        ({"delivery": None}, "delivery", ERR_DELIVERY.format(choices=DELIVERIES)),
        ({"time_limit": 0}, "time_limit", ERR_TIME_LIMIT),
        ({"time_limit": -1.5}, "time_limit", ERR_TIME_LIMIT),
        ({"time_limit": True}, "time_limit", ERR_TIME_LIMIT),
        ({"time_limit": float("inf")}, "time_limit", ERR_TIME_LIMIT),
        ({"time_limit": float("nan")}, "time_limit", ERR_TIME_LIMIT),
        ({"time_limit": "5"}, "time_limit", ERR_TIME_LIMIT),
        ({"retry_policy": {"delays": []}}, "retry_policy", ERR_POLICY_DELAYS),
        ({"retry_policy": "fast"}, "retry_policy", ERR_POLICY_TYPE),
        ({"queue": ""}, "queue", ERR_QUEUE),
        ({"queue": "Billing"}, "queue", ERR_QUEUE),
        ({"queue": "a.b"}, "queue", ERR_QUEUE),
        ({"queue": "a:b"}, "queue", ERR_QUEUE),
        ({"queue": "x" * 65}, "queue", ERR_QUEUE),
        ({"queue": None}, "queue", ERR_QUEUE),
        ({"priority": -1}, "priority", ERR_PRIORITY.format(names=PRIORITY_NAMES)),
        ({"priority": 10}, "priority", ERR_PRIORITY.format(names=PRIORITY_NAMES)),
        ({"priority": True}, "priority", ERR_PRIORITY.format(names=PRIORITY_NAMES)),
        ({"priority": "urgent"}, "priority", ERR_PRIORITY.format(names=PRIORITY_NAMES)),
        ({"priority": 5.0}, "priority", ERR_PRIORITY.format(names=PRIORITY_NAMES)),
        ({"concurrency_key": 42}, "concurrency_key", ERR_CONCURRENCY_KEY),
        ({"concurrency_key": "k" * 201}, "concurrency_key", ERR_CONCURRENCY_KEY),
    ],
)
def test_a_bad_option_raises_with_its_field_and_message(raw, field, message):
    before = copy.deepcopy(raw)
    with pytest.raises(JobOptionsError) as raised:
        JobOptions.validated(**raw)
    assert (raised.value.field, str(raised.value)) == (field, message)
    assert raw == before


def test_the_retry_policy_is_checked_first():
    with pytest.raises(JobOptionsError) as raised:
        JobOptions.validated(max_attempts=0, retry_policy="fast")
    assert (raised.value.field, str(raised.value)) == ("retry_policy", ERR_POLICY_TYPE)


def test_options_are_frozen_and_their_fields_a_copy():
    options = JobOptions.validated(retry_policy={"delays": [1]})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_attempts = 9
    options.as_fields()["retry_policy"]["delays"].append(99)
    assert options.retry_policy == {"delays": [1.0]}


def test_the_error_is_a_value_error():
    assert issubclass(JobOptionsError, ValueError)


def test_a_registered_handler_is_kept():
    assert validated_handler(HANDLER) == HANDLER


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("no_dots", ERR_HANDLER_PATH),
        (".relative.path", ERR_HANDLER_PATH),
        ("os.system(1)", ERR_HANDLER_PATH),
        (42, ERR_HANDLER_PATH),
    ],
)
def test_a_bad_handler_raises_on_handler(handler, message):
    with pytest.raises(JobOptionsError) as raised:
        validated_handler(handler)
    assert (raised.value.field, str(raised.value)) == ("handler", message)


@pytest.mark.parametrize(
    "handler", [UNREGISTERED, "tests.handlers.recording.missing", "os.system", "sys.exit"]
)
def test_an_unregistered_handler_is_refused_and_says_how_to_register(handler):
    with pytest.raises(JobOptionsError) as raised:
        validated_handler(handler)
    assert raised.value.field == "handler"
    assert str(raised.value).startswith(f"handler '{handler}' is not registered. ")
    assert "@job_handler" in str(raised.value)
    listed = str(raised.value).split("Registered handlers: ", 1)[1].rstrip(".")
    first = listed.split(", ")[0]
    assert validated_handler(first) == first  # registered names are listed


@pytest.mark.parametrize(
    "typo", ["tests.handlers.recording.recrod", "tests.handler.recording.record"]
)
def test_a_mistyped_handler_names_the_intended_one_first(typo):
    with pytest.raises(JobOptionsError) as raised:
        validated_handler(typo)
    known = str(raised.value).split("Registered handlers: ", 1)[1]
    assert known.startswith(HANDLER)  # the closest registered name leads the list


def test_a_payload_is_stored_as_json():
    assert validated_payload(None) == {}
    assert validated_payload({"ids": (1, 2)}) == {"ids": [1, 2]}


@pytest.mark.parametrize("payload", [{"when": dt.date(2030, 1, 1)}, {"x": float("nan")}])
def test_a_payload_that_is_not_json_raises_on_payload(payload):
    before = copy.deepcopy(payload)
    with pytest.raises(JobOptionsError) as raised:
        validated_payload(payload)
    message = ERR_PAYLOAD_JSON.format(reason=_json_reason(payload))
    assert (raised.value.field, str(raised.value)) == ("payload", message)
    assert str(payload) == str(before)


@pytest.mark.parametrize("key", [None, "k", "k" * 200])
def test_a_good_idempotency_key_is_kept(key):
    assert validated_idempotency_key(key) == key


@pytest.mark.parametrize("key", ["", "k" * 201, 42])
def test_a_bad_idempotency_key_raises_on_idempotency_key(key):
    with pytest.raises(JobOptionsError) as raised:
        validated_idempotency_key(key)
    assert (raised.value.field, str(raised.value)) == ("idempotency_key", ERR_KEY)


def test_a_retry_policy_alone_is_normalised():
    assert validated_retry_policy(None) == DEFAULT_POLICY
    assert validated_retry_policy({"delays": [0]}) == {"delays": [0.0]}

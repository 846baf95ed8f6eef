"""The embedded broker (kombu's file-system transport): a consumer never takes a message
before its bytes are written. kombu's own `_put` creates the file under its final name and
then writes it; a worker that took it in between read an empty file and ended with a
JSON decoding error (seen once in `test_run_smoke`: `./bin/run` stopped)."""

import json
import subprocess
import sys

import pytest
from kombu import Connection
from kombu.transport import filesystem
from kombu.utils.json import dumps

from schedapp import broker


def channel(transport, folder):
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(folder / "processed"),
        "store_processed": False,
    }
    (folder / "processed").mkdir(exist_ok=True)
    return Connection(transport=transport, transport_options=options).channel()


def consuming_while_writing(module, monkeypatch, consumer) -> list:
    """Make `module`'s serialisation (called while a message is being put) first let
    `consumer` look for a message; return what it found each time."""
    found = []

    def serialise(payload):
        try:
            found.append(consumer._get("q"))
        except filesystem.Empty:
            found.append(None)
        return dumps(payload)

    monkeypatch.setattr(module, "dumps", serialise)
    return found


def test_a_message_appears_only_once_it_is_whole(tmp_path, monkeypatch):
    producer, consumer = channel(broker.Transport, tmp_path), channel(broker.Transport, tmp_path)
    found = consuming_while_writing(broker, monkeypatch, consumer)
    producer._put("q", {"job": 1})
    assert found == [None]  # nothing to take while it was being written
    assert consumer._get("q") == {"job": 1}
    assert consumer._size("q") == 0
    assert [p.name for p in tmp_path.iterdir()] == ["processed"]  # no temporary file left


def test_a_producers_messages_keep_their_order(tmp_path):
    producer, consumer = channel(broker.Transport, tmp_path), channel(broker.Transport, tmp_path)
    for job in range(5):
        producer._put("q", {"job": job})
    assert consumer._size("q") == 5
    assert [consumer._get("q")["job"] for _ in range(5)] == list(range(5))


def test_kombus_own_transport_lets_a_consumer_take_an_unwritten_message(tmp_path, monkeypatch):
    """Why `schedapp.broker` exists: if this ever passes no more, kombu has fixed it."""
    producer = channel(filesystem.Transport, tmp_path)
    consumer = channel(filesystem.Transport, tmp_path)
    consuming_while_writing(filesystem, monkeypatch, consumer)
    with pytest.raises(json.JSONDecodeError):
        producer._put("q", {"job": 1})


def test_the_embedded_broker_uses_it(tmp_path):
    """Configured as `./bin/run` configures it: the Celery app's transport is this one."""
    from tests.test_run_smoke import embedded_env

    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from schedapp.celery import app;"
            " print(type(app.connection_for_write().transport).__module__)",
        ],
        env={**embedded_env(tmp_path), "DJANGO_SETTINGS_MODULE": "schedapp.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout.strip() == "schedapp.broker"

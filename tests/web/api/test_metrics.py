"""/metrics in Prometheus' text format."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.web.dashboard.fixtures import api_client_for

pytestmark = pytest.mark.django_db


def test_metrics_need_a_viewer(client, stranger):
    assert client.get("/metrics").status_code == 401
    assert api_client_for(stranger).get("/metrics").status_code == 403


def test_metrics_answer_a_viewer_token(viewer_api):
    assert viewer_api.get("/metrics").status_code == 200


def _families(client) -> dict:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def _value(family, **labels) -> float:
    for sample in family.samples:
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise AssertionError(f"no sample {labels} in {family.name}")


def test_metrics_with_activity(viewer_api, activity):
    families = _families(viewer_api)
    assert _value(families["tempo_jobs"], state="succeeded") == 27
    assert _value(families["tempo_jobs"], state="dead") == 3
    lag = families["tempo_job_start_lag_seconds"]
    count = next(s.value for s in lag.samples if s.name.endswith("_count"))
    inf = next(s.value for s in lag.samples if s.labels.get("le") == "+Inf")
    below_50ms = next(s.value for s in lag.samples if s.labels.get("le") == "0.05")
    # Jobs started in the last 5 minutes (run 1..5 min ago; the fifth is on the edge),
    # lags 10..50 ms; dead ones count too.
    assert count == inf == below_50ms
    assert 4 <= count <= 5
    assert _value(families["tempo_process_up"], kind="dispatcher", name="disp-a") == 1
    assert _value(families["tempo_process_up"], kind="dispatcher", name="disp-gone") == 0
    assert _value(families["tempo_process_up"], kind="worker", name="worker-1") == 1
    assert _value(families["tempo_dispatcher_partitions"], name="disp-a") == 4
    assert _value(families["tempo_dispatcher_cost_score_hour"]) == 312
    assert families["tempo_jobs_succeeded_per_minute"].samples[0].value > 0
    assert "tempo_job_failures_window" in families
    assert "tempo_job_retries_window" in families


def test_metrics_on_an_empty_database(viewer_api):
    families = _families(viewer_api)
    assert _value(families["tempo_jobs"], state="scheduled") == 0
    assert families["tempo_process_up"].samples == []


def test_metrics_is_get_only(operator_api):
    assert operator_api.post("/metrics").status_code == 405


def test_metrics_show_finished_jobs_rollup_lag_and_table_sizes(viewer_api, activity):
    from django.db import connection

    from tasksapp.retention.services import rollup_write

    families = _families(viewer_api)
    assert _value(families["tempo_jobs_finished_day"], state="succeeded") == 27
    assert _value(families["tempo_table_bytes"], table="tasksapp_job", part="indexes") > 0
    assert "tempo_table_dead_rows" in families
    assert "nan" in str(_value(families["tempo_rollup_lag_seconds"])).lower()  # never rolled

    rollup_write()  # rolls up what finished over 5 minutes ago; the rest stays rows
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(jobs) FROM tasksapp_jobrollup WHERE span = 3600")
        assert cursor.fetchone()[0] > 0
    families = _families(viewer_api)
    assert _value(families["tempo_jobs_finished_day"], state="succeeded") == 27  # the same
    assert 299 <= _value(families["tempo_rollup_lag_seconds"]) < 360


def test_metrics_show_a_stall_per_queue(viewer_api):
    import datetime as dt

    from django.utils import timezone

    from tests.web.dashboard.fixtures import make_job

    make_job(run_at=timezone.now() - dt.timedelta(seconds=200), queue="mail")
    families = _families(viewer_api)
    assert _value(families["tempo_healthy"]) == 0
    assert _value(families["tempo_queue_due_jobs"], queue="mail") == 1
    assert 199 <= _value(families["tempo_queue_oldest_due_seconds"], queue="mail") < 260
    assert _value(families["tempo_queue_oldest_due_seconds"], queue="default") == 0

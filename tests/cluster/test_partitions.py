"""Network partitions on the multi-host rig (tests/cluster/scenarios.py says what each
scenario checks). The figures printed are recorded in docs/BENCHMARKS.md, "Partitions"
(`python -m bench.cluster` repeats them)."""

import pytest

from tests.cluster.rig import Rig, rig_unavailable
from tests.cluster.scenarios import far_from_the_servers, lossy_links, postgres_cut, redis_cut

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(rig_unavailable() is not None, reason=str(rig_unavailable())),
]


@pytest.fixture
def rig(tmp_path):
    running = Rig(hosts=3, logs=tmp_path).start()
    yield running
    running.stop()


def test_a_host_cut_off_from_postgres_hands_over_its_partitions_and_rejoins(rig):
    print(f"postgres cut from h3: {postgres_cut(rig)}")


def test_a_host_cut_off_from_redis_hands_over_its_partitions_and_rejoins(rig):
    print(f"redis cut from h3: {redis_cut(rig)}")


def test_lossy_links_slow_jobs_down_but_run_each_once(rig):
    figures = lossy_links(rig)
    print(
        f"5 % packet loss on every host: {figures.late_jobs} of 120 jobs over 1 s late,"
        f" at most {figures.worst_lag_s:.2f} s"
    )


def test_hosts_a_round_trip_away_start_each_job_once_and_on_time(tmp_path):
    round_trip_ms = 25
    rig = Rig(hosts=3, logs=tmp_path, round_trip_ms=round_trip_ms).start()
    try:
        figures = far_from_the_servers(rig)
    finally:
        rig.stop()
    print(
        f"{round_trip_ms} ms round trip: {figures.late_jobs} of 120 jobs over 100 ms late,"
        f" the latest {figures.worst_lag_s * 1000:.0f} ms after its run time"
    )

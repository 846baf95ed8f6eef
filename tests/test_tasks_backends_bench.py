"""The Tasks backends bench's pure parts: start lags, lost and doubled tasks, kill points."""

from collections import Counter

from bench.tasks_backends.counting import exactly_once, kill_points, ratio, start_lags_ms


def test_start_lags_count_early_and_never_started_apart():
    rows = [(100.0, 100.010), (101.0, 101.020), (102.0, 101.999), (103.0, None)]
    assert start_lags_ms(rows) == {
        "started": 3,
        "not_started": 1,
        "early": 1,
        "lag_p50_ms": 10.0,
        "lag_p99_ms": 20.0,
        "lag_max_ms": 20.0,
    }


def test_a_clean_run_is_exactly_once():
    statuses = dict.fromkeys(range(3), "SUCCESSFUL")
    counted = exactly_once(range(3), statuses, Counter({0: 1, 1: 1, 2: 1}))
    assert counted == {
        "tasks": 3,
        "successful": 3,
        "lost": 0,
        "rows_missing": 0,
        "doubled": 0,
        "strays": 0,
        "left": {},
    }


def test_lost_missing_and_doubled_are_counted_apart():
    # 0: killed after its row committed (RUNNING for ever); 1: killed before it wrote;
    # 2: run twice; 3: no result at all; 9: a row of a task never enqueued.
    statuses = {0: "RUNNING", 1: "RUNNING", 2: "SUCCESSFUL", 4: "SUCCESSFUL"}
    effects = Counter({0: 1, 2: 2, 4: 1, 9: 1})
    counted = exactly_once(range(5), statuses, effects)
    assert counted == {
        "tasks": 5,
        "successful": 2,
        "lost": 3,
        "rows_missing": 2,
        "doubled": 1,
        "strays": 1,
        "left": {"RUNNING": 2, "none": 1},
    }


def test_kills_fall_evenly_inside_the_burst():
    assert kill_points(1000, 1) == [500]
    assert kill_points(1000, 5) == [166, 333, 500, 666, 833]


def test_ratio_is_tempo_over_the_other_and_blank_without_both():
    assert ratio(300, 100) == "3.00×"
    assert ratio(0, 100) == "—"
    assert ratio(5, float("nan")) == "—"

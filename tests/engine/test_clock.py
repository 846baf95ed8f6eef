"""The clock offset estimate: the shortest round trip wins, and old samples age."""

from tasksapp.engine.clock import ClockOffset


def test_a_round_trip_delayed_on_one_leg_does_not_move_the_estimate():
    clock = ClockOffset()
    clock.observe(1000.0, 1001.0, 1000.5)  # 1 ms round trip: offset 0
    clock.observe(2000.0, 2040.0, 2000.5)  # 40 ms, the reply leg slow: would say -19.5 ms
    assert clock.offset_ms == 0.0


def test_a_shorter_round_trip_replaces_the_estimate():
    clock = ClockOffset()
    clock.observe(1000.0, 1010.0, 1012.0)  # 10 ms round trip: +7 ms
    clock.observe(2000.0, 2001.0, 2003.5)  # 1 ms: +3 ms
    assert clock.offset_ms == 3.0


def test_the_kept_sample_ages_so_a_drifting_clock_is_followed():
    clock = ClockOffset()
    clock.observe(0.0, 1.0, 0.5)  # 1 ms round trip, offset 0
    for i in range(1, 40):  # later samples take 1.5 ms and see the clock 5 ms ahead
        clock.observe(i * 1000.0, i * 1000.0 + 1.5, i * 1000.0 + 5.75)
    assert clock.offset_ms == 5.0


def test_unmeasured_until_the_first_sample_and_after_a_reset():
    clock = ClockOffset()
    assert not clock.measured
    clock.observe(0.0, 1.0, 10.5)
    assert clock.measured and clock.offset_ms == 10.0
    clock.reset()
    assert not clock.measured and clock.offset_ms == 0.0

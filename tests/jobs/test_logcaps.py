"""The log meter: which lines a learner's attempt may store under its caps."""

from jobs.core.logcaps import MARKER_PREFIX, LogCaps, LogMeter, marker

CAPS = LogCaps(lines_per_second=3, bytes_per_second=100, lines=10, bytes=1000)


def test_lines_over_the_per_second_cap_are_dropped_until_the_next_second() -> None:
    meter = LogMeter(caps=CAPS)
    verdicts = [meter.exceeded(second=5, size=1) for _ in range(5)]
    assert verdicts[:3] == [None, None, None]
    assert verdicts[3:] == ["more than 3 lines in one second"] * 2
    assert meter.exceeded(second=6, size=1) is None
    assert (meter.lines, meter.dropped) == (4, 2)


def test_bytes_per_second_are_capped_like_lines() -> None:
    meter = LogMeter(caps=CAPS)
    assert meter.exceeded(second=1, size=60) is None
    assert meter.exceeded(second=1, size=60) == "more than 100 bytes in one second"
    assert meter.exceeded(second=2, size=60) is None


def test_the_attempt_totals_stop_everything_after_them_whatever_the_second() -> None:
    meter = LogMeter(caps=CAPS)
    for second in range(10):
        assert meter.exceeded(second=second, size=1) is None
    assert meter.exceeded(second=99, size=1) == "more than 10 lines in this attempt"
    big = LogMeter(caps=CAPS, bytes=990)
    assert big.exceeded(second=1, size=20) == "more than 1000 bytes in this attempt"


def test_a_line_without_a_timestamp_meets_the_totals_only() -> None:
    meter = LogMeter(caps=CAPS)
    assert all(meter.exceeded(second=None, size=1) is None for _ in range(10))
    assert meter.exceeded(second=None, size=1) == "more than 10 lines in this attempt"


def test_the_marker_names_what_was_exceeded_and_the_caps() -> None:
    text = marker("more than 3 lines in one second", CAPS)
    assert text.startswith(MARKER_PREFIX) and "more than 3 lines in one second" in text
    assert "3 lines/s, 100 bytes/s, 10 lines and 1000 bytes per learner and attempt" in text


def test_a_line_over_the_limit_is_cut_to_it_and_ends_with_a_marker_saying_how_long_it_was() -> None:
    from jobs.core.logcaps import MAX_LINE, cut_line, cut_marker

    assert cut_line("x" * MAX_LINE) == "x" * MAX_LINE
    long = "y" * 20_000_000
    stored = cut_line(long)
    assert len(stored) == MAX_LINE and stored.endswith(cut_marker(20_000_000))
    assert "20000000 characters long" in stored and stored.startswith("y" * 8000)

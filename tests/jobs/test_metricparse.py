"""Metric lines: the JSON and key=value formats become points; anything else stays a log line."""

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.core.metricparse import MetricPoint, checkpoint_step, extractors_for, parse_metric_line


def test_json_metric_line() -> None:
    line = '{"metric": "loss", "value": 0.31, "step": 120}'
    assert parse_metric_line(line) == [MetricPoint("loss", 0.31, 120)]


def test_json_line_with_several_metrics() -> None:
    line = '{"step": 7, "metrics": {"loss": 1.5, "samples_per_sec": 812}}'
    assert parse_metric_line(line) == [MetricPoint("loss", 1.5, 7), MetricPoint("samples_per_sec", 812.0, 7)]


def test_key_value_line() -> None:
    assert parse_metric_line("step=3 loss=0.25 acc=9e-1") == [
        MetricPoint("loss", 0.25, 3),
        MetricPoint("acc", 0.9, 3),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 1 loss=0.3 done",
        "plain text",
        '{"metric": "loss", "value": NaN}',
        '{"metric": "loss", "value": "high"}',
        '{"metric": "bad name!", "value": 1}',
        "[1, 2, 3]",
        "",
        "x=" + "9" * 5000,
    ],
)
def test_ordinary_lines_carry_no_metrics(line: str) -> None:
    assert parse_metric_line(line) == []


def test_negative_or_fractional_steps_are_dropped_not_the_value() -> None:
    assert parse_metric_line('{"metric": "loss", "value": 1, "step": -1}') == [MetricPoint("loss", 1.0, None)]


@given(st.text(max_size=300))
def test_any_text_parses_without_error(line: str) -> None:
    for point in parse_metric_line(line):
        assert point.value == point.value  # finite, never NaN


# -- FfDL's regex_extractor groups ---------------------------------------------------------------------

CAFFE = {
    "type": "regex_extractor",
    "groups": {
        "train": {
            "regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.eE+-]+)",
            "meta": {"time": "iteration"},
            "values": ["loss"],
        },
        "test": {
            "regex": r"Test net output #0: accuracy = (?P<accuracy>[0-9.]+)",
            "meta": {},
            "values": ["accuracy"],
        },
    },
}


def test_regex_extractor_groups_turn_matching_lines_into_points_with_their_step() -> None:
    extractors = extractors_for(CAFFE)
    line = "I1203 07:12:00 solver.cpp:228] Iteration 40, loss = 0.6931"
    assert parse_metric_line(line, extractors) == [MetricPoint("loss", 0.6931, 40)]
    line = "I1203 solver.cpp:404]     Test net output #0: accuracy = 0.9121"
    assert parse_metric_line(line, extractors) == [MetricPoint("accuracy", 0.9121, None)]
    assert parse_metric_line("Iteration 40 done", extractors) == []
    assert parse_metric_line("Iteration 40, loss = 0.6931") == [], "no extractors: an ordinary line"


def test_built_in_formats_win_over_regex_groups() -> None:
    assert parse_metric_line("step=2 loss=0.5", extractors_for(CAFFE)) == [MetricPoint("loss", 0.5, 2)]


def test_only_regex_extractor_type_compiles_groups() -> None:
    assert extractors_for({"type": "tensorboard", "in": "/logs"}) == ()
    assert extractors_for(None) == ()


def test_catastrophic_patterns_match_in_linear_time_and_still_find_their_values() -> None:
    # On a backtracking engine each of these takes exponential time on such a line (2^40 paths, or the
    # issue's eight groups of (.*a){12}b on 'a' * 60); on RE2 a thousand lines take well under a second.
    evil = {
        "type": "regex_extractor",
        "groups": {
            "nested": {"regex": r"^(a+)+(?P<v>\d)$", "values": ["v"]},
            **{f"g{i}": {"regex": r"(?P<loss>(.*a){12}b)", "values": ["loss"]} for i in range(7)},
        },
    }
    extractors = extractors_for(evil)
    assert len(extractors) == 8
    started = time.monotonic()
    for _ in range(1000):
        assert parse_metric_line("a" * 60, extractors) == []
        assert parse_metric_line("a" * 40 + "!", extractors) == []
    assert time.monotonic() - started < 5
    assert parse_metric_line("a" * 40 + "7", extractors) == [MetricPoint("v", 7.0, None)]


def test_a_stored_pattern_re2_cannot_run_is_skipped_not_raised() -> None:
    old = {
        "type": "regex_extractor",
        "groups": {
            "back": {"regex": r"(?P<v>\d)\1", "values": ["v"]},
            "ok": {"regex": r"loss (?P<loss>[0-9.]+)", "values": ["loss"]},
        },
    }
    assert parse_metric_line("loss 0.5", extractors_for(old)) == [MetricPoint("loss", 0.5, None)]


@pytest.mark.parametrize("line", ['{"checkpoint": 120}', "checkpoint=120"])
def test_a_checkpoint_line_reports_its_step(line: str) -> None:
    [point] = parse_metric_line(line)
    assert point.name == "checkpoint" and checkpoint_step(point) == 120


@pytest.mark.parametrize("line", ['{"checkpoint": -1}', '{"checkpoint": 1.5}', '{"checkpoint": "x"}'])
def test_a_checkpoint_line_without_a_whole_step_is_an_ordinary_line(line: str) -> None:
    assert [checkpoint_step(p) for p in parse_metric_line(line)] in ([], [None])


def test_other_metrics_are_not_checkpoints() -> None:
    assert [checkpoint_step(p) for p in parse_metric_line("step=3 loss=0.5")] == [None]

"""Metric lines: the JSON and key=value formats become points; anything else stays a log line."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.metricparse import MetricPoint, parse_metric_line


def test_json_metric_line() -> None:
    line = '{"metric": "loss", "value": 0.31, "step": 120}'
    assert parse_metric_line(line) == [MetricPoint("loss", 0.31, 120)]


def test_json_line_with_several_metrics() -> None:
    line = '{"step": 7, "metrics": {"loss": 1.5, "samples_per_sec": 812}}'
    assert parse_metric_line(line) == [MetricPoint("loss", 1.5, 7), MetricPoint("samples_per_sec", 812.0, 7)]


def test_key_value_line_in_ffdl_style() -> None:
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

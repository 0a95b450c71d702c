"""Metric lines in training logs: the formats a training script can print to report progress.

Two formats are recognised, one line each:

* JSON: ``{"metric": "loss", "value": 0.31, "step": 120}``, or several at once:
  ``{"step": 120, "metrics": {"loss": 0.31, "samples_per_sec": 812.5}}``;
* key=value (FfDL's regex style): ``step=120 loss=0.31 acc=0.92`` — the whole line is numeric pairs,
  optionally after a ``METRICS`` or ``metrics:`` tag.

Anything else is an ordinary log line. Names are at most 64 characters; values must be finite.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")
PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_./-]{0,63})=([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
KV_LINE = re.compile(
    r"^\s*(?:METRICS?:?\s+|metrics?:\s*)?"
    r"((?:[A-Za-z_][A-Za-z0-9_./-]{0,63}=[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*[,;]?\s*)+)$"
)
STEP_KEYS = ("step", "iteration", "iter", "global_step")
MAX_LINE = 4096


@dataclass(frozen=True)
class MetricPoint:
    """One value of one metric at one step (None when the line named no step)."""

    name: str
    value: float
    step: int | None


def parse_metric_line(line: str) -> list[MetricPoint]:
    """The metric points one log line carries; an empty list for an ordinary line."""
    text = line.strip()
    if not text or len(text) > MAX_LINE:
        return []
    if text.startswith("{") and text.endswith("}"):
        return _from_json(text)
    match = KV_LINE.match(text)
    if not match:
        return []
    pairs = {name: float(value) for name, value in PAIR.findall(match.group(1))}
    return _points(pairs)


def _from_json(text: str) -> list[MetricPoint]:
    try:
        data = json.loads(text)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    if "metric" in data and "value" in data:
        step = _step(data.get("step"))
        value = _number(data["value"])
        name = data["metric"]
        if isinstance(name, str) and NAME.match(name) and value is not None:
            return [MetricPoint(name, value, step)]
        return []
    if isinstance(data.get("metrics"), dict):
        values = dict(data["metrics"])
        if "step" in data:
            values["step"] = data["step"]
        return _points(values)
    return []


def _points(values: dict[str, Any]) -> list[MetricPoint]:
    step = next((_step(values[k]) for k in STEP_KEYS if k in values), None)
    points = []
    for name, raw in values.items():
        value = _number(raw)
        if name in STEP_KEYS or value is None or not isinstance(name, str) or not NAME.match(name):
            continue
        points.append(MetricPoint(name, value, step))
    return points


def _number(raw: Any) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def _step(raw: Any) -> int | None:
    value = _number(raw)
    if value is None or value < 0 or value != int(value) or value > 2**62:
        return None
    return int(value)

"""Metric lines in training logs: the formats a training script can print to report progress.

Two formats are recognised without configuration, one line each:

* JSON: ``{"metric": "loss", "value": 0.31, "step": 120}``, or several at once:
  ``{"step": 120, "metrics": {"loss": 0.31, "samples_per_sec": 812.5}}``;
* key=value (FfDL's regex style): ``step=120 loss=0.31 acc=0.92`` — the whole line is numeric pairs,
  optionally after a ``METRICS`` or ``metrics:`` tag.

A job whose logs look different declares FfDL-style `regex_extractor` groups in its spec's
`evaluation_metrics` (jobs/core/spec/metrics.py): each group's named captures become metrics, one of them
optionally the step. Such patterns come from users, so they run on RE2 (jobs/core/userregex.py), whose
time is linear in the line whatever the pattern: no pattern can stall the log ingest.

A checkpoint is reported the same way: ``{"checkpoint": 120}`` (or ``checkpoint=120``) once the state of
step 120 is saved to CHECKPOINT_DIR. It becomes the metric ``checkpoint`` (value and step: the step), and
preemption counts the work since the last one as what stopping the job would lose (jobs.core.preemption).

Anything else is an ordinary log line. Names are at most 64 characters; values must be finite.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jobs.core.userregex import UserPatternError, compile_user_pattern

log = logging.getLogger(__name__)

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")
PAIR = re.compile(r"([A-Za-z_][A-Za-z0-9_./-]{0,63})=([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")
KV_LINE = re.compile(
    r"^\s*(?:METRICS?:?\s+|metrics?:\s*)?"
    r"((?:[A-Za-z_][A-Za-z0-9_./-]{0,63}=[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*[,;]?\s*)+)$"
)
STEP_KEYS = ("step", "iteration", "iter", "global_step")
CHECKPOINT = "checkpoint"
MAX_LINE = 4096


@dataclass(frozen=True)
class MetricPoint:
    """One value of one metric at one step (None when the line named no step)."""

    name: str
    value: float
    step: int | None


@dataclass(frozen=True)
class Extractor:
    """One compiled `regex_extractor` group: which captures are metrics, and which is the step."""

    name: str
    pattern: Any  # a compiled RE2 pattern (jobs/core/userregex.py)
    values: tuple[str, ...]
    step: str | None


def parse_metric_line(line: str, extractors: Sequence[Extractor] = ()) -> list[MetricPoint]:
    """The metric points one log line carries; an empty list for an ordinary line.

    The built-in formats win; `extractors` (from `extractors_for`) are tried only on other lines.
    """
    text = line.strip()
    if not text or len(text) > MAX_LINE:
        return []
    if text.startswith("{") and text.endswith("}"):
        points = _from_json(text)
        if points:
            return points
    match = KV_LINE.match(text)
    if match:
        pairs = {name: float(value) for name, value in PAIR.findall(match.group(1))}
        return _points(pairs)
    return [point for extractor in extractors for point in _extract(extractor, text)]


def _extract(extractor: Extractor, text: str) -> list[MetricPoint]:
    found = extractor.pattern.search(text)
    if found is None:
        return []
    step = _step(_float(found.group(extractor.step))) if extractor.step else None
    points = []
    for name in extractor.values:
        value = _float(found.group(name))
        if value is not None and NAME.match(name):
            points.append(MetricPoint(name, value, step))
    return points


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def extractors_for(evaluation_metrics: Mapping[str, Any] | None) -> tuple[Extractor, ...]:
    """Compile a validated spec's `evaluation_metrics` groups (none unless type is regex_extractor)."""
    if not evaluation_metrics or evaluation_metrics.get("type") != "regex_extractor":
        return ()
    return _compiled(json.dumps(evaluation_metrics.get("groups") or {}, sort_keys=True))


@lru_cache(maxsize=256)
def _compiled(groups_json: str) -> tuple[Extractor, ...]:
    groups: dict[str, dict[str, Any]] = json.loads(groups_json)
    extractors = []
    for name, group in groups.items():
        try:
            pattern = compile_user_pattern(group["regex"])
        except UserPatternError as exc:  # stored before RE2 checked it at submit: that group is skipped
            log.warning("metric pattern %r cannot run: %s", name, exc)
            continue
        extractors.append(
            Extractor(
                name=name,
                pattern=pattern,
                values=tuple(group["values"]),
                step=(group.get("meta") or {}).get("time"),
            )
        )
    return tuple(extractors)


def _from_json(text: str) -> list[MetricPoint]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
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
    if set(data) == {CHECKPOINT}:
        step = _step(data[CHECKPOINT])
        return [MetricPoint(CHECKPOINT, float(step), step)] if step is not None else []
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


def checkpoint_step(point: MetricPoint) -> int | None:
    """The step a ``checkpoint`` point reports (its step, else its value as a whole number), or None for
    any other metric."""
    if point.name != CHECKPOINT:
        return None
    return point.step if point.step is not None else _step(point.value)

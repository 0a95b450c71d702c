"""Reading runs side by side: which metrics a list shows and which way is better, how train and validation
variants of one metric pair up, which hyperparameters differ, and how long a run took. Pure (no Django):
the jobs list, the comparison page, its API and CSV all call these.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["min", "max"]
MAX_METRIC_COLUMNS = 8
MAX_COMPARE = 10
MAX_METRIC_NAME = 64
MAX_POINTS = 5000
DEFAULT_POINTS = 500
LOWER_IS_BETTER = ("loss", "error", "perplexity")
_VARIANTS = {
    "train": "train", "training": "train",
    "val": "val", "valid": "val", "validation": "val", "eval": "val", "test": "test",
}  # fmt: skip
_VARIANT = re.compile(
    r"^(?P<pre>train|training|val|valid|validation|eval|test)[_/.](?P<base>.+)$|"
    r"^(?P<base2>.+?)[_/.](?P<post>train|training|val|valid|validation|eval|test)$"
)


@dataclass(frozen=True)
class MetricChoice:
    """A metric the jobs list shows a column for, and whether its best value is its lowest or highest."""

    name: str
    mode: Mode

    @property
    def label(self) -> str:
        return f"{self.name}:{self.mode}"


def best_mode(name: str) -> Mode:
    """Lower is better for names containing loss, error or perplexity; higher for anything else."""
    lowered = name.lower()
    return "min" if any(word in lowered for word in LOWER_IS_BETTER) else "max"


def parse_metric_choices(text: str) -> list[MetricChoice]:
    """`loss,accuracy` or `loss:min,bleu:max` as choices, duplicates dropped; ValueError says what is wrong."""
    choices: list[MetricChoice] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        name, _, mode = part.rpartition(":") if ":" in part else (part, "", "")
        name = name.strip()
        if mode and mode not in ("min", "max"):
            raise ValueError(f"{part!r}: say min or max after the colon, e.g. 'loss:min'")
        if not name or len(name) > MAX_METRIC_NAME or not name.isprintable() or "\x00" in name:
            raise ValueError(
                f"{part[:40]!r} is not a metric name (1 to {MAX_METRIC_NAME} printable characters)"
            )
        choice = MetricChoice(name, mode or best_mode(name))  # type: ignore[arg-type]
        if all(c.name != name for c in choices):
            choices.append(choice)
    if len(choices) > MAX_METRIC_COLUMNS:
        raise ValueError(f"{len(choices)} metrics asked for; at most {MAX_METRIC_COLUMNS}")
    return choices


def parse_job_ids(text: str | Sequence[str]) -> list[str]:
    """Job ids from `a,b,c` (or a list of such texts), in order, duplicates dropped; ValueError when none,
    more than MAX_COMPARE, or one that is not an id."""
    parts = [text] if isinstance(text, str) else list(text)
    ids: list[str] = []
    for part in parts:
        for raw in part.split(","):
            job_id = raw.strip()
            if not job_id:
                continue
            if len(job_id) > 16 or not job_id.isascii() or not job_id.isalnum():
                raise ValueError(f"{job_id[:20]!r} is not a job id")
            if job_id not in ids:
                ids.append(job_id)
    if len(ids) < 1:
        raise ValueError("name the jobs to compare, e.g. ids=abc,def")
    if len(ids) > MAX_COMPARE:
        raise ValueError(f"{len(ids)} jobs asked for; compare at most {MAX_COMPARE} at a time")
    return ids


def metric_family(name: str) -> tuple[str, str]:
    """(the metric a name is a variant of, the variant): `val_loss` → (`loss`, `val`), `train/acc` →
    (`acc`, `train`), `loss` → (`loss`, ``): train and validation curves of one metric share a chart."""
    match = _VARIANT.match(name)
    if not match:
        return name, ""
    if match.group("pre"):
        return match.group("base"), _VARIANTS[match.group("pre")]
    return match.group("base2"), _VARIANTS[match.group("post")]


def differing(values: Iterable[Any]) -> bool:
    """Whether the jobs' values of one hyperparameter are not all the same (a missing one counts as a value)."""
    seen = [repr(v) for v in values]
    return len(set(seen)) > 1


def format_duration(seconds: float | None) -> str:
    """`3h 05m`, `12m 04s`, `42s`; an em dash for a run that has not started."""
    if seconds is None:
        return "—"
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def format_number(value: float | None) -> str:
    """A metric value in at most six significant digits (`0.251234`, `1.2e-05`, `900000`)."""
    if value is None:
        return ""
    return f"{value:.6g}"

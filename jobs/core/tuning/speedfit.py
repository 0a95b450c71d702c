"""A job's speed as a function of its CPU, fitted to measured runs (Amdahl's law), and the stored fit the
trace simulator's speed model reads (``speed_fit.json`` next to this module).

Amdahl: with ``c`` CPUs a job spends ``t(c) = a + b / c`` seconds per sample (``a`` the part no extra CPU
shortens, ``b`` the part it divides), so its speed is ``1 / t(c)`` and its speed-up over one CPU is
``1 / (s + (1 - s) / c)`` with the serial fraction ``s = a / (a + b)``. Time per sample is linear in
``1 / c``, so the fit is ordinary least squares on ``(1 / c, 1 / speed)``: closed form, no solver, and
exact on data that follows the law. ``s`` below zero means the runs scaled better than linearly (caches,
noise); the fit reports it as measured and :meth:`AmdahlFit.speedup` clamps it to ``[0, 1]``.

Written by ``bench/tuner_bench.py --fit`` from runs of the example job (examples/train/train.py) at a
few CPU sizes on kubesim; the file keeps the measurements, the residuals and how they were taken.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FIT_PATH = Path(__file__).with_name("speed_fit.json")


@dataclass(frozen=True)
class AmdahlFit:
    """A fitted Amdahl curve: the serial fraction, the speed at one CPU, and how well it fits the points
    (relative residuals, measured over predicted minus one, in the points' order)."""

    serial_fraction: float
    speed_at_one_cpu: float
    points: tuple[tuple[float, float], ...] = ()
    residuals: tuple[float, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)

    def speedup(self, cpus: float) -> float:
        """Speed with ``cpus`` CPUs over the speed with one (the serial fraction clamped to [0, 1])."""
        s = min(1.0, max(0.0, self.serial_fraction))
        return 1.0 / (s + (1.0 - s) / cpus)

    def speed(self, cpus: float) -> float:
        """Predicted samples/s with ``cpus`` CPUs."""
        return self.speed_at_one_cpu * self.speedup(cpus)

    @property
    def rms_residual(self) -> float:
        return math.sqrt(statistics.fmean(r * r for r in self.residuals)) if self.residuals else 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["model"] = "amdahl"
        data["points"] = [{"cpus": c, "samples_per_sec": v} for c, v in self.points]
        data["rms_residual"] = round(self.rms_residual, 6)
        return data


def fit_amdahl(
    points: Sequence[tuple[float, float]], *, provenance: dict[str, Any] | None = None
) -> AmdahlFit:
    """Least-squares Amdahl fit to ``(cpus, samples_per_sec)`` points; needs two CPU sizes or more and
    positive values (ValueError otherwise)."""
    if any(c <= 0 or v <= 0 for c, v in points):
        raise ValueError("every point needs a positive CPU count and a positive speed")
    if len({c for c, _ in points}) < 2:
        raise ValueError("an Amdahl fit needs runs at two CPU sizes or more")
    xs = [1.0 / c for c, _ in points]
    ys = [1.0 / v for _, v in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    if a + b <= 0 or any(a + b / c <= 0 for c, _ in points):
        raise ValueError("the points fit no positive speed (not an Amdahl curve)")
    predicted = [1.0 / (a + b / c) for c, _ in points]
    return AmdahlFit(
        serial_fraction=a / (a + b),
        speed_at_one_cpu=1.0 / (a + b),
        points=tuple((float(c), float(v)) for c, v in points),
        residuals=tuple(v / p - 1.0 for (_, v), p in zip(points, predicted, strict=True)),
        provenance=dict(provenance or {}),
    )


def save_fit(fit: AmdahlFit, path: Path = FIT_PATH) -> None:
    """Write the fit (parameters, points, residuals, provenance) as indented JSON."""
    path.write_text(json.dumps(fit.as_dict(), indent=2, sort_keys=True) + "\n")


def load_fit(path: Path = FIT_PATH) -> AmdahlFit:
    """The stored fit (ValueError when the file is not an Amdahl fit)."""
    data = json.loads(path.read_text())
    if data.get("model") != "amdahl":
        raise ValueError(f"{path} holds no Amdahl fit")
    return AmdahlFit(
        serial_fraction=float(data["serial_fraction"]),
        speed_at_one_cpu=float(data["speed_at_one_cpu"]),
        points=tuple((float(p["cpus"]), float(p["samples_per_sec"])) for p in data.get("points", [])),
        residuals=tuple(float(r) for r in data.get("residuals", [])),
        provenance=dict(data.get("provenance") or {}),
    )

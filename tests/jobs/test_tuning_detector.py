"""The bottleneck detector on synthetic series and on a recorded one (tests/jobs/data/): stable only once
the speed varies little, each class recognised with its evidence as numbers."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path

import pytest

from jobs.core.tuning.detector import BOTTLENECKS, Point, Thresholds, diagnose
from jobs.models import TelemetrySample
from jobs.tuning.selectors import window_points

RECORDED_1CPU = Path(__file__).parent / "data" / "train_cpu_1cpu_telemetry.json"


def series(
    n: int = 8,
    *,
    cpu: float = 950,
    limit: float = 1000,
    memory: float = 300,
    memory_limit: float = 1024,
    speed: float | None = 1000.0,
    jitter: float = 0.02,
    learners: int = 1,
    gpu: float | None = None,
    seed: int = 1,
) -> list[Point]:
    rng = random.Random(seed)
    return [
        Point(
            ts=10.0 * i,
            cpu_used=cpu,
            cpu_limit=limit,
            memory_used=memory,
            memory_limit=memory_limit,
            speed=None if speed is None else speed * (1 + rng.uniform(-jitter, jitter)),
            learners=learners,
            gpu_util=gpu,
        )
        for i in range(n)
    ]


def test_too_few_points_is_not_stable() -> None:
    result = diagnose(series(3))
    assert not result.stable
    assert result.bottleneck == "unknown"
    assert result.evidence["points_with_speed"] == 3


def test_points_without_speed_do_not_count() -> None:
    result = diagnose(series(10, speed=None))
    assert not result.stable
    assert result.evidence["points_with_speed"] == 0


def test_noisy_speed_is_not_stable() -> None:
    result = diagnose(series(10, jitter=0.6))
    assert not result.stable
    assert result.evidence["speed_cv"] > Thresholds().stable_cv


def test_cpu_at_the_limit_is_cpu_bound_with_numbers() -> None:
    result = diagnose(series(cpu=990))
    assert (result.stable, result.bottleneck) == (True, "cpu_bound")
    assert result.evidence["cpu_util"] == pytest.approx(0.99)
    assert result.evidence["cpu_limit_millis"] == 1000
    assert result.speed == pytest.approx(1000, rel=0.03)


def test_cpu_far_below_the_limit_is_over_provisioned() -> None:
    result = diagnose(series(cpu=200, limit=2000))
    assert result.bottleneck == "over_provisioned"
    assert result.evidence["cpu_util"] == pytest.approx(0.1)


def test_memory_near_the_limit_wins_over_cpu() -> None:
    result = diagnose(series(cpu=990, memory=1000))
    assert result.bottleneck == "memory_pressure"
    assert result.evidence["memory_peak_util"] > 0.9


def test_busy_gpus_are_gpu_bound() -> None:
    result = diagnose(series(cpu=990, gpu=0.95))
    assert result.bottleneck == "gpu_bound"
    assert result.evidence["gpu_util"] == pytest.approx(0.95)


def test_several_learners_half_busy_are_scaling_limited() -> None:
    result = diagnose(series(cpu=600, learners=4))
    assert result.bottleneck == "scaling_limited"


def test_scaling_efficiency_against_a_single_learner_rate() -> None:
    slow = diagnose(series(cpu=600, learners=2, speed=1000), single_learner_speed=1000)
    assert slow.bottleneck == "scaling_limited"
    assert slow.evidence["scaling_efficiency"] == pytest.approx(0.5, rel=0.03)
    fine = diagnose(series(cpu=600, learners=2, speed=1900), single_learner_speed=1000)
    assert fine.bottleneck == "unknown"


def test_middling_cpu_alone_is_unknown() -> None:
    assert diagnose(series(cpu=600)).bottleneck == "unknown"


def test_every_class_is_a_known_name() -> None:
    for points in (series(cpu=990), series(cpu=10), series(memory=1020), series(gpu=0.9), series(cpu=600)):
        assert diagnose(points).bottleneck in BOTTLENECKS


def recorded_rows(path: Path) -> list[TelemetrySample]:
    """The fixture's rows as (unsaved) TelemetrySample objects, as the service reads them from the table."""
    rows = json.loads(path.read_text())["rows"]
    return [TelemetrySample(**{**row, "ts": datetime.fromisoformat(row["ts"])}) for row in rows]


def test_recorded_example_job_at_one_cpu_is_stable_and_cpu_bound() -> None:
    # examples/train/train.py --input-cost=8 as a kubesim pod limited to 1 CPU (cgroup CFS quota), 12 looks
    # 2 s apart; recorded by examples/train/record_telemetry.py (how: the fixture's "recorded_with").
    points = window_points(recorded_rows(RECORDED_1CPU))
    assert len(points) == 12 and all(p.cpu_limit == 1000 and p.learners == 1 for p in points)
    result = diagnose(points)
    assert (result.stable, result.bottleneck) == (True, "cpu_bound")
    assert result.evidence["cpu_util"] >= Thresholds().cpu_high
    assert result.evidence["speed_cv"] <= Thresholds().stable_cv
    assert result.evidence["memory_peak_util"] < Thresholds().memory_high
    assert result.evidence["gpu_util"] is None


def test_recorded_series_is_not_stable_before_enough_looks() -> None:
    points = window_points(recorded_rows(RECORDED_1CPU))[:3]
    assert not diagnose(points).stable

"""The speed model fitted to measurements: the Amdahl fit recovers known parameters from synthetic runs,
reports its residuals, round-trips through its data file, refuses data it cannot fit, and the trace
simulator's tuning model reads the stored fit (bench/tuner_bench.py --fit --write-fit writes it)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from jobs.core.simulator_tuning import SpeedModel
from jobs.core.tuning.speedfit import FIT_PATH, AmdahlFit, fit_amdahl, load_fit, save_fit


def amdahl_points(serial: float, one: float, sizes: list[float], noise: float = 0.0, seed: int = 0):
    rng = random.Random(seed)
    return [(c, one / (serial + (1 - serial) / c) * (1 + rng.uniform(-noise, noise))) for c in sizes]


@pytest.mark.parametrize("serial", [0.0, 0.1, 0.35, 0.8])
def test_the_fit_recovers_known_parameters_exactly_from_clean_data(serial: float) -> None:
    fit = fit_amdahl(amdahl_points(serial, 5000.0, [1, 1.5, 2, 3, 4]))
    assert fit.serial_fraction == pytest.approx(serial, abs=1e-9)
    assert fit.speed_at_one_cpu == pytest.approx(5000.0)
    assert max(abs(r) for r in fit.residuals) < 1e-9
    assert fit.speedup(2) == pytest.approx(1 / (serial + (1 - serial) / 2))


def test_the_fit_recovers_parameters_from_noisy_data_and_reports_the_noise_as_residuals() -> None:
    fit = fit_amdahl(amdahl_points(0.2, 8000.0, [1, 1, 1.5, 1.5, 2, 2, 3, 3], noise=0.03, seed=4))
    assert fit.serial_fraction == pytest.approx(0.2, abs=0.05)
    assert fit.speed_at_one_cpu == pytest.approx(8000.0, rel=0.05)
    assert 0.0 < fit.rms_residual < 0.03
    assert len(fit.residuals) == 8


def test_better_than_linear_runs_are_reported_as_measured_and_clamped_for_prediction() -> None:
    fit = fit_amdahl([(1, 1000.0), (2, 2070.0)])
    assert fit.serial_fraction < 0
    assert fit.speedup(2) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "points", [[(1, 1000.0)], [(1, 1000.0), (1, 1100.0)], [(0, 1000.0), (2, 1500.0)], [(1, -5.0), (2, 1.0)]]
)
def test_data_it_cannot_fit_is_refused(points: list[tuple[float, float]]) -> None:
    with pytest.raises(ValueError):
        fit_amdahl(points)


def test_the_fit_round_trips_through_its_data_file(tmp_path: Path) -> None:
    fit = fit_amdahl(amdahl_points(0.25, 3000.0, [1, 2, 4]), provenance={"measured_at": "2026-12-04T04:00Z"})
    path = tmp_path / "fit.json"
    save_fit(fit, path)
    data = json.loads(path.read_text())
    assert data["model"] == "amdahl" and data["points"][0] == {"cpus": 1.0, "samples_per_sec": 3000.0}
    again = load_fit(path)
    assert again.serial_fraction == pytest.approx(0.25)
    assert again.provenance == {"measured_at": "2026-12-04T04:00Z"}


def test_the_stored_fit_comes_from_measured_runs_of_the_example_job() -> None:
    fit = load_fit()
    assert len({c for c, _ in fit.points}) >= 2
    assert len(fit.residuals) == len(fit.points)
    assert "examples/train/train.py" in fit.provenance["workload"]
    assert fit.provenance["measured_at"] and fit.provenance["command"].startswith("bench/tuner_bench.py")


def test_the_simulator_speed_model_uses_the_stored_fit() -> None:
    stored = load_fit()
    model = SpeedModel.fitted()
    assert model.serial_fraction == stored.serial_fraction
    assert str(FIT_PATH.name) in model.fit_source
    assert any("fitted: Amdahl serial fraction" in line for line in model.describe())


def test_the_fitted_model_is_amdahl_under_the_gpus_roofline(tmp_path: Path) -> None:
    path = tmp_path / "fit.json"
    save_fit(AmdahlFit(serial_fraction=0.5, speed_at_one_cpu=1000.0), path)
    model = SpeedModel.fitted(path, cpu_per_gpu_millis=4000)
    # S(c) = 1 / (0.5 + 0.5 / c): S(1) = 1, S(2) = 4/3, and one GPU needs 4 CPUs: S(4) = 1.6.
    assert model.speed(1, 1000) == pytest.approx(1.0 / 1.6)
    assert model.speed(1, 2000) == pytest.approx((1 / 0.75) / 1.6)
    assert model.speed(1, 8000) == 1.0  # the GPU caps it
    assert SpeedModel(cpu_per_gpu_millis=4000).speed(1, 1000) == pytest.approx(0.25)  # stated: linear

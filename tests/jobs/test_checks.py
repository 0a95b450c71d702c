"""System checks of the jobs settings."""

from __future__ import annotations

from typing import Any

from jobs.checks import gpu_tolerations_check


def test_the_default_gpu_tolerations_pass() -> None:
    assert gpu_tolerations_check() == []


def test_misspelt_gpu_tolerations_fail_the_check(settings: Any) -> None:
    settings.GPU_TOLERATIONS = ["nvidia.com/gpu:NoSchedule", "sku=gpu:Sometimes"]
    [error] = gpu_tolerations_check()
    assert error.id == "jobs.E001" and "Sometimes" in error.msg

"""System checks of the jobs settings."""

from __future__ import annotations

from typing import Any

from jobs.checks import gpu_tolerations_check, pod_overrides_check, preemption_check


def test_the_default_gpu_tolerations_pass() -> None:
    assert gpu_tolerations_check() == []


def test_misspelt_gpu_tolerations_fail_the_check(settings: Any) -> None:
    settings.GPU_TOLERATIONS = ["nvidia.com/gpu:NoSchedule", "sku=gpu:Sometimes"]
    [error] = gpu_tolerations_check()
    assert error.id == "jobs.E001" and "Sometimes" in error.msg


def test_preemption_settings_are_checked(settings: Any) -> None:
    assert preemption_check() == []
    settings.PREEMPTION = "oldest"
    settings.PREEMPTION_MIN_RUNTIME_SECONDS = -1
    assert [e.id for e in preemption_check()] == ["jobs.E002", "jobs.E003"]
    settings.PREEMPTION, settings.PREEMPTION_MIN_RUNTIME_SECONDS = "off", 0
    assert preemption_check() == []


def test_pod_overrides_set_at_run_time_are_checked(settings: Any) -> None:
    assert pod_overrides_check() == []
    settings.POD_OVERRIDES = {"priority_class_name": "system-node-critical"}
    [error] = pod_overrides_check()
    assert error.id == "jobs.E012" and "reserved for the cluster's own pods" in error.msg

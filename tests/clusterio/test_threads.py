"""`tuning.threads`: with `auto` every known thread pool is sized to the learner's CPU limit, fractional
limits rounded up; with `off` nothing is set and the user's own values pass through."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio.builders import JobPodsSpec, make_learner_pod
from clusterio.threads import DATALOADER_WORKERS_ENV, THREAD_ENV_NAMES, TORCH_INTEROP_ENV, thread_env

FRAMEWORK_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


def _spec(**overrides: Any) -> JobPodsSpec:
    fields: dict[str, Any] = {
        "job_id": "abc",
        "attempt": 1,
        "tenant": "acme",
        "namespace": "ty-acme",
        "image": "python:3.11",
        "command": ["python", "train.py"],
        "learners": 1,
        "gpus": 0,
        "cpu_millis": 1000,
        "memory_mib": 1024,
        "checkpoint_dir": "/checkpoints",
        "data_dir": "/data",
        "result_dir": "/results",
        "master_port": 29500,
    }
    fields.update(overrides)
    return JobPodsSpec(**fields)


def _env(spec: JobPodsSpec) -> dict[str, str]:
    container = make_learner_pod(spec, 0).spec.containers[0]
    return {e.name: str(e.value) for e in container.env if e.value is not None}


@pytest.mark.parametrize(
    ("cpu_millis", "threads", "workers"),
    [(250, 1, 0), (500, 1, 0), (1000, 1, 0), (1500, 2, 1), (2000, 2, 1), (2500, 3, 2), (8000, 8, 7)],
)
def test_auto_sizes_every_pool_to_the_cpu_limit(cpu_millis: int, threads: int, workers: int) -> None:
    env = _env(_spec(cpu_millis=cpu_millis, threads="auto"))
    for name in FRAMEWORK_VARIABLES:
        assert env[name] == str(threads), name
    assert env[TORCH_INTEROP_ENV] == str(threads)
    assert env[DATALOADER_WORKERS_ENV] == str(workers)


def test_fractional_limit_rounds_up_and_never_to_zero() -> None:
    assert thread_env(1)["OMP_NUM_THREADS"] == "1"
    assert thread_env(1001)["OMP_NUM_THREADS"] == "2"
    assert thread_env(1001)[DATALOADER_WORKERS_ENV] == "1"


def test_off_sets_no_thread_variable() -> None:
    env = _env(_spec(cpu_millis=1500, threads="off"))
    for name in (*THREAD_ENV_NAMES, TORCH_INTEROP_ENV, DATALOADER_WORKERS_ENV):
        assert name not in env, name


def test_off_lets_the_user_set_thread_variables() -> None:
    env = _env(_spec(threads="off", env={"OMP_NUM_THREADS": "7", "TF_NUM_INTRAOP_THREADS": "3"}))
    assert env["OMP_NUM_THREADS"] == "7"
    assert env["TF_NUM_INTRAOP_THREADS"] == "3"


def test_auto_overrides_the_users_thread_variables() -> None:
    env = _env(_spec(cpu_millis=2000, threads="auto", env={"OMP_NUM_THREADS": "64"}))
    assert env["OMP_NUM_THREADS"] == "2"


def test_tuned_cpu_changes_the_thread_count() -> None:
    """The tuner changes `Job.cpu_millis`; the next attempt's pods are sized from it."""
    assert _env(_spec(cpu_millis=1000))["OMP_NUM_THREADS"] == "1"
    assert _env(_spec(cpu_millis=2000, attempt=2))["OMP_NUM_THREADS"] == "2"

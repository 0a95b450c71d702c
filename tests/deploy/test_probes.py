"""The worker's and beat's exec probes, run as the kubelet runs them, against a real worker and a real beat.

Each process is started as the Deployment starts it (`celery -A portal worker|beat`), with HEARTBEAT_DIR
pointing at a temporary folder and this run's own Redis db; the probe commands come from the manifests
(their /tmp path swapped for that folder). Needs Redis; no database, no cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from tests.conftest import ROOT
from tests.deploy.test_manifests import find, heartbeat_probe, pod_spec

PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
QUEUE = "trainyard-probe-test"  # the test worker consumes nothing anybody sends


def probe_passes(process: str, probe_name: str, heartbeat_dir: Path) -> bool:
    (container,) = pod_spec(find("Deployment", process))["containers"]
    path, _ = heartbeat_probe(container, probe_name)
    command = [
        arg.replace(path, str(heartbeat_dir / Path(path).name))
        for arg in container[probe_name]["exec"]["command"]
    ]
    return (
        subprocess.run(
            [sys.executable, *command[1:]], capture_output=True, timeout=30, check=False
        ).returncode
        == 0
    )


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[[list[str]], subprocess.Popen[bytes]]]:
    """Start a Celery process with heartbeats into tmp_path; stopped (and its queue emptied) at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def run(args: list[str]) -> subprocess.Popen[bytes]:
        env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "portal.settings.test",
            "REDIS_URL": settings.REDIS_URL,
            "HEARTBEAT_DIR": str(tmp_path),
            "SCHEDULE_INTERVAL_SECONDS": "1",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "stderr.txt", "wb"),  # noqa: SIM115 (closed with the process)
        )
        started.append(process)
        return process

    yield run
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    redis.Redis.from_url(settings.REDIS_URL).delete("celery", QUEUE)  # what beat sent


def _mtime(path: Path) -> float:
    return path.stat().st_mtime if path.exists() else 0.0


def test_a_running_worker_passes_its_probes_and_fails_them_once_it_stops(
    start: Callable[[list[str]], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    alive = tmp_path / "trainyard-worker.alive"
    assert not any(probe_passes("worker", p, tmp_path) for p in PROBES), "no worker yet, no probe passes"
    worker = start(["worker", "--pool=solo", f"--queues={QUEUE}", "--without-mingle", "--loglevel=INFO"])
    wait_for(
        alive.exists, 90, f"the worker's heartbeat file ({(tmp_path / 'stderr.txt').read_text()[-2000:]})"
    )
    first = _mtime(alive)
    wait_for(lambda: _mtime(alive) > first, 15, "a second heartbeat (the file kept fresh)")
    assert all(probe_passes("worker", p, tmp_path) for p in PROBES)
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    assert not alive.exists(), "a stopped worker leaves no heartbeat behind"
    assert not probe_passes("worker", "readinessProbe", tmp_path)


def test_a_worker_whose_heartbeat_went_stale_fails_liveness(tmp_path: Path) -> None:
    alive = tmp_path / "trainyard-worker.alive"
    alive.touch()
    assert probe_passes("worker", "livenessProbe", tmp_path)
    (container,) = pod_spec(find("Deployment", "worker"))["containers"]
    _, age = heartbeat_probe(container, "livenessProbe")
    os.utime(alive, (time.time() - age - 5, time.time() - age - 5))
    assert not probe_passes("worker", "livenessProbe", tmp_path)


def test_a_running_beat_passes_its_probes_with_each_task_it_sends(
    start: Callable[[list[str]], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    alive = tmp_path / "trainyard-beat.alive"
    start(["beat", f"--schedule={tmp_path / 'celerybeat-schedule'}", "--loglevel=INFO"])
    wait_for(alive.exists, 90, f"beat's heartbeat file ({(tmp_path / 'stderr.txt').read_text()[-2000:]})")
    first = _mtime(alive)
    wait_for(lambda: _mtime(alive) > first, 15, "beat's next send (the scheduler cycle every second)")
    assert all(probe_passes("beat", p, tmp_path) for p in PROBES)

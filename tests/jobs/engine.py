"""Helpers the end-to-end engine tests share: wait for a condition or a job state, and say why not."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from jobs.core.states import TERMINAL
from jobs.models import Job, LogLine
from kubesim.testing import KubeSim
from tests.clusters import pod_host

# A learner that checkpoints each step atomically (a kill between truncate and write must not leave an
# empty checkpoint), resumes from the last one and says where it resumed: for requeue-and-resume tests.
CHECKPOINTED = """
import json, os, pathlib, time
ck = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "step"
start = int(ck.read_text()) if ck.exists() else 0
print(f"resuming from {start}", flush=True)
for step in range(start, 30):
    time.sleep(0.1)
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step + 1))
    os.replace(tmp, ck)
    print(json.dumps({"metric": "loss", "value": 1 / (step + 1), "step": step}), flush=True)
print("finished", flush=True)
"""


def wait_until(check: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll `check` every 0.1 s until it returns something truthy (returned), or fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def describe(job: Job, *, logs: bool = False) -> str:
    """The job's state and events (and, with `logs`, its log lines) for an assertion message."""
    job.refresh_from_db()
    events = list(job.events.values_list("kind", "to_status", "reason", "message"))
    text = f"job {job.pk} is {job.status} ({job.reason}: {job.message}); events {events}"
    if logs:
        text += f"; logs {list(LogLine.objects.filter(job=job).values_list('learner', 'text'))}"
    return text


def wait_status(
    job: Job,
    *statuses: str,
    timeout: float = 60.0,
    poll: Callable[[], Any] | None = None,
    logs: bool = False,
) -> Job:
    """Wait for one of `statuses` (calling `poll` between looks); fail at once on another final state."""

    def reached() -> Job | None:
        if poll is not None:
            poll()
        job.refresh_from_db()
        if job.status in TERMINAL and job.status not in statuses:
            raise AssertionError(describe(job, logs=logs))
        return job if job.status in statuses else None

    try:
        return wait_until(reached, timeout, f"job {job.pk} to reach {statuses}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe(job, logs=logs)}") from None


def python_spec(name: str, script: str, *, cpu: str = "250m", memory: str = "128Mi", **extra: Any) -> str:
    """A Trainyard spec (JSON) that runs `script` with the environment's python."""
    document = {
        "name": name,
        "image": "python:3.11",
        "command": ["python", "-u", "-c", script],
        "resources": {"cpu": cpu, "memory": memory},
        **extra,
    }
    return json.dumps(document)


HOLD = """
import os, socket
gate = (os.environ.get("GATE_HOST", "127.0.0.1"), int(os.environ["GATE_PORT"]))
with socket.create_connection(gate, timeout=120) as s:
    print("holding", flush=True)
    s.recv(1)
print("released", flush=True)
"""
"""A job script that runs until the test lets it go: it connects to the test's listening socket (port in
GATE_PORT, host in GATE_HOST: see `gate_env`) and ends when a byte arrives, so a test holds a job
running as long as it needs without depending on timing."""


def gate_env(sim: KubeSim, port: int) -> dict[str, str]:
    """The env a HOLD job needs to reach the test's gate socket on ``127.0.0.1:port``: kubesim exposes the port
    to pods at the node's name (tests.clusters.pod_host)."""
    return {"GATE_HOST": pod_host(sim, port), "GATE_PORT": str(port)}

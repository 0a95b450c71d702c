"""High availability: two watchers and two beats run as the Deployments run them (`manage.py watch_cluster`,
`celery -A portal beat`), each pair electing its leader (common/leader.py), with a real worker process,
against the test database, Redis db and kubesim. The leading beat, then the leading watcher, is killed with
SIGKILL; the standby leads and the work goes on with nothing lost: the scheduler cycle keeps running, and a
job that printed half its log under the first watcher and the other half while no watcher led ends
`succeeded` with every line stored once, in order.

The takeover times are printed (`pytest -s`), not asserted: they are figures of this machine's load.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection

from common import telemetry
from common.leader import leader_of
from jobs.models import Job, LogLine
from jobs.services import job_submit
from kubesim.testing import KubeSim
from portal import health
from tests.conftest import ROOT, _end_other_database_sessions
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, gate_env, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HALVES = """
import os, socket
for i in range(20):
    print(f"line {i}", flush=True)
gate = (os.environ["GATE_HOST"], int(os.environ["GATE_PORT"]))
with socket.create_connection(gate, timeout=300) as s:
    s.recv(1)
for i in range(20, 40):
    print(f"line {i}", flush=True)
"""


WORKER = [
    *(sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=threads", "--concurrency=4"),
    *("--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"),
]
BEAT = [sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel=WARNING"]
WATCHER = [sys.executable, "manage.py", "watch_cluster"]


@dataclass
class Platform:
    """The processes of the platform a test started, by role, each with its heartbeat folder and log."""

    folder: Path
    env: dict[str, str]
    processes: dict[str, list[subprocess.Popen[bytes]]] = field(default_factory=dict)

    def start(self, role: str) -> subprocess.Popen[bytes]:
        """Start one more process of `role` ("worker", "beat", "watcher") as its Deployment does."""
        n = len(self.processes.setdefault(role, []))
        command = {
            "worker": [*WORKER, "-Q", f"celery,{django_settings.TENSORBOARD_QUEUE}"],
            "beat": [*BEAT, f"--schedule={self.folder / f'beat-{n}.schedule'}"],
            "watcher": WATCHER,
        }[role]
        (self.folder / f"{role}-{n}").mkdir()
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env | {"HEARTBEAT_DIR": str(self.folder / f"{role}-{n}")},
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=(self.folder / f"{role}-{n}.log").open("wb"),
        )
        self.processes[role].append(process)
        return process

    def heartbeat(self, role: str, process: subprocess.Popen[bytes]) -> Path:
        return self.folder / f"{role}-{self.processes[role].index(process)}" / f"trainyard-{role}.alive"

    def identity(self, process: subprocess.Popen[bytes]) -> str:
        return f"{socket.gethostname()}:{process.pid}"

    def leader(self, role: str) -> subprocess.Popen[bytes] | None:
        """The process of `role` that holds the leader lock now."""
        who = leader_of(role)
        return next((p for p in self.processes[role] if self.identity(p) == who), None)

    def log(self, role: str, process: subprocess.Popen[bytes]) -> str:
        return (self.folder / f"{role}-{self.processes[role].index(process)}.log").read_text()

    def tails(self) -> str:
        return "\n".join(f"--- {f.name}\n{f.read_text()[-3000:]}" for f in sorted(self.folder.glob("*.log")))


@pytest.fixture
def platform(kubesim_cluster: KubeSim, tmp_path: Path, settings: Any) -> Iterator[Platform]:
    """Start processes with `platform.start(role)`, against the test database, Redis db and kubesim; every
    one is stopped at the end (SIGTERM, then SIGKILL), and what beat sent is deleted."""
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "DATABASE_URL": f"postgres://{db['USER'] or ''}@{db['HOST'] or ''}/{db['NAME']}",
        "REDIS_URL": django_settings.REDIS_URL,
        "KUBECONFIG": str(kubesim_cluster.kubeconfig_path),
        "SCHEDULE_INTERVAL_SECONDS": "1",
        "LEADER_ELECTION": "true",
    }
    telemetry._redis().delete(telemetry.PULSES_KEY)
    found = Platform(folder=tmp_path, env=env)
    try:
        yield found
    finally:
        everyone = [p for ps in found.processes.values() for p in ps]
        for process in everyone:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in everyone:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        redis.Redis.from_url(django_settings.REDIS_URL).delete(
            "celery", django_settings.TENSORBOARD_QUEUE, telemetry.PULSES_KEY
        )
        _end_other_database_sessions()


def _scheduler_pulse() -> float:
    return telemetry.last_pulses().get("scheduler", 0.0)


def _kill(process: subprocess.Popen[bytes]) -> float:
    killed = time.time()
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    return killed


def _new_leader(platform: Platform, role: str, old: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    found = platform.leader(role)
    return found if found is not None and found is not old else None  # type: ignore[return-value]


def test_killing_the_leading_beat_and_watcher_hands_over_with_nothing_lost(
    platform: Platform, kubesim_cluster: KubeSim
) -> None:
    for role in ("worker", "beat", "beat", "watcher", "watcher"):
        platform.start(role)
    try:
        beat = wait_until(lambda: platform.leader("beat"), 120, "a beat to lead")
        watcher = wait_until(lambda: platform.leader("watcher"), 120, "a watcher to lead")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{platform.tails()}") from None
    (standby_watcher,) = [p for p in platform.processes["watcher"] if p is not watcher]
    (standby_beat,) = [p for p in platform.processes["beat"] if p is not beat]
    # The standbys run, healthy (their heartbeat files fresh for the probes), and do not lead.
    for role, standby in (("watcher", standby_watcher), ("beat", standby_beat)):
        wait_until(platform.heartbeat(role, standby).exists, 60, f"the standby {role}'s heartbeat")
        assert standby.poll() is None and platform.leader(role) is not standby
    # /readyz names them.
    assert health._leaders() == {"watcher": platform.identity(watcher), "beat": platform.identity(beat)}
    wait_until(_scheduler_pulse, 60, "a scheduler cycle sent by the leading beat")

    # -- beat: kill the leader; the standby leads and the cycle runs on, beat after beat ------------------
    killed = _kill(beat)
    successor = wait_until(lambda: _new_leader(platform, "beat", beat), 60, "the standby beat to lead")
    beat_takeover = time.time() - killed
    assert successor is standby_beat
    led = time.time()
    cycles: set[float] = set()

    def three_cycles_under_the_new_beat() -> bool:
        when = _scheduler_pulse()
        if when > led:
            cycles.add(when)
        return len(cycles) >= 3

    wait_until(three_cycles_under_the_new_beat, 60, "scheduler cycles sent by the new beat")
    first_cycle = min(cycles) - killed

    # -- watcher: half a job's log under the leader, the other half while nobody leads ------------------
    tenant = make_tenant()
    with socket.create_server(("127.0.0.1", 0)) as gate:
        gate.settimeout(180)
        document = python_spec("halves", HALVES, env=gate_env(kubesim_cluster, gate.getsockname()[1]))
        job = job_submit(tenant=tenant, user=member(tenant), document=document)
        conn, _ = gate.accept()
        with conn:
            wait_until(lambda: _texts(job) == _lines(0, 20), 90, f"the first half stored: {describe(job)}")
            killed = _kill(watcher)
            conn.sendall(b"x")
            successor = wait_until(
                lambda: _new_leader(platform, "watcher", watcher), 60, "the standby watcher to lead"
            )
            watcher_takeover = time.time() - killed
            assert successor is standby_watcher
            wait_until(
                lambda: len(_texts(job)) > 20, 90, f"a line stored by the new watcher: {describe(job)}"
            )
            first_line = time.time() - killed
    wait_status(job, "succeeded", timeout=120, logs=True)
    rows = list(LogLine.objects.filter(job=job).order_by("seq").values_list("seq", "text"))
    assert [text for _, text in rows] == _lines(0, 40), describe(job, logs=True)
    assert [seq for seq, _ in rows] == list(range(rows[0][0], rows[0][0] + 40)), "no gap, no repeat"
    assert Job.objects.get(pk=job.pk).attempt == 1
    print(
        f"\nleader takeover after SIGKILL: beat {beat_takeover:.2f} s (first cycle {first_cycle:.2f} s), "
        f"watcher {watcher_takeover:.2f} s (first log line stored {first_line:.2f} s)"
    )


def _lines(start: int, end: int) -> list[str]:
    return [f"line {i}" for i in range(start, end)]


def _texts(job: Job) -> list[str]:
    return list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


def test_a_leader_whose_lock_session_ends_exits_at_once_and_the_standby_leads(platform: Platform) -> None:
    """The database ends the leading watcher's lock session (a restart, a network cut, an operator's
    pg_terminate_backend): the leader can no longer prove it leads, so it exits (status 1, for Kubernetes to
    start it again as a standby) instead of watching on beside the standby that now leads."""
    first, second = platform.start("watcher"), platform.start("watcher")
    leader = wait_until(lambda: platform.leader("watcher"), 120, "a watcher to lead")
    standby = second if leader is first else first
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [f"trainyard-watcher {platform.identity(leader)}"],
        )
        assert cursor.fetchall() == [(True,)]
    assert leader.wait(timeout=60) == 1
    assert "leadership lost (the lock's connection failed" in platform.log("watcher", leader)
    wait_until(lambda: platform.leader("watcher") is standby, 60, "the standby to lead")

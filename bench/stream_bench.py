"""Streaming benchmark: how fast and how completely a pod's log lines and state changes reach WebSocket
viewers, through the whole path a browser sees.

Run: ``.venv/bin/python bench/stream_bench.py`` (about 3 minutes on 2 cores; one JSON line per
figure). Needs the local PostgreSQL and Redis the tests use; it never touches the developer's data:

* database ``trainyard_stream_bench`` (or ``STREAM_BENCH_DATABASE``; created if missing, migrated, flushed at
  start; the other connection settings come from ``DATABASE_URL`` as usual), settings ``portal.settings.test``
  (but daphne's live-socket reads keep their connections, as in production: ``LIVE_DB_CONN_MAX_AGE`` 60);
* Redis db 11 (or ``STREAM_BENCH_REDIS_URL``) for the Celery broker and the Channels layer, with a Celery
  queue of its own; the keys it leaves there are deleted at the end;
* kubesim in-process on a free port, its state in a temporary folder (removed at the end).

The path measured: the pod's process prints a line carrying ``time.time()`` → kubesim's kubelet and log
API → the watcher's log follower (``jobs.watcher``, in this process, with a real Celery worker and the
watch loop, as ``bench/engine_bench.py`` runs them) stores it in PostgreSQL and publishes it to the
Channels layer in Redis → ``jobs.consumers.LiveConsumer`` in a real daphne process (``portal.asgi``, a
subprocess) → a WebSocket client (``websocket-client``, already a dependency of the Kubernetes client), in a
process of its own (``bench/stream_clients.py``), so that the clients' parsing does not share a GIL with the
follower. All on one host, so the stamps and the receive times read one clock.

Figures:

1. ``log_line_latency_ms``: one viewer subscribed to one job printing 50 stamped lines/s for 6 s; receive
   time minus the stamp, per line.
2. ``state_change_latency_ms``: one viewer subscribed to the tenant (as the jobs list is); 10 jobs run one
   after another (``print; sleep 0.5``); from kubesim's store write of the pod's phase (Running /
   Succeeded, stamped by an in-process store listener at the write) to the receipt of the job's
   ``running`` / ``succeeded`` status frame. ``succeeded`` includes draining the log (a job ends with its
   whole log stored).
3. ``fan_out``: N viewers (``--viewers``, 50) subscribed to one job (before it prints) that prints R
   stamped lines/s (``--rate``, 1,000) for S s (``--seconds``, 10). Per viewer: lines missing (of the
   job's stored lines), duplicates, ``gap`` frames; and the line latency over all viewers (p50/p99/max)
   and the worst viewer's p99; the CPU seconds daphne, this process and the clients used meanwhile. The
   baseline, in the same run: the same job with one viewer (``"baseline": true``).
4. ``connect_storm``: 50 viewers (``--storm``) connect at the same moment and subscribe to a job with a
   stored log (the fan-out job's); from their release to each one's first frame (``subscribed``) and first
   ``logs`` frame, p50/p99/max in ms.

``--only fan_out,connect_storm`` (any of ``latency``, ``state``, ``fan_out``, ``connect_storm``) runs a part.

Everything started is stopped in ``finally`` (daphne, the client process, the worker, the watcher,
kubesim and its pod processes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_DB = os.environ.get("STREAM_BENCH_DATABASE", "trainyard_stream_bench")
BENCH_REDIS = os.environ.get("STREAM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")
BENCH_QUEUE = f"stream-bench-{os.getpid()}"
LAYER_PREFIX = "ty-test"  # portal.settings.test's Channels prefix
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"
for _name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
    os.environ[_name] = BENCH_REDIS

from bench.stream_clients import TERMINAL, clients, storm  # noqa: E402

LATENCY_RATE, LATENCY_SECONDS = 50, 6
STATE_JOBS = 10
FAN_VIEWERS, FAN_RATE, FAN_SECONDS = 50, 1000, 10
# A pod's script: wait (at most a minute) for the bench to create `go` once every viewer is subscribed
# (kubesim runs pods as local processes, so the pod sees the bench's temporary folder), then print `rate`
# lines/s for `seconds` s, each "L <i> <time.time()>", written in ticks of 10 ms.
PRINTER = """
import os, sys, time
go, rate, seconds = {go!r}, {rate}, {seconds}
waited = time.time()
while not os.path.exists(go) and time.time() - waited < 60:
    time.sleep(0.01)
per_tick = max(1, rate // 100)
start = time.time()
i = 0
for tick in range(seconds * rate // per_tick):
    out = []
    for _ in range(per_tick):
        i += 1
        out.append(f"L {{i}} {{time.time():.6f}}\\n")
    sys.stdout.write("".join(out))
    sys.stdout.flush()
    delay = start + (tick + 1) * per_tick / rate - time.time()
    if delay > 0:
        time.sleep(delay)
print("end", flush=True)
"""


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered)) - 1))]


def quantiles(values: list[float]) -> dict[str, object]:
    """p50 / p99 / max in ms, rounded, and the sample size."""
    if not values:
        return {"n": 0}
    return {
        "p50": round(statistics.median(values), 1),
        "p99": round(p99(values), 1),
        "max": round(max(values), 1),
        "n": len(values),
    }


# ---------------------------------------------------------------------------------------------- database


def prepare_database() -> None:
    """Create ``trainyard_stream_bench`` if missing, then set Django up, migrate and flush it."""
    import django
    import psycopg
    from django.conf import settings
    from psycopg import sql

    settings.DATABASES["default"]["NAME"] = BENCH_DB
    db = settings.DATABASES["default"]
    params = {
        key: value
        for key, value in {
            "host": db.get("HOST"),
            "port": db.get("PORT"),
            "user": db.get("USER"),
            "password": db.get("PASSWORD"),
        }.items()
        if value
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(BENCH_DB)))
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    call_command("flush", verbosity=0, interactive=False)


def database_url() -> str:
    """``DATABASE_URL`` (or the settings' default) with the bench database's name, for daphne."""
    parts = urllib.parse.urlsplit(os.environ.get("DATABASE_URL", "postgres:///trainyard"))
    return urllib.parse.urlunsplit(parts._replace(path=f"/{BENCH_DB}"))


def close_other_connections() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


# ------------------------------------------------------------------------------------------------ engine


class PodClock:
    """A kubesim store listener: when each managed pod's phase first became Running / Succeeded, stamped
    with ``time.time()`` at the store write itself (before any watch could see it)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], float] = {}

    def __call__(self, event: Any) -> None:
        now = time.time()
        if event.plural != "pods":
            return
        phase = (event.obj.get("status") or {}).get("phase")
        before = ((event.old or {}).get("status") or {}).get("phase")
        if phase == before or phase not in ("Running", "Succeeded"):
            return
        from jobs.cluster import pod_owner

        owner = pod_owner(event.obj)
        if owner is not None:
            self.seen.setdefault((owner[0], phase), now)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_stack(clock: PodClock) -> Iterator[tuple[str, int]]:
    """kubesim, a Celery worker, the watch loop, a beat stand-in (in this process) and daphne (a
    subprocess serving ``portal.asgi``); yields daphne's URL and pid. All stopped on exit."""
    import redis
    from celery.contrib.testing.worker import start_worker
    from django.conf import settings

    from jobs import cluster
    from jobs.watcher import Watcher
    from kubesim.testing import running_kubesim
    from portal.celery import app

    app.conf.task_default_queue = BENCH_QUEUE
    state = Path(tempfile.mkdtemp(prefix="stream-bench-"))
    port = _free_port()
    # The live sockets' read threads keep their connections, as in production (the test settings' default
    # closes them after every read; common/livereads.py).
    env = os.environ | {
        "DATABASE_URL": database_url(),
        "LOG_LEVEL": "WARNING",
        "LIVE_DB_CONN_MAX_AGE": os.environ.get("LIVE_DB_CONN_MAX_AGE", "60"),
    }
    daphne = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=(state / "daphne.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/healthz", daphne), 30, "daphne to answer")
        with running_kubesim(state / "kubesim") as sim:
            sim.cluster.store.listeners.append(clock)
            settings.KUBECONFIG = str(sim.kubeconfig_path)
            app.control.purge()
            watcher = Watcher(cluster.cluster())
            watch_thread = threading.Thread(target=watcher.run, name="watcher", daemon=True)
            stop_beat = threading.Event()

            def beat() -> None:
                while not stop_beat.wait(settings.SCHEDULE_INTERVAL_SECONDS):
                    app.send_task("jobs.tasks.schedule")

            beat_thread = threading.Thread(target=beat, name="beat", daemon=True)
            with start_worker(
                app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=10
            ):
                watch_thread.start()
                beat_thread.start()
                try:
                    yield url, daphne.pid
                finally:
                    stop_beat.set()
                    watcher.stop()
                    beat_thread.join(timeout=5)
                    watch_thread.join(timeout=15)
                    app.control.purge()
    finally:
        daphne.send_signal(signal.SIGTERM)
        try:
            daphne.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daphne.kill()
            daphne.wait()
        shutil.rmtree(state, ignore_errors=True)
        close_other_connections()
        store = redis.Redis.from_url(BENCH_REDIS)
        keys = [BENCH_QUEUE, f"_kombu.binding.{BENCH_QUEUE}", f"_kombu.binding_permanent.{BENCH_QUEUE}"]
        keys += list(store.scan_iter(f"{LAYER_PREFIX}*"))
        store.delete(*keys)


def _answers(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"daphne exited with {process.returncode}")
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (a local URL)
            return bool(response.status == 200)
    except OSError:
        return False


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


# ----------------------------------------------------------------------------------------------- figures


class Bench:
    def __init__(self, url: str, daphne_pid: int, clock: PodClock) -> None:
        from django.contrib.auth import get_user_model
        from django.test import Client

        from tenants.models import Quota, Tenant
        from tenants.services import membership_set

        self.url = url
        self.daphne_pid = daphne_pid
        self.clients_cpu_s = 0.0
        self.clock = clock
        self.tenant = Tenant.objects.create(slug="stream", name="Stream bench")
        Quota.objects.create(
            tenant=self.tenant,
            gpus=0,
            cpu_millis=8000,
            memory_mib=16384,
            max_running_jobs=4,
            max_queued_jobs=100,
        )
        self.user = get_user_model().objects.create_user(username="streamer", password=None)
        membership_set(tenant=self.tenant, user=self.user, role="member")
        client = Client()
        client.force_login(self.user)
        self.session = client.cookies["sessionid"].value
        self.subscribed_s = 0.0

    def submit(self, name: str, script: str, cpu: str = "500m") -> Any:
        from jobs.services import job_submit

        document = {
            "name": name,
            "image": "python:3.11",
            "command": ["python", "-u", "-c", script],
            "resources": {"cpu": cpu, "memory": "128Mi"},
        }
        return job_submit(tenant=self.tenant, user=self.user, document=document)

    def finish(self, job: Any, timeout: float = 90) -> str:
        from jobs.models import Job

        def ended() -> str | None:
            status = Job.objects.filter(pk=job.pk).values_list("status", flat=True).first()
            return status if status in TERMINAL else None

        return str(wait_for(ended, timeout, f"job {job.pk} to finish"))

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by daphne and by this process (worker, watcher, followers, kubesim)."""
        fields = Path(f"/proc/{self.daphne_pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return {"daphne": (int(fields[11]) + int(fields[12])) / ticks, "engine": time.process_time()}

    def printer_job(
        self, name: str, rate: int, seconds: int, viewers: int
    ) -> tuple[Any, list[dict[str, Any]]]:
        """Submit a printing job, subscribe `viewers` to it while it waits, and collect what they got."""
        go = Path(tempfile.mkdtemp(prefix="stream-bench-go-")) / "go"
        job = self.submit(name, PRINTER.format(go=str(go), rate=rate, seconds=seconds), cpu="1")
        subscribe = [{"action": "subscribe", "job": job.pk}]
        started = time.perf_counter()
        try:
            with clients(self.url, self.session, viewers, subscribe, until_terminal=True) as outcome:
                self.subscribed_s = round(time.perf_counter() - started, 2)
                go.touch()
                status = self.finish(job, timeout=90 + 3 * seconds)  # it prints for `seconds` after `go`
        finally:
            shutil.rmtree(go.parent, ignore_errors=True)
        if status != "succeeded":
            raise RuntimeError(f"job {job.pk} ended {status}")
        self.clients_cpu_s = outcome["cpu_s"]
        return job, outcome["viewers"]

    def log_line_latency(self) -> dict[str, object]:
        _, results = self.printer_job("latency", LATENCY_RATE, LATENCY_SECONDS, 1)
        return {
            "bench": "stream",
            "metric": "log_line_latency_ms",
            "job": f"{LATENCY_RATE} stamped lines/s for {LATENCY_SECONDS} s, one viewer",
            "path": "pod stdout -> kubesim log -> follower -> PostgreSQL + Redis layer -> daphne -> WebSocket",
            **quantiles(results[0]["lat"]),
        }

    def state_change_latency(self) -> list[dict[str, object]]:
        subscribe = [{"action": "subscribe_tenant", "tenant": self.tenant.slug}]
        jobs = []
        with clients(self.url, self.session, 1, subscribe) as outcome:
            for i in range(STATE_JOBS):
                job = self.submit(f"state-{i}", "import time; print('up', flush=True); time.sleep(0.5)")
                self.finish(job)
                jobs.append(job.pk)
            time.sleep(1)
        frames = {(job, status): at for job, status, at in outcome["viewers"][0]["statuses"]}
        records: list[dict[str, object]] = []
        for status, phase in (("running", "Running"), ("succeeded", "Succeeded")):
            lags = [
                (frames[(job, status)] - self.clock.seen[(job, phase)]) * 1000
                for job in jobs
                if (job, status) in frames and (job, phase) in self.clock.seen
            ]
            records.append(
                {
                    "bench": "stream",
                    "metric": "state_change_latency_ms",
                    "transition": status,
                    "from": f"kubesim store write of pod phase {phase}",
                    "to": f"'{status}' status frame received (tenant subscription)",
                    "jobs": len(jobs),
                    "missing_frames": len(jobs) - len(lags),
                    **quantiles(lags),
                }
            )
        return records

    def fan_out(
        self, viewers: int = FAN_VIEWERS, rate: int = FAN_RATE, seconds: int = FAN_SECONDS
    ) -> dict[str, object]:
        from jobs.models import LogLine

        before = self.cpu()
        job, results = self.printer_job("fan-out", rate, seconds, viewers)
        self.last_job = job
        after = self.cpu()
        stored = set(LogLine.objects.filter(job=job).values_list("seq", flat=True))
        stamps = [
            float(text.split()[2])
            for text in LogLine.objects.filter(job=job, text__startswith="L ").values_list("text", flat=True)
        ]
        missing = [len(stored - set(r["seqs"])) for r in results]
        duplicates = [sum(n - 1 for n in r["seqs"].values()) for r in results]
        everything = [value for r in results for value in r["lat"]]
        per_viewer_p99 = [p99(r["lat"]) for r in results if r["lat"]]
        return {
            "bench": "stream",
            "metric": "fan_out",
            "viewers": len(results),
            "baseline": len(results) == 1,
            "job": f"{rate} stamped lines/s for {seconds} s",
            "lines_stored": len(stored),
            "print_rate_achieved": round(len(stamps) / (max(stamps) - min(stamps)), 1) if stamps else 0,
            "viewers_with_every_line": sum(1 for m in missing if m == 0),
            "viewer_errors": sorted({r["error"] for r in results if "error" in r}),
            "missing_lines_total": sum(missing),
            "missing_lines_max_per_viewer": max(missing),
            "duplicate_lines_total": sum(duplicates),
            "gap_frames_total": sum(r["gaps"] for r in results),
            "gap_lines_total": sum(r["gap_lines"] for r in results),
            "frames_per_viewer_mean": round(statistics.mean(r["frames"] for r in results), 1),
            "seconds_to_connect_and_subscribe_all": self.subscribed_s,
            "latency_ms": quantiles(everything),
            "worst_viewer_p99_ms": round(max(per_viewer_p99), 1) if per_viewer_p99 else None,
            "cpu_s": {
                **{name: round(after[name] - before[name], 1) for name in after},
                "clients": round(self.clients_cpu_s, 1),
                "host_cores": os.cpu_count(),
            },
        }

    def connect_storm(self, viewers: int) -> dict[str, object]:
        """`viewers` sockets connecting at once to the last fan-out job (its log stored): first frames."""
        from jobs.models import LogLine

        job = getattr(self, "last_job", None)
        if job is None:
            job = self.submit("storm", "print('\\n'.join(f'L {i} 0' for i in range(5000)))")
            self.finish(job)
        results = storm(self.url, self.session, viewers, [{"action": "subscribe", "job": job.pk}])
        return {
            "bench": "stream",
            "metric": "connect_storm",
            "viewers": viewers,
            "job_lines_stored": LogLine.objects.filter(job=job).count(),
            "viewer_errors": sorted({r["error"] for r in results if "error" in r}),
            "handshake_done_ms": quantiles([r["connected_ms"] for r in results if "connected_ms" in r]),
            "first_frame_ms": quantiles([r["first_frame_ms"] for r in results if "first_frame_ms" in r]),
            "first_lines_ms": quantiles([r["first_lines_ms"] for r in results if "first_lines_ms" in r]),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--viewers", type=int, default=FAN_VIEWERS)
    parser.add_argument("--rate", type=int, default=FAN_RATE)
    parser.add_argument("--seconds", type=int, default=FAN_SECONDS)
    parser.add_argument("--storm", type=int, default=50, help="viewers connecting at once")
    parser.add_argument("--only", default="latency,state,fan_out,connect_storm")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    started = time.perf_counter()
    prepare_database()
    clock = PodClock()
    with running_stack(clock) as (url, pid):
        bench = Bench(url, pid, clock)
        if "latency" in parts:
            emit(bench.log_line_latency())
        if "state" in parts:
            for record in bench.state_change_latency():
                emit(record)
        if "fan_out" in parts:
            emit(bench.fan_out(1, args.rate, args.seconds))  # the baseline: one viewer, same job
            emit(bench.fan_out(args.viewers, args.rate, args.seconds))
        if "connect_storm" in parts:
            emit(bench.connect_storm(args.storm))
    emit({"bench": "stream_bench", "wall_s": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()

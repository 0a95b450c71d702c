"""Engine benchmark: the whole job engine in one process, measured end to end, plus the scheduler cycle
on a deep queue in PostgreSQL and the simulator's trainyard-vs-FIFO ratios.

Run: ``.venv/bin/python bench/engine_bench.py [--jobs N] [--runs N] [--only engine|cycle|trace]`` (about 3
minutes on 2 cores; prints one JSON line per figure). Needs the local PostgreSQL and Redis the tests use;
it never touches the developer's data:

* database ``trainyard_bench`` (created if missing, migrated, flushed at start; the other connection
  settings come from ``DATABASE_URL`` as usual), settings ``portal.settings.test``;
* Redis db 14 (or ``ENGINE_BENCH_REDIS_URL``) for the Celery broker, results and the Channels layer,
  with a Celery queue of its own (``engine-bench-<pid>``), so a test run on the same db is left alone;
* kubesim in-process on a free port with its state in a temporary folder (removed at the end).

What runs is what ``tests/conftest.py``'s ``engine`` fixture runs: kubesim (API server, scheduler,
kubelet running pod commands as local processes), a real Celery worker (threads) on the Redis broker,
the ``jobs.watcher.Watcher`` watch loop in a thread, and a beat stand-in that sends the scheduler task
every ``SCHEDULE_INTERVAL_SECONDS`` as ``celery beat`` does in a deployment. All of it is stopped in
``finally`` (kubesim kills every pod process it started).

Figures:

1. ``submit_to_running_ms`` / ``submit_to_succeeded_ms``: p50/p99/max over N small jobs (``python -c
   "... print('up'); time.sleep(1)"``, 100m CPU, 64Mi) submitted one at a time through
   ``jobs.services.job_submit``, from its return to the ``created_at`` of the JobEvent recording the
   transition (one unmeasured warm-up job first: it creates the tenant's namespace objects).
2. ``pod_event_to_job_state_ms``: from the moment kubesim stores the pod's phase change (Running,
   Succeeded) to the JobEvent of the matching job transition. kubesim writes ``startedAt`` /
   ``finishedAt`` at whole seconds only, so the pod side is taken from an in-process listener on
   kubesim's object store (``Store.listeners``), stamped with ``time.time()`` at the write itself; the
   line reports the timestamps' precision it saw. ``vs_ffdl_60s_poll`` compares with FfDL's status poll
   once a minute, modelled as a lag uniform on [0, 60 s] (p50 30 s, p99 59.4 s): a model, not a run.
   ``succeeded`` includes draining the learner's log (a job finishes only with its full log stored).
3. ``admission_cycle_db``: the whole scheduler cycle, ``jobs.scheduling.run_cycle``, on ``--jobs`` (10,000)
   queued Job rows across 20 tenants, 500 running jobs and 500 fake ``clusterio.capacity.NodeInfo`` nodes.
   ``cycle_ms`` is the median of ``--runs`` (3) warm cycles (few rows change; the target is 200 ms), split
   into ``snapshot_ms`` (``build_snapshot``: the queries and conversion), ``admit_ms`` (the pure policy),
   ``eta_ms`` (``jobs.estimates.estimate``), ``write_ms`` (``queue_positions_record``) and, in ``cold`` and
   each of ``warm``, ``apply_ms`` (``job_admit`` per admitted job) and ``other_ms`` (lock, commit and
   on-commit pushes); ``python_cpu_ms`` is this process's CPU time in the cycle (PostgreSQL's is not in
   it), ``cycle_ms_min`` the fastest warm cycle and ``load_1min`` the machine's load average at the end
   (other work on a shared machine stretches every figure). ``cold`` is the first cycle (every row
   written, some hundred jobs admitted), ``second`` the next one (most ETAs move: the admitted jobs now
   run from their admission). Launch tasks are not sent (no worker runs here). ``baseline`` is the old
   snapshot and write
   (``bench/cycle_baseline.py``) on the same data in the same run: its snapshot in full, its write of every
   row timed on a 1,000-row subset and scaled linearly (``bulk_update`` of 10,000 rows ran for 26 minutes
   in PostgreSQL, so it is never run; linear scaling flatters it), its warm write in full when at most
   1,000 rows change; ``speedup_cold`` / ``speedup_warm`` are old over new.
4. ``trace_replay`` / ``trace_ratio``: the simulator on the default trace, by
   ``bench/admission_bench.py``'s own ``replay`` (skipped when ``../shared/data/traces`` is absent).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.benchdb import prepare_database  # noqa: E402

BENCH_DB = "trainyard_bench"
BENCH_REDIS = os.environ.get("ENGINE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
# A queue (and exchange) of its own: a test run or another bench sharing the Redis db neither takes this
# run's tasks nor loses its own to it (nor to the purge at start).
BENCH_QUEUE = f"engine-bench-{os.getpid()}"
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"
for _name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
    os.environ[_name] = BENCH_REDIS

from django.conf import settings  # noqa: E402

settings.DATABASES["default"]["NAME"] = BENCH_DB

JOBS = 20
FFDL_POLL_P50_MS = 30_000.0  # a 60 s poll: the lag is uniform on [0, 60 s]
FFDL_POLL_P99_MS = 59_400.0
SCRIPT = "import time; print('up', flush=True); time.sleep(1)"


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def p99(values: list[float]) -> float:
    """The 99th percentile by nearest rank (the largest value below 100 samples)."""
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


def close_other_connections() -> None:
    """End the sessions the worker and watcher threads left open on the bench database."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


# ------------------------------------------------------------------------------------------------ engine


class PodClock:
    """A kubesim store listener: when each managed pod's phase first became Running / Succeeded.

    Called under the store's lock at the write, so ``time.time()`` here is when the change happened at
    the API server (before any watch could see it)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int, str], float] = {}
        self.stamps: list[str] = []

    def __call__(self, event: Any) -> None:
        now = time.time()
        if event.plural != "pods":
            return
        status = event.obj.get("status") or {}
        phase = status.get("phase")
        before = ((event.old or {}).get("status") or {}).get("phase")
        if phase == before or phase not in ("Running", "Succeeded"):
            return
        from jobs.cluster import pod_owner

        owner = pod_owner(event.obj)
        if owner is None:
            return
        self.seen.setdefault((owner[0], owner[1], phase), now)
        for container in status.get("containerStatuses") or []:
            state = container.get("state") or {}
            stamp = (state.get("running") or {}).get("startedAt") or (state.get("terminated") or {}).get(
                "finishedAt"
            )
            if stamp:
                self.stamps.append(stamp)


@contextmanager
def running_engine(clock: PodClock) -> Iterator[None]:
    """kubesim, a Celery worker (threads, Redis db 14), the watch loop and a beat stand-in; all stopped
    on exit, pod processes included."""
    import redis
    from celery.contrib.testing.worker import start_worker

    from jobs import cluster
    from jobs.watcher import Watcher
    from kubesim.testing import running_kubesim
    from portal.celery import app

    app.conf.task_default_queue = BENCH_QUEUE
    state = Path(tempfile.mkdtemp(prefix="engine-bench-"))
    try:
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
                    yield
                finally:
                    stop_beat.set()
                    watcher.stop()
                    beat_thread.join(timeout=5)
                    watch_thread.join(timeout=15)
                    app.control.purge()
    finally:
        shutil.rmtree(state, ignore_errors=True)
        close_other_connections()
        redis.Redis.from_url(BENCH_REDIS).delete(
            BENCH_QUEUE, f"_kombu.binding.{BENCH_QUEUE}", f"_kombu.binding_permanent.{BENCH_QUEUE}"
        )


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise RuntimeError(f"timed out waiting for {what}")


def engine_latencies(clock: PodClock, jobs: int = JOBS) -> list[dict[str, object]]:
    """Submit `jobs` small jobs one at a time (after one warm-up) and time each one's way to the end."""
    from jobs.core.states import TERMINAL
    from jobs.models import Job, JobEvent
    from jobs.services import job_submit
    from tenants.models import Quota, Tenant
    from tenants.services import membership_set

    tenant = Tenant.objects.create(slug="bench", name="Bench")
    Quota.objects.create(
        tenant=tenant, gpus=0, cpu_millis=8000, memory_mib=16384, max_running_jobs=4, max_queued_jobs=100
    )
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username="bench", password=None)
    membership_set(tenant=tenant, user=user, role="member")

    to_running: list[float] = []
    to_succeeded: list[float] = []
    pod_running: list[float] = []
    pod_succeeded: list[float] = []
    failed: list[str] = []
    for i in range(jobs + 1):
        document = {
            "name": f"bench-{i}",
            "image": "python:3.11",
            "command": ["python", "-c", SCRIPT],
            "resources": {"cpu": "100m", "memory": "64Mi"},
        }
        job = job_submit(tenant=tenant, user=user, document=document)
        submitted = time.time()

        def finished(job_id: str = job.pk) -> str | None:
            status = Job.objects.filter(pk=job_id).values_list("status", flat=True).first()
            return status if status in TERMINAL else None

        status = wait_for(finished, 60, f"job {job.pk} to finish")
        job.refresh_from_db()
        events = {
            e.to_status: e.created_at.timestamp()
            for e in JobEvent.objects.filter(job=job, kind="transition").order_by("created_at")
        }
        if status != "succeeded" or "running" not in events:
            failed.append(f"{job.pk}: {status} {job.reason} {job.message}")
            continue
        if i == 0:
            continue  # warm-up: creates the tenant's namespace, quota and policy objects
        to_running.append((events["running"] - submitted) * 1000)
        to_succeeded.append((events["succeeded"] - submitted) * 1000)
        pod_up = clock.seen.get((job.pk, job.attempt, "Running"))
        pod_done = clock.seen.get((job.pk, job.attempt, "Succeeded"))
        if pod_up is not None:
            pod_running.append((events["running"] - pod_up) * 1000)
        if pod_done is not None:
            pod_succeeded.append((events["succeeded"] - pod_done) * 1000)

    precision = "sub-second" if any("." in s for s in clock.stamps) else "1 s"
    base = {"bench": "engine", "job": "python sleep 1 s, 100m CPU, 64Mi", "failed": failed}
    records: list[dict[str, object]] = [
        {**base, "metric": "submit_to_running_ms", **quantiles(to_running)},
        {**base, "metric": "submit_to_succeeded_ms", **quantiles(to_succeeded)},
    ]
    for transition, lags in (("running", pod_running), ("succeeded", pod_succeeded)):
        ratio: dict[str, object] = {}
        if lags:
            ratio = {
                "p50": round(statistics.median(lags) / FFDL_POLL_P50_MS, 5),
                "p99": round(p99(lags) / FFDL_POLL_P99_MS, 5),
            }
        records.append(
            {
                "bench": "engine",
                "metric": "pod_event_to_job_state_ms",
                "transition": transition,
                **quantiles(lags),
                "pod_clock": "kubesim store write (listener)",
                "kubesim_timestamp_precision": precision,
                "vs_ffdl_60s_poll": ratio,
                "ffdl_model": "lag uniform on [0, 60 s]: p50 30000 ms, p99 59400 ms",
            }
        )
    return records


# ------------------------------------------------------------------------------------- admission cycle

NODE_KINDS = [("a100", 8, 128_000, 1_048_576), ("v100", 8, 96_000, 786_432), ("t4", 4, 64_000, 262_144)]


def fill_queue(jobs: int = 10_000, nodes: int = 500, tenants: int = 20, seed: int = 7) -> list[Any]:
    """`jobs` queued Job rows over `tenants` tenants, one running job per node (about half the cluster in
    use); returns the matching NodeInfos, as `bench/admission_bench.py`'s synthetic snapshot does."""
    from django.contrib.auth import get_user_model

    from clusterio.capacity import NodeInfo, Resources
    from jobs.models import Job
    from tenants.models import Quota, Tenant

    rng = random.Random(seed)
    now = datetime.now(UTC)
    owner = get_user_model().objects.create_user(username="bench-queue", password=None)
    tenant_rows = Tenant.objects.bulk_create(
        Tenant(slug=f"team-{t:02d}", name=f"Team {t:02d}", weight=rng.choice([1.0, 1.0, 2.0, 0.5]))
        for t in range(tenants)
    )
    Quota.objects.bulk_create(
        Quota(
            tenant=t,
            gpus=rng.choice([64, 128, 512]),
            cpu_millis=4_000_000,
            memory_mib=40_000_000,
            max_running_jobs=rng.choice([20, 50, 1000]),
            max_queued_jobs=100_000,
        )
        for t in tenant_rows
    )
    infos: list[Any] = []
    rows: list[Job] = []
    for k in range(nodes):
        gpu_type, gpus, cpu, mem = NODE_KINDS[k % 3] if k % 10 else (None, 0, 64_000, 262_144)
        used_gpus = rng.randint(0, gpus)
        used = Resources(used_gpus, min(cpu, used_gpus * 8000 + 2000), min(mem, used_gpus * 65_536 + 4096))
        name = f"node-{k:04d}"
        allocatable = Resources(gpus, cpu, mem)
        infos.append(NodeInfo(name, True, gpu_type, allocatable, allocatable - used))
        started = now - timedelta(seconds=rng.uniform(0, 3600))
        rows.append(
            Job(
                tenant=rng.choice(tenant_rows),
                owner=owner,
                name=f"run-{k}",
                spec={
                    "resources": {"gpu_type": gpu_type},
                    "max_runtime_seconds": rng.choice([None, rng.randint(600, 36_000)]),
                },
                status="running",
                gpus=used.gpus,
                cpu_millis=used.cpu_millis,
                memory_mib=used.memory_mib,
                placements=[name],
                admitted_at=started,
                started_at=started,
                created_at=started,
                attempt=1,
            )
        )
    for k in range(jobs):
        rows.append(
            Job(
                tenant=rng.choice(tenant_rows),
                owner=owner,
                name=f"queued-{k}",
                spec={
                    "resources": {"gpu_type": rng.choice([None, None, None, "a100", "v100", "t4"])},
                    "max_runtime_seconds": rng.choice([None, rng.randint(60, 7200)]),
                },
                priority=rng.choice([0, 0, 0, 1, 2]),
                learners=rng.choice([1, 1, 1, 2, 4, 8]),
                gpus=rng.choice([0, 1, 1, 2, 4, 8]),
                cpu_millis=rng.choice([1000, 4000, 8000]),
                memory_mib=rng.choice([4096, 16_384, 65_536]),
                created_at=now - timedelta(seconds=rng.uniform(0, 86_400)),
            )
        )
    Job.objects.bulk_create(rows, batch_size=2000)
    return infos


class Phases:
    """Wall time of each step of ``jobs.scheduling.run_cycle``, by wrapping the functions it calls."""

    STEPS = ("snapshot", "admit", "eta", "apply", "write", "preempt")

    def __init__(self) -> None:
        self.ms: dict[str, float] = dict.fromkeys(self.STEPS, 0.0)
        self.written = 0
        self.recorded: tuple[Any, ...] = ()

    def wrap(self, step: str, work: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return work(*args, **kwargs)
            finally:
                self.ms[step] += (time.perf_counter() - start) * 1000

        return timed

    @contextmanager
    def patched(self) -> Iterator[None]:
        """The cycle's steps timed; the launch tasks admission queues are not sent (no worker here)."""
        from unittest import mock

        from jobs import estimates, preemption, scheduling
        from jobs.core import admission

        def record(*args: Any, **kwargs: Any) -> int:
            self.recorded = args
            self.written = scheduling_record(*args, **kwargs)
            return self.written

        scheduling_record = self.wrap("write", scheduling.queue_positions_record)
        with (
            mock.patch.object(scheduling, "build_snapshot", self.wrap("snapshot", scheduling.build_snapshot)),
            mock.patch.object(admission, "admit", self.wrap("admit", admission.admit)),
            mock.patch.object(estimates, "estimate", self.wrap("eta", estimates.estimate)),
            mock.patch.object(scheduling, "_admit", self.wrap("apply", scheduling._admit)),
            mock.patch.object(scheduling, "queue_positions_record", record),
            mock.patch.object(preemption, "preempt", self.wrap("preempt", preemption.preempt)),
            mock.patch("jobs.services.lifecycle.enqueue"),
        ):
            yield


def timed_cycle(nodes: list[Any]) -> tuple[dict[str, float], Phases]:
    """One ``run_cycle`` over ``nodes``: its wall time, each step's, and how many rows it wrote."""
    from jobs.scheduling import run_cycle

    phases = Phases()
    with phases.patched():
        start, cpu = time.perf_counter(), time.process_time()
        result = run_cycle(nodes=nodes)
        cycle_ms = (time.perf_counter() - start) * 1000
        cpu_ms = (time.process_time() - cpu) * 1000
    figures: dict[str, float] = {
        "cycle_ms": round(cycle_ms, 1),
        "python_cpu_ms": round(cpu_ms, 1),
        **{f"{step}_ms": round(ms, 1) for step, ms in phases.ms.items()},
        "other_ms": round(cycle_ms - sum(phases.ms.values()), 1),
        "admitted": len(result.admitted),
        "rows_written": phases.written,
    }
    return figures, phases


def _ms(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return (time.perf_counter() - start) * 1000


def baseline_write(recorded: tuple[Any, ...], subset: int) -> dict[str, float]:
    """The old write (instances, ``bulk_update``) against the new one on the same ``subset`` pending jobs,
    each made stale first so that every row changes, each in a transaction rolled back. Never more rows:
    ``bulk_update`` over 10,000 ran for 26 minutes in PostgreSQL."""
    from django.db import transaction

    from bench import cycle_baseline
    from jobs.models import Job
    from jobs.services.lifecycle import queue_positions_record

    pending, etas = recorded
    chosen = list(pending)[:subset]
    ids = [p.job_id for p in chosen]
    times: dict[str, float] = {}
    for name, record in (("old", cycle_baseline.queue_positions_record), ("new", queue_positions_record)):
        with transaction.atomic():
            Job.objects.filter(pk__in=ids).update(queue_position=None, message="", eta=None, eta_reason="")
            times[name] = _ms(functools.partial(record, chosen, etas))
            transaction.set_rollback(True)
    return {"rows": len(chosen), "old_ms": round(times["old"], 1), "new_ms": round(times["new"], 1)}


def admission_cycle(jobs: int = 10_000, runs: int = 3) -> dict[str, object]:
    """The whole scheduler cycle on ``jobs`` queued rows: cold (every row written), then warm, with each
    step's time and the same steps done the old way (``bench/cycle_baseline.py``) in the same run."""
    from django.db import transaction

    from bench import cycle_baseline
    from jobs.scheduling import build_snapshot

    nodes = fill_queue(jobs=jobs)
    cold, _ = timed_cycle(nodes)
    # The second cycle rewrites most ETAs: the jobs the first admitted now run from their admission time.
    settle, _ = timed_cycle(nodes)
    warm = [timed_cycle(nodes) for _ in range(runs)]
    recorded = warm[-1][1].recorded
    median = {key: round(statistics.median(w[0][key] for w in warm), 1) for key in warm[0][0]}

    # The old way, same data, same run: its snapshot in full (it only reads), its write of all rows scaled
    # from a 1,000-row subset (linearly, which flatters it: bulk_update's CASE grows worse than linearly),
    # and its warm write in full only when few rows change (it locks and loads every pending job).
    old_snapshot = statistics.median(
        _ms(lambda: cycle_baseline.build_snapshot(nodes=nodes, now=time.time())) for _ in range(runs)
    )
    subset = baseline_write(recorded, min(1000, jobs))
    scale = len(recorded[0]) / max(1, subset["rows"])
    old_write_cold = subset["old_ms"] * scale
    old_write_warm: float | None = None
    if median["rows_written"] <= 1000:
        with transaction.atomic():
            old_write_warm = _ms(lambda: cycle_baseline.queue_positions_record(*recorded))
            transaction.set_rollback(True)
    same = median["admit_ms"] + median["eta_ms"] + median["other_ms"]
    old_cold = old_snapshot + cold["admit_ms"] + cold["eta_ms"] + cold["apply_ms"] + cold["other_ms"]
    old_cold += old_write_cold
    old_warm = None if old_write_warm is None else old_snapshot + same + old_write_warm
    snapshot = build_snapshot(nodes=nodes, now=time.time())
    return {
        "bench": "admission_cycle_db",
        "queued": len(snapshot.jobs),
        "running": len(snapshot.running),
        "nodes": len(snapshot.nodes),
        "tenants": len(snapshot.tenants),
        "cycle_ms": median["cycle_ms"],
        "cycle_ms_min": min(w[0]["cycle_ms"] for w in warm),
        "python_cpu_ms": median["python_cpu_ms"],
        "target_ms": 200,
        "load_1min": round(os.getloadavg()[0], 2),
        "snapshot_ms": median["snapshot_ms"],
        "admit_ms": median["admit_ms"],
        "eta_ms": median["eta_ms"],
        "write_ms": median["write_ms"],
        "rows_written": median["rows_written"],
        "warm_runs": runs,
        "cold": cold,
        "second": settle,
        "warm": [w[0] for w in warm],
        "baseline": {
            "what": "bench/cycle_baseline.py (the old snapshot and write), same data and run; admit, eta, "
            "apply and commit as measured for the new cycle",
            "snapshot_ms": round(old_snapshot, 1),
            "write_subset": subset,
            "write_cold_ms": round(old_write_cold, 1),
            "write_cold_how": f"old write of {subset['rows']} rows scaled x{scale:.1f} (linear: flatters it)",
            "write_warm_ms": None if old_write_warm is None else round(old_write_warm, 1),
            "cold_cycle_ms": round(old_cold, 1),
            "warm_cycle_ms": None if old_warm is None else round(old_warm, 1),
        },
        "speedup_cold": round(old_cold / cold["cycle_ms"], 2),
        "speedup_warm": None if old_warm is None else round(old_warm / median["cycle_ms"], 2),
    }


# -------------------------------------------------------------------------------------------- simulator


def trace_ratios() -> None:
    """The simulator's trainyard-vs-FIFO figures, exactly as `bench/admission_bench.py` computes them."""
    from admission_bench import TRACES, replay

    if not (TRACES / "openb_pod_list_default.csv").exists():
        emit({"bench": "trace_ratio", "skipped": f"no trace in {TRACES}"})
        return
    replay("gpu nodes, all 1213 (uncontended)", "openb_node_list_gpu_node.csv", 1)
    replay("gpu nodes, every 100th: 13 nodes, 56 GPUs (contended)", "openb_node_list_gpu_node.csv", 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="queued jobs for the admission cycle")
    parser.add_argument("--runs", type=int, default=3, help="warm cycles to take the median of")
    parser.add_argument("--only", choices=["engine", "cycle", "trace"], help="run one of the figures")
    args = parser.parse_args()
    started = time.perf_counter()
    prepare_database()
    from django.core.management import call_command

    if args.only in (None, "engine"):
        clock = PodClock()
        with running_engine(clock):
            records = engine_latencies(clock)
        for record in records:
            emit(record)
        call_command("flush", verbosity=0, interactive=False)
    if args.only in (None, "cycle"):
        emit(admission_cycle(jobs=args.jobs, runs=args.runs))
    if args.only in (None, "trace"):
        trace_ratios()
    emit({"bench": "engine_bench", "wall_s": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()

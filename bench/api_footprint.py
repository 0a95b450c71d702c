"""API footprint benchmark: the requests per minute the platform's periodic work sends to the cluster, with
the watch-backed caches off (every reader lists nodes and pods; reconcile lists every round) and on, at idle
and with other teams' pods running, measured in the same run.

Run: ``.venv/bin/python bench/api_footprint.py [--seconds 60] [--pods 1000]``; prints one JSON line per
phase (requests per minute by ``"verb resource"``) and one per comparison (before, after, ratio).
Needs the local PostgreSQL and Redis the tests use; it never touches the developer's data:

* database ``trainyard_footprint_bench`` (or ``FOOTPRINT_BENCH_DATABASE``; created if missing, migrated,
  flushed at start), settings ``portal.settings.test``; Redis db 14 (or ``FOOTPRINT_BENCH_REDIS_URL``);
* kubesim in-process on a free port, its state in a temporary folder (removed at the end).

What runs: the watch loop (``jobs.watcher.Watcher``, whose node summary NODE_CACHE_ENABLED switches) in a
thread, and every task of ``CELERY_BEAT_SCHEDULE`` (cycle, reconcile, telemetry, autotune, idle GPUs,
notifications, TensorBoard sweep) run in this process at its interval, as ``celery beat`` and a worker
would run them. kubesim counts every API request it serves by verb and resource (``sim.request_counts()``).
A phase with the cache on starts counting once the watcher has published its summary (its initial lists
are part of the watcher's start, not of its steady state); watches count the connections opened.

With ``--pods N`` (default 1,000), N pods of another team (``sleep``, 1m CPU, 4Mi) run in namespace
``other-team`` on extra CPU nodes (100 pods each), on the host network: kubesim's pod network has one /24
(about 250 addresses), a real cluster's far more. kubesim runs each as a real process on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.benchdb import prepare_database  # noqa: E402

BENCH_DB = os.environ.get("FOOTPRINT_BENCH_DATABASE", "trainyard_footprint_bench")
BENCH_REDIS = os.environ.get("FOOTPRINT_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"
for _name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
    os.environ[_name] = BENCH_REDIS

from django.conf import settings  # noqa: E402

settings.DATABASES["default"]["NAME"] = BENCH_DB
PODS_PER_NODE = 100
RECONCILE = "jobs.tasks.reconcile"
OTHER_NAMESPACE = "other-team"


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def run_beat(sim: Any, seconds: float) -> list[dict[str, int]]:
    """Run every beat task in this process at its interval for `seconds` (each once at the start); return
    the requests each reconcile round sent (kubesim's counts just before and after it: a request the watcher
    thread sends meanwhile lands there too, rarely, as the rounds take milliseconds)."""
    from portal.celery import app

    app.loader.import_default_modules()
    schedule = [(entry["task"], float(entry["schedule"])) for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    due = dict.fromkeys((name for name, _ in schedule), 0.0)
    rounds = []
    start = time.monotonic()
    while (now := time.monotonic() - start) < seconds:
        for name, interval in schedule:
            if now >= due[name]:
                before = sim.request_counts() if name == RECONCILE else {}
                app.tasks[name].apply()
                if name == RECONCILE:
                    after = sim.request_counts()
                    rounds.append({k: n - before.get(k, 0) for k, n in after.items() if n > before.get(k, 0)})
                due[name] = now + interval
        time.sleep(max(0.0, min(due.values()) - (time.monotonic() - start)))
    return rounds


def resync_seconds() -> float:
    """How often reconcile lists the platform's Services, Secrets and claims when it reads the caches."""
    return float(settings.RECONCILE_RESYNC_SECONDS)


def reconcile_figures(rounds: list[dict[str, int]], cache: bool, seconds: float) -> dict[str, object]:
    """Reconcile's own requests: as measured over the phase, and its steady rate. A phase starts with the
    resync due (the round that lists claims), so with the caches on the measured rate holds one resync per
    phase; the steady rate charges that round once per resync period instead."""
    resyncs = [r for r in rounds if "list persistentvolumeclaims" in r]
    ordinary = [r for r in rounds if "list persistentvolumeclaims" not in r]
    measured = sum(sum(r.values()) for r in rounds) * 60 / seconds
    if cache and resyncs and resync_seconds() > 0:
        per_resync = sum(sum(r.values()) for r in resyncs) / len(resyncs)
        steady = sum(sum(r.values()) for r in ordinary) * 60 / seconds + per_resync * 60 / resync_seconds()
    else:
        steady = measured
    by_kind: dict[str, int] = {}
    for r in rounds:
        for k, n in r.items():
            by_kind[k] = by_kind.get(k, 0) + n
    return {
        "rounds": len(rounds),
        "resync_rounds": len(resyncs),
        "requests": by_kind,
        "measured_per_minute": round(measured, 2),
        "steady_per_minute": round(steady, 2),
    }


def measure(sim: Any, phase: str, cache: bool, seconds: float) -> dict[str, float]:
    """Requests per minute by verb and resource over `seconds` of the periodic work, cache on or off."""
    from jobs import cluster
    from jobs.cluster import nodesummary, podsummary
    from jobs.watcher import Watcher

    settings.NODE_CACHE_ENABLED = cache
    settings.RECONCILE_FROM_WATCH_CACHE = cache
    nodesummary.clear(cluster.installation_id())
    # Each phase starts with reconcile's resync due (Services, Secrets, claims; every RECONCILE_RESYNC_SECONDS):
    # the measured rate holds one, the steady rate (`reconcile_figures`) charges it once per period.
    podsummary.forget_turn(cluster.resync_turn())
    watcher = Watcher(cluster.cluster(), follow_logs=False)
    thread = threading.Thread(target=watcher.run, name="watcher", daemon=True)
    thread.start()
    try:
        if cache:
            deadline = time.monotonic() + 120
            while nodesummary.read(cluster.installation_id()) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("the watcher published no node summary in 120 s")
                time.sleep(0.2)
        sim.request_counts(reset=True)
        rounds = run_beat(sim, seconds)
        counts = sim.request_counts()
    finally:
        watcher.stop()
        thread.join(timeout=30)
    per_minute = {key: round(n * 60 / seconds, 1) for key, n in counts.items()}
    emit(
        {
            "phase": phase,
            "caches": "on" if cache else "off",
            "seconds": seconds,
            "requests_per_minute": per_minute,
            "total_per_minute": round(sum(per_minute.values()), 1),
            "reconcile": reconcile_figures(rounds, cache, seconds),
        }
    )
    return per_minute


def compare(phase: str, before: dict[str, float], after: dict[str, float]) -> None:
    """One line: totals, the node and pod lists, before and after, and their ratios."""

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 1) if b else None

    lists_before = before.get("list nodes", 0) + before.get("list pods", 0)
    lists_after = after.get("list nodes", 0) + after.get("list pods", 0)
    total_before, total_after = sum(before.values()), sum(after.values())
    emit(
        {
            "phase": phase,
            "total_per_minute": {"before": round(total_before, 1), "after": round(total_after, 1)},
            "total_ratio": ratio(total_before, total_after),
            "node_and_pod_lists_per_minute": {"before": lists_before, "after": lists_after},
            "lists_ratio": ratio(lists_before, lists_after) if lists_after else "no lists after",
        }
    )


def start_other_pods(sim: Any, count: int) -> None:
    """`count` running pods of another team on extra CPU nodes; waits until all run."""
    from kubernetes import client

    from jobs import cluster

    for i in range((count + PODS_PER_NODE - 1) // PODS_PER_NODE):
        sim.cluster.add_node(f"other-{i}", cpu=64, memory=64 * 2**30)
    core = client.CoreV1Api(cluster.cluster().api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=OTHER_NAMESPACE)))
    for i in range(count):
        core.create_namespaced_pod(
            OTHER_NAMESPACE,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=f"theirs-{i}", labels={"app": "theirs"}),
                spec=client.V1PodSpec(
                    containers=[
                        client.V1Container(
                            name="main",
                            image="busybox",
                            command=["sleep", "86400"],
                            resources=client.V1ResourceRequirements(requests={"cpu": "1m", "memory": "4Mi"}),
                        )
                    ],
                    termination_grace_period_seconds=0,
                    host_network=True,
                ),
            ),
        )
    deadline = time.monotonic() + 600
    while True:
        pods = core.list_namespaced_pod(OTHER_NAMESPACE).items
        running = len([p for p in pods if p.status.phase == "Running"])
        if running >= count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {running} of {count} pods running after 600 s")
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds measured per phase")
    parser.add_argument("--pods", type=int, default=1000, help="other teams' running pods (0: idle only)")
    args = parser.parse_args()
    prepare_database()
    from jobs import cluster
    from kubesim.testing import running_kubesim

    state = Path(tempfile.mkdtemp(prefix="footprint-bench-"))
    try:
        with running_kubesim(state / "kubesim", gpu_nodes=2, gpus_per_node=4) as sim:
            settings.KUBECONFIG = str(sim.kubeconfig_path)
            cluster.cluster()
            before = measure(sim, "idle", cache=False, seconds=args.seconds)
            after = measure(sim, "idle", cache=True, seconds=args.seconds)
            compare("idle", before, after)
            if args.pods:
                started = time.monotonic()
                start_other_pods(sim, args.pods)
                emit({"other_pods_running": args.pods, "start_seconds": round(time.monotonic() - started, 1)})
                phase = f"{args.pods}_other_pods"
                before = measure(sim, phase, cache=False, seconds=args.seconds)
                after = measure(sim, phase, cache=True, seconds=args.seconds)
                compare(phase, before, after)
    finally:
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()

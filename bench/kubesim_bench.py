"""kubesim benchmark: JSON lines for watch latency, list and watch of 1,000 pods, log-follow rate and CPU limits."""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

import urllib3
from kubernetes import client, watch

from kubesim.testing import KubeSim, running_kubesim

_CPU_THRESHOLD = 0.55  # cores a busy loop may use under a 500m limit


def _pod(name: str, command: list[str], **container: Any) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"bench": "yes"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="c", image="x", command=command, **container)],
        ),
    )


def _phase(core: client.CoreV1Api, name: str) -> str | None:
    status = core.read_namespaced_pod(name, "default").status
    assert status is not None
    return status.phase


def watch_latency(core: client.CoreV1Api, count: int = 200) -> dict[str, object]:
    """Time from sending create() to the ADDED event arriving on a watch (includes client overhead)."""
    cm = client.V1ConfigMap
    listed = core.list_namespaced_config_map("default").metadata
    assert listed is not None
    rv = listed.resource_version
    seen: dict[str, float] = {}
    done = threading.Event()

    def watcher() -> None:
        for event in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=60
        ):
            seen[event["object"].metadata.name] = time.perf_counter()
            if len(seen) >= count:
                break
        done.set()

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    sent: dict[str, float] = {}
    for i in range(count):
        name = f"lat-{i}"
        sent[name] = time.perf_counter()
        core.create_namespaced_config_map("default", cm(metadata=client.V1ObjectMeta(name=name)))
    done.wait(60)
    lat = sorted((seen[n] - sent[n]) * 1000 for n in sent if n in seen)
    return {
        "metric": "create_to_watch_event_ms",
        "p50": round(statistics.median(lat), 3),
        "p99": round(lat[int(len(lat) * 0.99) - 1], 3),
        "n": len(lat),
    }


def _watch_all_added(core: client.CoreV1Api, count: int) -> float:
    """Milliseconds from opening a watch at resourceVersion 0 until its ``count`` initial ADDED events arrived."""
    start = time.perf_counter()
    seen = 0
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        label_selector="bench=yes",
        resource_version="0",
        timeout_seconds=90,
    ):
        if event["type"] == "ADDED":
            seen += 1
            if seen >= count:
                break
    if seen < count:
        raise RuntimeError(f"watch delivered {seen} of {count} ADDED events")
    return (time.perf_counter() - start) * 1000


def list_and_watch_thousand(sim: KubeSim, core: client.CoreV1Api, count: int = 1000) -> dict[str, object]:
    """With 1,000 pods stored (kubelet paused so none runs): median time to list them, and median time for a
    watch from resourceVersion 0 to deliver all 1,000 ADDED events (both through the official client)."""
    sim.pause_kubelet(True)
    for i in range(count):
        core.create_namespaced_pod("default", _pod(f"many-{i}", ["true"]))
    list_times = []
    for _ in range(5):
        start = time.perf_counter()
        items = core.list_namespaced_pod("default", label_selector="bench=yes").items
        list_times.append((time.perf_counter() - start) * 1000)
    watch_times = [_watch_all_added(core, count) for _ in range(3)]
    core.delete_collection_namespaced_pod("default", label_selector="bench=yes", grace_period_seconds=0)
    sim.pause_kubelet(False)
    return {
        "metric": "pods_1000_list_and_watch_ms",
        "list_p50": round(statistics.median(list_times), 1),
        "watch_all_added_p50": round(statistics.median(watch_times), 1),
        "items": len(items),
        "runs": {"list": len(list_times), "watch": len(watch_times)},
    }


def log_throughput(core: client.CoreV1Api, lines: int = 100000) -> dict[str, object]:
    """Lines per second through a followed log."""
    script = f"import sys\nfor i in range({lines}): sys.stdout.write(f'line {{i}}\\n')"
    core.create_namespaced_pod("default", _pod("logger", ["python", "-c", script]))
    while _phase(core, "logger") == "Pending":
        time.sleep(0.01)
    start = time.perf_counter()
    # With _preload_content=False the client returns the raw urllib3 response, though it is typed as str.
    response = cast(
        urllib3.HTTPResponse,
        core.read_namespaced_pod_log("logger", "default", follow=True, _preload_content=False),
    )
    received = sum(chunk.count(b"\n") for chunk in response.stream())
    elapsed = time.perf_counter() - start
    return {"metric": "log_follow_lines_per_s", "value": round(received / elapsed), "lines": received}


def cpu_limit(sim: KubeSim, core: client.CoreV1Api, seconds: float = 4.0) -> dict[str, object]:
    """CPU a busy loop gets under a 500m limit (its own CPU time over its wall time), PASS at <= 0.55 cores."""
    busy = f"import time, os\nt = time.time()\nwhile time.time() - t < {seconds}: pass\nprint(os.times())"
    resources = client.V1ResourceRequirements(limits={"cpu": "500m"})
    core.create_namespaced_pod("default", _pod("busy", ["python", "-c", busy], resources=resources))
    while _phase(core, "busy") not in ("Succeeded", "Failed"):
        time.sleep(0.05)
    times = core.read_namespaced_pod_log("busy", "default").strip()
    user = float(times.split("user=")[1].split(",")[0])
    system = float(times.split("system=")[1].split(",")[0])
    cores = (user + system) / seconds
    return {
        "metric": "cpu_under_500m_limit_cores",
        "value": round(cores, 3),
        "threshold": _CPU_THRESHOLD,
        "result": "PASS" if cores <= _CPU_THRESHOLD else "FAIL",
        "mechanism": sim.cluster.cgroups.describe(),
    }


def main() -> None:
    """Run every benchmark and print one JSON line each."""
    with running_kubesim(Path(tempfile.mkdtemp(prefix="kubesim-bench-"))) as sim:
        core = client.CoreV1Api(sim.api_client())
        for result in (
            watch_latency(core),
            list_and_watch_thousand(sim, core),
            log_throughput(core),
            cpu_limit(sim, core),
        ):
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

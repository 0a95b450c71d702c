"""What the metrics API (`metrics.k8s.io`) says a pod uses is what it uses, as cAdvisor reads it from the
container's cgroup: a command that starts its own session (as the learner launcher does) is counted, CPU and
memory, within 20 % of what /proc says of the same processes over the same time."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from kubernetes import client

from kubesim.cgroups import CgroupManager
from kubesim.procfs import tree_usage
from kubesim.runtime import RATE_WINDOW
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase

# The pod's command starts the work in a new session, like the launcher: a process-group count misses it.
WORK = (
    "import subprocess, sys\n"
    "child = 'x = bytearray(160 * 2**20)\\nfor i in range(0, len(x), 4096): x[i] = 1\\n"
    'print("ready", flush=True)\\nwhile True: pass\'\n'
    "subprocess.run([sys.executable, '-c', child], start_new_session=True)\n"
)


def usage(custom: client.CustomObjectsApi, ns: str, name: str) -> tuple[float, int] | None:
    found: Any = custom.get_namespaced_custom_object("metrics.k8s.io", "v1beta1", ns, "pods", name)
    containers = found.get("containers") or []
    if not containers:
        return None
    cpu, memory = containers[0]["usage"]["cpu"], containers[0]["usage"]["memory"]
    return int(cpu.rstrip("n")) / 1e9, int(memory.removesuffix("Ki")) * 1024


def cpu_at(series: list[tuple[float, float]], when: float) -> float:
    """CPU seconds the tree had used at `when`, interpolated between the test's own /proc readings."""
    for (t0, c0), (t1, c1) in itertools.pairwise(series):
        if t0 <= when <= t1:
            return c0 + (c1 - c0) * (when - t0) / (t1 - t0) if t1 > t0 else c1
    raise AssertionError(f"no /proc readings around {when}")


def measure(sim: KubeSim, ns: str, name: str) -> None:
    core = client.CoreV1Api(sim.api_client())
    custom = client.CustomObjectsApi(sim.api_client())
    limits = client.V1ResourceRequirements(limits={"cpu": "300m", "memory": "512Mi"})
    core.create_namespaced_pod(ns, make_pod(name, ["python", "-c", WORK], resources=limits))
    pod = wait_phase(core, ns, name, ("Running",))
    pid = int(pod.status.container_statuses[0].container_id.removeprefix("kubesim://"))
    wait_for(lambda: "ready" in core.read_namespaced_pod_log(name, ns), timeout=30)
    try:
        # The metrics' rate spans the RATE_WINDOW seconds before the kubelet's last sample, so each reading
        # is compared with what /proc says of the same processes over the window that ends when it was
        # read (less one sampling interval of slack): on a busy machine the share the work gets moves, and
        # a truth taken over another stretch of time would differ from a right answer.
        series: list[tuple[float, float]] = []
        readings: list[tuple[float, float, int]] = []
        start = time.monotonic()
        next_read = start + RATE_WINDOW + 0.5
        while len(readings) < 8:
            now = time.monotonic()
            series.append((now, tree_usage(pid).cpu_seconds))
            if now >= next_read:
                sample = usage(custom, ns, name)
                if sample is not None:
                    readings.append((time.monotonic(), sample[0], sample[1]))
                next_read = time.monotonic() + 0.5
            time.sleep(0.05)  # the pace of the test's own /proc readings, not a wait for anything
        series.append((time.monotonic(), tree_usage(pid).cpu_seconds))
        rss = tree_usage(pid).rss_bytes
        errors = []
        for at, reported, _ in readings:
            window_end = at - sim.cluster.sample_interval / 2
            truth = (cpu_at(series, window_end) - cpu_at(series, window_end - RATE_WINDOW)) / RATE_WINDOW
            assert truth > 0.05, f"the work used {truth:.2f} cores"
            errors.append(abs(reported - truth) / truth)
        median_error = sorted(errors)[len(errors) // 2]
        assert median_error <= 0.2, f"metrics vs /proc, relative errors {[round(e, 2) for e in errors]}"
        working_set = sorted(m for _, _, m in readings)[len(readings) // 2]
        assert abs(working_set - rss) <= 0.2 * rss, f"metrics {working_set >> 20} MiB, /proc {rss >> 20} MiB"
    finally:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def test_a_command_in_its_own_session_is_counted_from_the_containers_cgroup(sim: KubeSim, ns: str) -> None:
    if sim.cluster.cgroups.version == 0 or sim.cluster.cgroups.memory_parent is None:
        pytest.skip("no writable cgroups on this machine (the /proc fallback is tested below)")
    measure(sim, ns, "counted")


def test_without_cgroups_the_whole_process_tree_is_counted(tmp_path: Any) -> None:
    with running_kubesim(tmp_path, use_cgroups=False) as plain:
        measure(plain, "default", "tree")


def test_cgroup_usage_reads_cpu_time_and_the_working_set(tmp_path: Any) -> None:
    """v1 as this kind of machine mounts it (cpu and cpuacct apart): cpuacct.usage in nanoseconds; memory
    usage less the inactive file cache."""
    root = tmp_path / "cg"
    for controller in ("memory", "cpu", "cpuacct"):
        (root / controller / "ks").mkdir(parents=True)  # a real kernel makes cgroup.procs in each new one
        (root / controller / "ks" / "cgroup.procs").write_text("")
    for controller in ("memory", "cpuacct"):
        (root / controller / "ks" / "c1").mkdir()
        (root / controller / "ks" / "c1" / "cgroup.procs").write_text("")
    manager = CgroupManager("ks", root=root)
    group = manager.create("c1", None, None)
    assert group.cpuacct_dir == root / "cpuacct" / "ks" / "c1" and not group.memory_limited
    (group.cpuacct_dir / "cpuacct.usage").write_text("2500000000\n")
    (root / "memory" / "ks" / "c1" / "memory.usage_in_bytes").write_text(str(300 << 20))
    (root / "memory" / "ks" / "c1" / "memory.stat").write_text(f"cache 1\ntotal_inactive_file {100 << 20}\n")
    assert manager.usage(group) == (2.5, 200 << 20)

"""CPU limits: cgroup v2 controller delegation on a fake cgroup tree, and a busy loop held to 500m."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from kubesim.cgroups import CgroupManager
from kubesim.procfs import group_usage
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, wait_phase


def _fake_v2_root(tmp_path: Path, controllers: str = "cpuset cpu io memory pids") -> Path:
    """A directory that looks like a cgroup2 mount, with kubesim's parent as the kernel would show it."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("1\n")
    parent = root / "kubesim-test"
    parent.mkdir()
    (parent / "cgroup.procs").write_text("")
    (parent / "cgroup.controllers").write_text(controllers + "\n")
    (parent / "cgroup.subtree_control").write_text("")
    return root


def test_v2_enables_cpu_and_memory_down_to_kubesims_parent(tmp_path: Path) -> None:
    root = _fake_v2_root(tmp_path)
    manager = CgroupManager("kubesim-test", root=root)
    assert manager.version == 2
    assert set((root / "cgroup.subtree_control").read_text().split()) == {"+cpu", "+memory"}
    assert set((root / "kubesim-test" / "cgroup.subtree_control").read_text().split()) == {"+cpu", "+memory"}
    assert manager.cpu_enforced and manager.memory_enforced and not manager.problems
    container = root / "kubesim-test" / "pod-main-0"
    container.mkdir()
    (container / "cgroup.procs").write_text("")
    group = manager.create("pod-main-0", 64 * 2**20, 0.5)
    assert (container / "memory.max").read_text() == str(64 * 2**20)
    assert (container / "cpu.max").read_text() == "50000 100000"
    assert group.cpu_limited and group.memory_dir == container and group.dirs == [container]


def test_v2_refused_subtree_control_is_reported_and_not_claimed(tmp_path: Path) -> None:
    root = _fake_v2_root(tmp_path)
    control = root / "kubesim-test" / "cgroup.subtree_control"
    control.unlink()
    control.mkdir()  # writes fail, as EBUSY/EACCES do on a real tree
    manager = CgroupManager("kubesim-test", root=root)
    assert not manager.cpu_enforced and not manager.memory_enforced
    assert "cannot enable the cgroup v2 cpu controller" in manager.describe()
    assert "SIGSTOP/SIGCONT duty cycling" in manager.describe()


def test_v2_without_cpu_controller_keeps_memory_only(tmp_path: Path) -> None:
    root = _fake_v2_root(tmp_path, controllers="memory pids")
    manager = CgroupManager("kubesim-test", root=root)
    assert manager.memory_enforced and not manager.cpu_enforced
    assert (root / "cgroup.subtree_control").read_text().split() == ["+memory"]
    assert "controller cpu is not available" in manager.describe()


def _cpu_seconds(pid: int) -> float:
    """CPU time of the container's process group: the containerID's process may be the sandbox around it."""
    return group_usage(pid).cpu_seconds


def _busy_loop_cores(sim: KubeSim, core: client.CoreV1Api, ns: str, seconds: float = 2.0) -> float:
    """Cores a ``while True: pass`` pod under a 500m limit gets, from its process's /proc CPU time."""
    limits = client.V1ResourceRequirements(limits={"cpu": "500m"})
    core.create_namespaced_pod(ns, make_pod("busy", ["python", "-c", "while True: pass"], resources=limits))
    pod = wait_phase(core, ns, "busy", ("Running",))
    pid = int(pod.status.container_statuses[0].container_id.removeprefix("kubesim://"))
    time.sleep(0.5)  # let the interpreter start and the first throttling period pass
    start_cpu, start = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cores = (_cpu_seconds(pid) - start_cpu) / (time.monotonic() - start)
    core.delete_namespaced_pod("busy", ns, grace_period_seconds=0)
    return cores


def test_busy_loop_is_held_to_its_500m_cpu_limit(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    if not sim.cluster.cgroups.cpu_enforced and not sim.cluster.throttle.enabled:
        pytest.skip("this machine enforces no CPU limit (no CPU cgroup, duty cycling disabled)")
    cores = _busy_loop_cores(sim, core, ns)
    assert 0.05 < cores <= 0.6, f"{cores:.2f} cores under {sim.cluster.cgroups.describe()}"


def test_busy_loop_is_held_to_500m_by_duty_cycling_without_cgroups(tmp_path: Path) -> None:
    with running_kubesim(tmp_path, use_cgroups=False) as plain:
        assert not plain.cluster.cgroups.cpu_enforced
        core = client.CoreV1Api(plain.api_client())
        cores = _busy_loop_cores(plain, core, "default")
    assert 0.05 < cores <= 0.6, f"{cores:.2f} cores with SIGSTOP/SIGCONT duty cycling"

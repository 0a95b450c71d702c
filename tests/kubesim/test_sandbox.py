"""Sandboxed containers: private filesystems, volumes at their mountPaths, runAsUser, signals, PID namespace."""

from __future__ import annotations

import logging
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kubesim import sandbox
from kubesim.sandbox import Identity, Sandbox, identity
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, name_of, wait_for, wait_phase

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sandboxed(sim: KubeSim) -> KubeSim:
    """The session's kubesim, or a skip that says why its containers are not sandboxed."""
    if not sim.cluster.sandboxed:
        pytest.skip(f"containers are not sandboxed here: {sim.cluster.sandbox.reason}")
    return sim


@pytest.fixture
def other_ns(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def run(core: client.CoreV1Api, ns: str, pod: client.V1Pod, phase: str = "Succeeded") -> str:
    """Create the pod, wait for it to end in ``phase`` and return its log."""
    core.create_namespaced_pod(ns, pod)
    name = name_of(pod)
    done = wait_phase(core, ns, name, ("Succeeded", "Failed"), timeout=30)
    log = core.read_namespaced_pod_log(name, ns)
    assert done.status.phase == phase, log
    return log


def shell(name: str, script: str, **container: Any) -> client.V1Pod:
    return make_pod(name, ["sh", "-c", script], **container)


def host_path_pod(name: str, script: str, folder: str, grace: int = 30) -> client.V1Pod:
    """A pod with this test's hostPath folder at /shared (kubesim keeps it under STATE/hostpath)."""
    pod = shell(name, script, volume_mounts=[client.V1VolumeMount(name="shared", mount_path="/shared")])
    pod.spec.volumes = [client.V1Volume(name="shared", host_path=client.V1HostPathVolumeSource(path=folder))]
    pod.spec.termination_grace_period_seconds = grace
    return pod


def test_pods_in_two_namespaces_do_not_see_each_others_files(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str, other_ns: str
) -> None:
    run(core, ns, shell("writer", "mkdir -p /results && echo secret > /results/x && cat /results/x"))
    log = run(core, other_ns, shell("reader", "ls -A /results 2>&1; echo done"))
    assert "x" not in log.split() and log.strip().endswith("done")


def test_a_container_sees_no_state_dir_checkout_or_host_homes(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    hidden = [
        str(sandboxed.state_dir.resolve()),
        str(REPO / "manage.py"),
        str(REPO / "kubesim"),
        "/var/lib/postgresql",
        "/home",
    ]
    script = (
        "; ".join(f"test -e {path} && echo visible {path}" for path in hidden) + "; ls -A /root; echo end"
    )
    log = run(core, ns, shell("peek", script))
    assert "visible" not in log, log
    # /root holds at most the path down to a pyenv interpreter, never the host's files.
    assert set(log.split()[:-1]) <= {".pyenv"}, log


def test_tmp_is_private_to_each_container(sandboxed: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="kubesim-host-") as host_file:
        run(core, ns, shell("one", "echo mine > /tmp/mark"))
        script = f"test -e /tmp/mark && echo leaked; test -e {host_file.name} && echo host; touch /tmp/ok && echo ok"
        assert run(core, ns, shell("two", script)) == "ok\n"


def test_volumes_are_at_their_mount_paths_and_read_only_is_enforced(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cfg"), data={"lr": "0.1"})
    )
    script = (
        "echo $OUT; cat /etc/app/lr; echo; echo x > /data/f && cat /data/f; "
        "touch /etc/app/new 2>/dev/null || echo cfg-ro; touch /frozen/new 2>/dev/null || echo frozen-ro"
    )
    pod = shell(
        "mounts",
        script,
        env=[client.V1EnvVar(name="OUT", value="/data/out")],
        volume_mounts=[
            client.V1VolumeMount(name="data", mount_path="/data"),
            client.V1VolumeMount(name="cfg", mount_path="/etc/app"),
            client.V1VolumeMount(name="frozen", mount_path="/frozen", read_only=True),
        ],
    )
    pod.spec.volumes = [
        client.V1Volume(name="data", empty_dir=client.V1EmptyDirVolumeSource()),
        client.V1Volume(name="cfg", config_map=client.V1ConfigMapVolumeSource(name="cfg")),
        client.V1Volume(name="frozen", empty_dir=client.V1EmptyDirVolumeSource()),
    ]
    assert run(core, ns, pod).split() == ["/data/out", "0.1", "x", "cfg-ro", "frozen-ro"]


def test_a_config_map_key_mounted_with_sub_path_is_a_read_only_file(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="app"), data={"app.yaml": "lr: 1"})
    )
    pod = shell(
        "one-file",
        "cat /etc/app.yaml; echo; (echo x >> /etc/app.yaml) 2>/dev/null || echo ro; test -d /etc/apt && echo etc",
        volume_mounts=[client.V1VolumeMount(name="app", mount_path="/etc/app.yaml", sub_path="app.yaml")],
    )
    pod.spec.volumes = [client.V1Volume(name="app", config_map=client.V1ConfigMapVolumeSource(name="app"))]
    assert run(core, ns, pod).split() == ["lr:", "1", "ro", "etc"]


def test_read_only_root_filesystem_refuses_writes_outside_volumes(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    pod = shell(
        "ro",
        "touch /tmp/x 2>/dev/null || echo root-ro; touch /data/x && echo data-ok",
        security_context=client.V1SecurityContext(read_only_root_filesystem=True),
        volume_mounts=[client.V1VolumeMount(name="data", mount_path="/data")],
    )
    pod.spec.volumes = [client.V1Volume(name="data", empty_dir=client.V1EmptyDirVolumeSource())]
    assert run(core, ns, pod).split() == ["root-ro", "data-ok"]


def test_run_as_user_runs_the_command_as_that_user(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    root_only = client.V1Container(
        name="prepare",
        image="ignored:latest",
        command=["sh", "-c", "echo root > /shared/owned && chmod 644 /shared/owned"],
        security_context=client.V1SecurityContext(run_as_user=0),
        volume_mounts=[client.V1VolumeMount(name="shared", mount_path="/shared")],
    )
    script = (
        "id -u; id -g; echo $HOME; (echo no >> /shared/owned) 2>/dev/null || echo denied; "
        "echo mine > /shared/mine && echo wrote; python -c 'import os; print(os.getuid())'"
    )
    pod = shell("user", script, volume_mounts=[client.V1VolumeMount(name="shared", mount_path="/shared")])
    pod.spec.init_containers = [root_only]
    pod.spec.security_context = client.V1PodSecurityContext(run_as_user=1234, run_as_group=2345)
    pod.spec.volumes = [client.V1Volume(name="shared", empty_dir=client.V1EmptyDirVolumeSource())]
    assert run(core, ns, pod).split() == ["1234", "2345", "/", "denied", "wrote", "1234"]


def test_run_as_non_root_without_a_user_is_refused_as_the_kubelet_does(
    core: client.CoreV1Api, ns: str
) -> None:
    pod = shell("rootish", "true")
    pod.spec.security_context = client.V1PodSecurityContext(run_as_non_root=True)
    core.create_namespaced_pod(ns, pod)

    def waiting() -> client.V1ContainerStateWaiting | None:
        statuses = core.read_namespaced_pod("rootish", ns).status.container_statuses or []
        return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None

    state = wait_for(lambda: (w := waiting()) is not None and w.reason == "CreateContainerConfigError" and w)
    assert state.message.startswith("container has runAsNonRoot and image will run as root (pod: ")
    assert core.read_namespaced_pod("rootish", ns).status.phase == "Pending"
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=rootish,reason=Failed").items
    assert events and events[0].message.startswith("Error: container has runAsNonRoot")


def test_the_container_has_its_own_pid_namespace(sandboxed: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    log = run(core, ns, shell("pids", "echo $$$$; ls -d /proc/[0-9]* | wc -l"))
    own_pid, visible = map(int, log.split())
    assert own_pid < 10 and visible < 10, log


def _last_state_before_deletion(core: client.CoreV1Api, ns: str, name: str, since: str | None) -> Any:
    """The pod as it was deleted (an evicted pod is deleted once it has stopped), watched from ``since``."""
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        field_selector=f"metadata.name={name}",
        resource_version=since,
        timeout_seconds=90,
    )
    for event in stream:
        if event["type"] == "DELETED":
            return event["object"]
    raise AssertionError(f"pod {name} was not deleted")


def test_sigterm_handler_runs_during_the_grace_period_with_its_exit_code(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    folder = f"sandbox-term-{uuid.uuid4().hex[:8]}"
    shared = sandboxed.state_dir / "hostpath" / folder
    handler = "touch /shared/started; while [ ! -e /shared/release ]; do sleep 0.05; done; exit 7"
    script = f"trap '{handler}' TERM; touch /shared/up; while true; do sleep 0.05; done"
    core.create_namespaced_pod(ns, host_path_pod("graceful", script, folder))
    wait_for(lambda: (shared / "up").exists())
    sandboxed.evict_pod(ns, "graceful", grace_period_seconds=60)
    wait_for(lambda: (shared / "started").exists())
    terminating = core.read_namespaced_pod("graceful", ns)
    assert terminating.status.container_statuses[0].state.running is not None  # the handler still runs
    (shared / "release").touch()
    final = _last_state_before_deletion(core, ns, "graceful", terminating.metadata.resource_version)
    assert final.status.container_statuses[0].state.terminated.exit_code == 7


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    marker = f"stubborn-{uuid.uuid4().hex}"
    script = f"trap '' TERM; sh -c 'while true; do sleep 0.05; done' {marker}-child & echo ready; wait"
    pod = make_pod("stubborn", ["sh", "-c", script, marker])
    pod.spec.termination_grace_period_seconds = 1
    core.create_namespaced_pod(ns, pod)
    wait_for(lambda: "ready" in _log(core, ns, "stubborn"))
    running = core.read_namespaced_pod("stubborn", ns)
    sandboxed.evict_pod(ns, "stubborn", grace_period_seconds=1)
    final = _last_state_before_deletion(core, ns, "stubborn", running.metadata.resource_version)
    assert final.status.container_statuses[0].state.terminated.exit_code == 137
    wait_for(lambda: _processes_with(marker) == [])


def test_a_command_killed_by_a_signal_exits_128_plus_its_number(
    sandboxed: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, shell("killed", "kill -USR1 $$$$"))
    pod = wait_phase(core, ns, "killed", ("Failed",))
    assert pod.status.container_statuses[0].state.terminated.exit_code == 128 + 10


def test_without_the_sandbox_the_cluster_says_so_and_rewrites_paths(tmp_path: Path) -> None:
    with running_kubesim(tmp_path, sandbox=False) as plain:
        assert not plain.cluster.sandboxed and "disabled" in plain.cluster.sandbox.reason
        core = client.CoreV1Api(plain.api_client())
        node = core.read_node("kubesim-node")
        assert node.status.node_info.container_runtime_version == "kubesim://local-processes"
        pod = shell("plain", "echo $OUT", env=[client.V1EnvVar(name="OUT", value="/data/out")])
        pod.spec.containers[0].volume_mounts = [client.V1VolumeMount(name="data", mount_path="/data")]
        pod.spec.volumes = [client.V1Volume(name="data", empty_dir=client.V1EmptyDirVolumeSource())]
        log = run(core, "default", pod)
        assert log.strip().startswith(str(plain.state_dir.resolve()))


def test_a_missing_bwrap_falls_back_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sandbox, "BWRAP", str(tmp_path / "no-bwrap"))
    with caplog.at_level(logging.WARNING, logger="kubesim.sandbox"):
        box = Sandbox(tmp_path)
    assert not box.available and "not installed" in box.reason
    assert "CONTAINERS ARE NOT SANDBOXED" in caplog.text


def test_a_kernel_refusing_namespaces_falls_back_with_its_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusing = tmp_path / "bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setattr(sandbox, "BWRAP", str(refusing))
    box = Sandbox(tmp_path)
    assert not box.available and "No permissions to create new namespace" in box.reason


def test_the_containers_security_context_wins_over_the_pods() -> None:
    pod = {
        "spec": {
            "securityContext": {
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "fsGroup": 3000,
                "supplementalGroups": [4],
            }
        }
    }
    container = {"securityContext": {"runAsUser": 2000, "runAsGroup": None}}
    assert identity(pod, container) == Identity(2000, 1000, (4, 3000), changed=True)
    assert identity({"spec": {}}, {}) == Identity()


def _log(core: client.CoreV1Api, ns: str, name: str) -> str:
    """The pod's log so far ("" while there is none to read yet)."""
    try:
        return core.read_namespaced_pod_log(name, ns)
    except ApiException:
        return ""


def _processes_with(marker: str) -> list[int]:
    """Host pids whose command line mentions ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found

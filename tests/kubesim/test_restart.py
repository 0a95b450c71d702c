"""kubesim keeps its state across restarts, as an apiserver on etcd does (see docs/kubesim.md, Restarts)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from kubesim.persist import StateDirBusy
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import error_body, make_pod, name_of, wait_for, wait_phase
from tests.kubesim.test_kubectl import _kubectl, _kubectl_works


@pytest.fixture(scope="module")
def rsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSim]:
    """A kubesim of this module's own: its tests restart it."""
    with running_kubesim(tmp_path_factory.mktemp("restart"), restart_backoff=0.2) as running:
        yield running


@pytest.fixture
def rcore(rsim: KubeSim) -> client.CoreV1Api:
    return client.CoreV1Api(rsim.api_client())


@pytest.fixture
def rns(rcore: client.CoreV1Api, request: pytest.FixtureRequest) -> str:
    name = f"r-{abs(hash(request.node.name)) % 10**8}"
    rcore.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def _cm(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"k": "v"})


def _claim(name: str) -> client.V1PersistentVolumeClaim:
    return client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteOnce"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
        ),
    )


def _claim_pod(name: str, claim: str, command: list[str]) -> client.V1Pod:
    pod = make_pod(name, command, volume_mounts=[client.V1VolumeMount(name="ckpt", mount_path="/ckpt")])
    pod.spec.volumes = [
        client.V1Volume(
            name="ckpt", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim)
        )
    ]
    return pod


def _current_rv(core: client.CoreV1Api) -> int:
    return _rv(core.list_namespace())


def _rv(obj: Any) -> int:
    """The resourceVersion of an object or list returned by the client, as a number."""
    return int(obj.metadata.resource_version)


def _running(core: client.CoreV1Api, ns: str, name: str) -> Any:
    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        statuses = pod.status.container_statuses or []
        return pod if statuses and all(s.state.running for s in statuses) else None

    return wait_for(check, 20)


def test_objects_come_back_after_a_restart(rsim: KubeSim, rcore: client.CoreV1Api, rns: str) -> None:
    cm = rcore.create_namespaced_config_map(rns, _cm("settings"))
    secret = rcore.create_namespaced_secret(
        rns, client.V1Secret(metadata=client.V1ObjectMeta(name="token"), string_data={"t": "s3cret"})
    )
    service = rcore.create_namespaced_service(
        rns,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)], selector={"app": "web"}),
        ),
    )
    rcore.create_namespaced_persistent_volume_claim(rns, _claim("ckpt"))
    claim = wait_for(
        lambda: (c := rcore.read_namespaced_persistent_volume_claim("ckpt", rns)).spec.volume_name and c
    )
    wait_for(lambda: rcore.read_namespaced_service_account("default", rns))

    rsim.restart()

    assert rcore.read_namespace(rns).status.phase == "Active"
    assert rcore.read_namespaced_config_map("settings", rns).metadata == cm.metadata
    assert rcore.read_namespaced_secret("token", rns).data == secret.data
    assert rcore.read_namespaced_service("web", rns).spec.cluster_ip == service.spec.cluster_ip
    again = rcore.read_namespaced_persistent_volume_claim("ckpt", rns)
    assert (again.metadata.uid, again.spec.volume_name, again.status.phase) == (
        claim.metadata.uid,
        claim.spec.volume_name,
        "Bound",
    )
    assert rcore.read_namespaced_service_account("default", rns)
    assert {n.metadata.name for n in rcore.list_namespace().items} >= {"default", "kube-system", rns}


def test_resource_versions_never_go_back_or_repeat(rsim: KubeSim, rcore: client.CoreV1Api, rns: str) -> None:
    before = [_rv(rcore.create_namespaced_config_map(rns, _cm(f"b{i}"))) for i in range(3)]
    last = _current_rv(rcore)

    rsim.restart()

    assert _current_rv(rcore) >= last
    after = [_rv(rcore.create_namespaced_config_map(rns, _cm(f"a{i}"))) for i in range(3)]
    assert min(after) > last and not set(before) & set(after)
    stored = rcore.read_namespaced_config_map("b2", rns)
    assert _rv(stored) == before[2]


def test_watch_from_before_the_restart(rsim: KubeSim, rcore: client.CoreV1Api, rns: str) -> None:
    old = rcore.create_namespaced_config_map(rns, _cm("old")).metadata.resource_version
    rcore.create_namespaced_config_map(rns, _cm("newer"))

    rsim.restart()
    # The watch cache starts at the version the restart found (node heartbeats may have moved it since the
    # test's last write): a watch from there sees what came after, one from before gets 410.
    last = _current_rv(rcore)
    rcore.create_namespaced_config_map(rns, _cm("after"))

    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                rcore.list_namespaced_config_map, rns, resource_version=old, timeout_seconds=1
            )
        )
    assert err.value.status == 410
    resumed = watch.Watch().stream(
        rcore.list_namespaced_config_map, rns, resource_version=str(last), timeout_seconds=1
    )
    assert [(e["type"], e["object"].metadata.name) for e in resumed] == [("ADDED", "after")]


def test_watch_from_a_future_version_waits_for_it(rcore: client.CoreV1Api, rns: str) -> None:
    """The watch cache lets a watch from a version it has not reached wait (only lists and gets fail)."""
    future = _current_rv(rcore) + 3
    seen: list[tuple[int, str]] = []

    def follow() -> None:
        stream = watch.Watch().stream(
            rcore.list_namespaced_config_map, rns, resource_version=str(future), timeout_seconds=30
        )
        for event in stream:
            seen.append((int(event["object"].metadata.resource_version), event["object"].metadata.name))
            if event["object"].metadata.name == "c5":
                return

    watcher = threading.Thread(target=follow)
    watcher.start()
    for i in range(6):
        rcore.create_namespaced_config_map(rns, _cm(f"c{i}"))
    watcher.join(40)
    assert seen and seen[-1][1] == "c5" and all(rv > future for rv, _ in seen)


def test_list_and_get_at_a_future_version_answer_too_large(
    rsim: KubeSim, rcore: client.CoreV1Api, rns: str
) -> None:
    rcore.create_namespaced_config_map(rns, _cm("here"))
    future = _current_rv(rcore) + 1000
    started = time.monotonic()
    with pytest.raises(ApiException) as err:
        rcore.list_namespaced_config_map(rns, resource_version=str(future))
    assert time.monotonic() - started >= 2.9
    body = error_body(err.value)
    assert err.value.status == 504 and body["reason"] == "Timeout"
    assert body["message"].startswith(f"Timeout: Too large resource version: {future}, current: ")
    assert body["details"] == {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }
    with pytest.raises(ApiException) as paged:  # served by etcd on a real cluster: no wait, no retry hint
        rcore.list_namespaced_config_map(rns, resource_version=str(future), limit=10)
    assert paged.value.status == 504 and "retryAfterSeconds" not in error_body(paged.value)["details"]
    url = f"{rsim.url}/api/v1/namespaces/{rns}/configmaps/here?resourceVersion={future}"
    with pytest.raises(urllib.error.HTTPError) as got:
        request = urllib.request.Request(url, headers=rsim.auth_headers())  # noqa: S310
        urllib.request.urlopen(request, context=rsim.ssl_context())  # noqa: S310
    assert got.value.code == 504
    assert rcore.list_namespaced_config_map(rns, resource_version="1").items


def test_claim_folder_and_checkpoint_survive(rsim: KubeSim, rcore: client.CoreV1Api, rns: str) -> None:
    rcore.create_namespaced_persistent_volume_claim(rns, _claim("ckpt"))
    write = "open('/ckpt/step', 'w').write('42')"
    rcore.create_namespaced_pod(rns, _claim_pod("writer", "ckpt", ["python", "-c", write]))
    wait_phase(rcore, rns, "writer", ("Succeeded",))
    claim = rcore.read_namespaced_persistent_volume_claim("ckpt", rns)
    folder = rsim.state_dir / "persistentvolumes" / claim.spec.volume_name

    rsim.restart()

    read = "print(open('/ckpt/step').read())"
    rcore.create_namespaced_pod(rns, _claim_pod("reader", "ckpt", ["python", "-c", read]))
    wait_phase(rcore, rns, "reader", ("Succeeded",))
    assert rcore.read_namespaced_pod_log("reader", rns) == "42\n"
    assert (folder / "step").read_text() == "42"


def test_running_pods_are_reported_as_after_a_node_reboot(
    rsim: KubeSim, rcore: client.CoreV1Api, rns: str
) -> None:
    sleep = ["python", "-c", "import time; time.sleep(300)"]
    rcore.create_namespaced_pod(rns, make_pod("once", sleep, "Never"))
    rcore.create_namespaced_pod(rns, make_pod("server", sleep, "Always"))
    with_init = make_pod("staged", sleep, "OnFailure")
    with_init.spec.init_containers = [
        client.V1Container(name="prep", image="x", command=["python", "-c", "pass"])
    ]
    rcore.create_namespaced_pod(rns, with_init)
    before = {name: _running(rcore, rns, name) for name in ("once", "server", "staged")}

    rsim.restart()

    once = wait_phase(rcore, rns, "once", ("Failed",))
    state = once.status.container_statuses[0].state.terminated
    assert (state.exit_code, state.reason) == (255, "Unknown")
    assert state.started_at == before["once"].status.container_statuses[0].state.running.started_at
    assert once.status.start_time == before["once"].status.start_time

    server = wait_for(
        lambda: (p := _running(rcore, rns, "server")) and p.status.container_statuses[0].restart_count and p
    )
    main = server.status.container_statuses[0]
    assert main.restart_count == 1 and main.ready
    assert (main.last_state.terminated.exit_code, main.last_state.terminated.reason) == (255, "Unknown")
    assert server.status.phase == "Running"

    staged = wait_for(
        lambda: (p := _running(rcore, rns, "staged")) and p.status.container_statuses[0].restart_count and p
    )
    prep = staged.status.init_container_statuses[0]
    assert prep.restart_count == 1 and prep.last_state.terminated.reason == "Completed"
    assert staged.status.container_statuses[0].restart_count == 1

    reasons = {(e.involved_object.name, e.reason) for e in rcore.list_namespaced_event(rns).items}
    assert ("server", "SandboxChanged") in reasons and ("once", "SandboxChanged") not in reasons
    node_events = rcore.list_namespaced_event("default").items
    assert any(e.reason == "Rebooted" and e.involved_object.name == "kubesim-node" for e in node_events)
    for name in ("server", "staged"):
        rcore.delete_namespaced_pod(name, rns, grace_period_seconds=0)


def test_a_pod_being_deleted_at_the_stop_is_gone_after_the_restart(
    rsim: KubeSim, rcore: client.CoreV1Api, rns: str
) -> None:
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    pod = make_pod("stubborn", ["python", "-c", stubborn])
    pod.spec.termination_grace_period_seconds = 60
    rcore.create_namespaced_pod(rns, pod)
    _running(rcore, rns, "stubborn")
    rcore.delete_namespaced_pod("stubborn", rns)
    assert rcore.read_namespaced_pod("stubborn", rns).metadata.deletion_timestamp

    rsim.restart()

    def gone() -> bool:
        try:
            rcore.read_namespaced_pod("stubborn", rns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone)


@pytest.mark.skipif(not _kubectl_works(), reason="no working kubectl")
def test_kubectl_sees_the_namespaces_after_a_restart(rsim: KubeSim, rns: str) -> None:
    rsim.restart()
    listing = _kubectl(rsim, "get", "ns")
    assert rns in listing and "kube-system" in listing


def test_a_second_kubesim_on_the_same_state_dir_refuses_to_start(rsim: KubeSim) -> None:
    with pytest.raises(StateDirBusy):
        KubeSim(rsim.state_dir)


def test_fresh_start_wipes_the_store(tmp_path: Path) -> None:
    with running_kubesim(tmp_path) as sim:
        core = client.CoreV1Api(sim.api_client())
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="gone-soon")))
        sim.restart(fresh=True)
        names = {n.metadata.name for n in core.list_namespace().items}
        assert "gone-soon" not in names and "default" in names


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(state: Path, port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "kubesim", "serve", "--port", str(port), "--no-cgroups"]
    argv += ["--state-dir", str(state), "--kubeconfig", str(state / "kubeconfig")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _client(state: Path) -> client.CoreV1Api:
    """A client for the kubesim serving on ``state``, through the kubeconfig it writes, once it answers."""
    wait_for(lambda: (state / "kubeconfig").is_file(), 30)
    configuration = client.Configuration()
    config.load_kube_config(
        str(state / "kubeconfig"), client_configuration=configuration, persist_config=False
    )
    configuration.retries = False
    core = client.CoreV1Api(client.ApiClient(configuration))

    def answers() -> bool:
        try:
            return bool(core.list_namespace().items)
        except (urllib3.exceptions.HTTPError, ApiException):
            return False

    wait_for(answers, 30)
    return core


def test_a_killed_kubesim_loses_no_write_and_leaves_no_process(tmp_path: Path) -> None:
    port = _free_port()
    server = _serve(tmp_path, port)
    try:
        core = _client(tmp_path)
        core.create_namespaced_pod(
            "default", make_pod("worker", ["python", "-c", "import time; time.sleep(300)"], "Always")
        )
        pod = _running(core, "default", "worker")
        pid = int(pod.status.container_statuses[0].container_id.split("//")[1])
        core.create_namespaced_config_map("default", _cm("last-write"))
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        os.kill(pid, 0)  # the container outlived kubesim, as after a crash

        server = _serve(tmp_path, port)
        core = _client(tmp_path)
        assert core.read_namespaced_config_map("last-write", "default").data == {"k": "v"}
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid))
        restarted = wait_for(
            lambda: (
                (p := _running(core, "default", "worker"))
                and p.status.container_statuses[0].restart_count
                and p
            )
        )
        assert (
            restarted.status.container_statuses[0].container_id
            != pod.status.container_statuses[0].container_id
        )
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def test_a_job_keeps_its_counts_when_its_finished_pods_are_gone(tmp_path: Path) -> None:
    with running_kubesim(tmp_path, auto=False) as sim:
        core, batch = client.CoreV1Api(sim.api_client()), client.BatchV1Api(sim.api_client())
        template = client.V1PodTemplateSpec(
            spec=client.V1PodSpec(
                restart_policy="Never",
                containers=[client.V1Container(name="w", image="x", command=["python", "-c", "pass"])],
            )
        )
        job = client.V1Job(
            metadata=client.V1ObjectMeta(name="steps"),
            spec=client.V1JobSpec(template=template, completions=3, parallelism=1),
        )
        batch.create_namespaced_job("default", job)
        sim.wait_for(lambda: batch.read_namespaced_job("steps", "default").status.succeeded, 20)
        for pod in core.list_namespaced_pod("default").items:
            if pod.status.phase == "Succeeded":
                core.delete_namespaced_pod(name_of(pod), "default", grace_period_seconds=0)

        sim.restart()
        sim.step()

        assert batch.read_namespaced_job("steps", "default").status.succeeded >= 1
        sim.wait_for(lambda: batch.read_namespaced_job("steps", "default").status.completion_time, 30)
        assert batch.read_namespaced_job("steps", "default").status.succeeded == 3

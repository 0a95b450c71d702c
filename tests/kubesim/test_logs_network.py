"""Pod logs by container and sinceTime, and two pods meeting through a headless Service."""

from __future__ import annotations

import socket
from urllib.parse import quote

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim
from tests.kubesim.conftest import authorized, error_body, wait_phase


def test_log_of_each_container_of_a_two_container_pod(core: client.CoreV1Api, ns: str) -> None:
    containers = [
        client.V1Container(name=n, image="x", command=["sh", "-c", f"echo from-{n}"]) for n in ("one", "two")
    ]
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="pair"),
        spec=client.V1PodSpec(restart_policy="Never", containers=containers),
    )
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "pair", ("Succeeded",))
    assert core.read_namespaced_pod_log("pair", ns, container="one") == "from-one\n"
    assert core.read_namespaced_pod_log("pair", ns, container="two") == "from-two\n"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("pair", ns)
    assert err.value.status == 400 and "choose one of: [one two]" in error_body(err.value)["message"]


def _log_since(api_client: client.ApiClient, sim: KubeSim, ns: str, name: str, since: str) -> str:
    """The official client has no ``since_time`` argument, so send the query through its ApiClient."""
    url = f"{sim.url}/api/v1/namespaces/{ns}/pods/{name}/log?sinceTime={quote(since)}"
    response = api_client.call_api("GET", url, header_params=authorized(api_client))
    text = bytes(response.read()).decode()
    return text if response.status == 200 else f"HTTP {response.status}"


def test_log_since_time_skips_earlier_lines(
    sim: KubeSim, api_client: client.ApiClient, core: client.CoreV1Api, ns: str
) -> None:
    script = "import time; print('early', flush=True); time.sleep(1.2); print('late', flush=True)"
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="timed"),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(name="c", image="x", command=["python", "-c", script])],
        ),
    )
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "timed", ("Succeeded",))
    early, late = (
        line.split(" ")[0] for line in core.read_namespaced_pod_log("timed", ns, timestamps=True).splitlines()
    )
    assert _log_since(api_client, sim, ns, "timed", early) == "early\nlate\n"
    assert _log_since(api_client, sim, ns, "timed", late) == "late\n"
    whole_second = late[:19] + "Z"  # what kubectl --since-time sends; "early" is >1 s older
    assert _log_since(api_client, sim, ns, "timed", whole_second) == "late\n"
    offset = f"{late[:19]}+00:00"
    assert _log_since(api_client, sim, ns, "timed", offset) == "late\n"
    assert _log_since(api_client, sim, ns, "timed", "yesterday") == "HTTP 400"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_SERVER = """
import os, socket
srv = socket.create_server(("0.0.0.0", int(os.environ["PORT"])))
conn, _ = srv.accept()
print("a got", conn.recv(100).decode(), flush=True)
conn.sendall(b"welcome")
conn.close()
"""
_CLIENT = """
import os, socket, time
deadline = time.time() + 15
while True:
    try:
        conn = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), timeout=2)
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.1)
conn.sendall(b"hello")
print("b got", conn.recv(100).decode(), "via", conn.getpeername()[0], flush=True)
"""


def test_two_pods_meet_through_a_headless_service_name(core: client.CoreV1Api, ns: str) -> None:
    port = _free_port()
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="rdv"),
        spec=client.V1ServiceSpec(
            cluster_ip="None", selector={"role": "rdv-a"}, ports=[client.V1ServicePort(port=port)]
        ),
    )
    core.create_namespaced_service(ns, service)
    host = f"rdv.{ns}.svc.cluster.local"

    def pod(name: str, labels: dict[str, str], script: str, env: dict[str, str]) -> client.V1Pod:
        container = client.V1Container(
            name="c",
            image="x",
            command=["python", "-c", script],
            env=[client.V1EnvVar(name=k, value=v) for k, v in env.items()],
        )
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name=name, labels=labels),
            spec=client.V1PodSpec(restart_policy="Never", containers=[container]),
        )

    core.create_namespaced_pod(ns, pod("a", {"role": "rdv-a"}, _SERVER, {"PORT": str(port)}))
    core.create_namespaced_pod(ns, pod("b", {}, _CLIENT, {"MASTER_ADDR": host, "MASTER_PORT": str(port)}))
    for name in ("a", "b"):
        assert wait_phase(core, ns, name, ("Succeeded", "Failed")).status.phase == "Succeeded", (
            core.read_namespaced_pod_log(name, ns)
        )
    assert core.read_namespaced_pod_log("a", ns) == "a got hello\n"
    server_ip = core.read_namespaced_pod("a", ns).status.pod_ip
    assert core.read_namespaced_pod_log("b", ns) == f"b got welcome via {server_ip}\n"

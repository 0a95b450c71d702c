"""Pods on kubesim get their own network, as on a cluster with a CNI: a namespace and IP each, cluster DNS,
nothing of this machine in reach except the host ports kubesim exposes; all of it gone with the pod and
with kubesim. Skipped, with kubesim's reason, where the kernel or the user refuses network namespaces."""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from clusterio.builders.tenant import make_network_policy
from kubesim import network
from kubesim.testing import KubeSim, running_kubesim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase

pytestmark = pytest.mark.slow

_PROBE = """
import json, socket, sys
found = {}
for name, host, port in json.loads(sys.argv[1]):
    try:
        with socket.create_connection((host, port), timeout=1.5) as conn:
            conn.settimeout(1.5)
            found[name] = "open " + conn.recv(16).decode(errors="replace")
    except OSError as exc:
        found[name] = "closed " + type(exc).__name__
print(json.dumps(found), flush=True)
"""


@pytest.fixture(autouse=True)
def _isolated(sim: KubeSim) -> None:
    if not sim.cluster.network.available:
        pytest.skip(f"kubesim runs pods without network isolation here: {sim.cluster.network.reason}")


class Greeter:
    """A TCP server on this machine that greets every connection with ``hello``, until closed."""

    def __init__(self, host: str):
        self.sock = socket.create_server((host, 0))
        self.port = int(self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello")

    def close(self) -> None:
        # Closing alone leaves the thread blocked in accept(); shutting the socket down wakes it.
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


@pytest.fixture
def greeters() -> Iterator[list[Greeter]]:
    made: list[Greeter] = []
    yield made
    for greeter in made:
        greeter.close()


def _probe(core: client.CoreV1Api, ns: str, name: str, targets: list[tuple[str, str, int]]) -> dict[str, str]:
    """What a pod finds at each (label, host, port): ``open <greeting>`` or ``closed <error>``."""
    core.create_namespaced_pod(ns, make_pod(name, ["python", "-c", _PROBE, json.dumps(targets)]))
    pod = wait_phase(core, ns, name, ("Succeeded", "Failed"), timeout=60)
    assert pod.status.phase == "Succeeded", core.read_namespaced_pod_log(name, ns)
    return dict(json.loads(core.read_namespaced_pod_log(name, ns)))


def _needs_bridge_filtering(sim: KubeSim) -> None:
    if not sim.cluster.network.bridge_filtered:
        pytest.skip("br_netfilter is missing here: kubesim enforces no NetworkPolicy and serves no ClusterIP")


def _reachable_here(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_pod_reaches_neither_postgres_redis_kubesims_api_nor_any_listener_on_this_machine(
    sim: KubeSim, core: client.CoreV1Api, ns: str, greeters: list[Greeter]
) -> None:
    everywhere = Greeter("0.0.0.0")  # noqa: S104 - what the firewall must cover
    greeters.append(everywhere)
    services = {"postgres": 5432, "redis": 6379, "kubesim-api": sim.port, "any-listener": everywhere.port}
    for name, port in services.items():
        assert _reachable_here(port), f"{name} does not listen on 127.0.0.1:{port}: the test proves nothing"
    targets = [(f"{name}@loopback", "127.0.0.1", port) for name, port in services.items()]
    targets += [(f"{name}@node", sim.node_ip, port) for name, port in services.items()]
    targets += [(f"{name}@host-name", network.HOST_NAME, port) for name, port in services.items()]
    found = _probe(core, ns, "attacker", targets)
    assert found.keys() == {t[0] for t in targets}
    assert all(v.startswith("closed") for v in found.values()), found


def test_an_exposed_host_port_is_reachable_by_the_nodes_name_and_an_unexposed_one_is_not(
    sim: KubeSim, core: client.CoreV1Api, ns: str, greeters: list[Greeter]
) -> None:
    exposed, hidden = Greeter("127.0.0.1"), Greeter("127.0.0.1")
    greeters += [exposed, hidden]
    sim.expose_host_port(exposed.port)
    found = _probe(
        core,
        ns,
        "visitor",
        [
            ("exposed", network.HOST_NAME, exposed.port),
            ("exposed@node", sim.node_ip, exposed.port),
            ("hidden", network.HOST_NAME, hidden.port),
        ],
    )
    assert found == {
        "exposed": "open hello",
        "exposed@node": "open hello",
        "hidden": found["hidden"],
    }
    assert found["hidden"].startswith("closed"), found


_SERVE = """
import socket
srv = socket.create_server(("0.0.0.0", 7000))
conn, peer = srv.accept()
conn.sendall(socket.gethostname().encode())
print("served", peer[0], flush=True)
"""
_DIAL = """
import socket, sys, time
deadline = time.time() + 30
while True:
    try:
        address = socket.gethostbyname(sys.argv[1])
        with socket.create_connection((address, 7000), timeout=2) as conn:
            print("reached", address, conn.recv(64).decode(), flush=True)
        break
    except OSError:
        if time.time() > deadline:
            raise
        time.sleep(0.1)
print(open("/etc/resolv.conf").read(), flush=True)
"""


def test_pods_of_a_headless_service_find_each_other_by_name_and_talk(core: client.CoreV1Api, ns: str) -> None:
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="group"),
        spec=client.V1ServiceSpec(
            cluster_ip="None",
            selector={"group": "g"},
            publish_not_ready_addresses=True,
            ports=[client.V1ServicePort(port=7000)],
        ),
    )
    core.create_namespaced_service(ns, service)
    for name, script, args in (
        ("learner-0", _SERVE, []),
        ("learner-1", _DIAL, [f"learner-0.group.{ns}.svc"]),
    ):
        pod = make_pod(name, ["python", "-c", script, *args])
        pod.metadata.labels = {"group": "g"}
        pod.spec.hostname, pod.spec.subdomain = name, "group"
        core.create_namespaced_pod(ns, pod)
    done = {
        n: wait_phase(core, ns, n, ("Succeeded", "Failed"), timeout=60) for n in ("learner-0", "learner-1")
    }
    ips = {n: p.status.pod_ip for n, p in done.items()}
    assert ips["learner-0"] != ips["learner-1"]
    assert all(p.status.phase == "Succeeded" for p in done.values()), core.read_namespaced_pod_log(
        "learner-1", ns
    )
    assert core.read_namespaced_pod_log("learner-0", ns) == f"served {ips['learner-1']}\n"
    dial = core.read_namespaced_pod_log("learner-1", ns).splitlines()
    assert dial[0] == f"reached {ips['learner-0']} learner-0"
    assert f"search {ns}.svc.cluster.local svc.cluster.local cluster.local" in dial
    assert "options ndots:5" in dial


def _host_state(instance: str) -> dict[str, bool]:
    """Which of kubesim ``instance``'s network pieces exist on this machine."""
    run = lambda *argv: subprocess.run(argv, capture_output=True, text=True, check=False).stdout  # noqa: E731
    return {
        "netns": f"ks{instance}-" in run("ip", "netns", "list"),
        "veth": f"kv{instance}" in run("ip", "-o", "link", "show"),
        "bridge": f"ksbr{instance}" in run("ip", "-o", "link", "show"),
        "firewall": f"kubesim_{instance}" in run("nft", "list", "tables"),
        "record": (network.RUN_DIR / f"{instance}.json").exists(),
    }


def test_pod_networks_go_with_their_pods_and_the_bridge_and_firewall_with_kubesim(tmp_path: Path) -> None:
    with running_kubesim(tmp_path / "one") as own:
        instance = own.cluster.network.id
        core = client.CoreV1Api(own.api_client())
        core.create_namespaced_pod("default", make_pod("sleeper", ["sleep", "600"]))
        wait_phase(core, "default", "sleeper", ("Running",), timeout=60)
        assert _host_state(instance) == dict.fromkeys(("netns", "veth", "bridge", "firewall", "record"), True)
        core.delete_namespaced_pod("sleeper", "default", grace_period_seconds=0)
        wait_for(lambda: not _host_state(instance)["netns"], timeout=30)
        assert not _host_state(instance)["veth"]
    assert _host_state(instance) == dict.fromkeys(("netns", "veth", "bridge", "firewall", "record"), False)


def test_a_dead_kubesims_network_is_removed_by_the_next_one(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    instance = "dead01"
    subprocess.run(["ip", "link", "add", f"ksbr{instance}", "type", "bridge"], check=True)
    subprocess.run(["ip", "netns", "add", f"ks{instance}-0000"], check=True)
    subprocess.run(["nft", "add", "table", "inet", f"kubesim_{instance}"], check=True)
    network.RUN_DIR.mkdir(parents=True, exist_ok=True)
    record = {"pid": dead.pid, "identity": "gone", "subnet": "10.244.250.0/24", "id": instance}
    (network.RUN_DIR / f"{instance}.json").write_text(json.dumps(record))
    assert _host_state(instance) == {
        "netns": True,
        "veth": False,
        "bridge": True,
        "firewall": True,
        "record": True,
    }
    with running_kubesim(tmp_path / "next"):
        assert not any(_host_state(instance).values()), _host_state(instance)


_GREET = """
import socket, threading
def serve(port):
    srv = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = srv.accept()
        conn.sendall(b"hi")
        conn.close()
for port in (7000, 7001):
    threading.Thread(target=serve, args=(port,)).start()
print("serving", flush=True)
"""


def _server(core: client.CoreV1Api, ns: str) -> str:
    pod = make_pod("server", ["python", "-c", _GREET])
    pod.metadata.labels = {"app": "server"}
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "server", ("Running",), timeout=60)
    wait_for(lambda: core.read_namespaced_pod_log("server", ns) == "serving\n", timeout=60)
    return str(core.read_namespaced_pod("server", ns).status.pod_ip)


@pytest.fixture
def other_ns(core: client.CoreV1Api) -> Iterator[str]:
    name = f"other-{os.urandom(4).hex()}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def test_the_tenant_policy_lets_a_namespace_talk_inside_and_keeps_other_namespaces_out(
    sim: KubeSim, core: client.CoreV1Api, ns: str, other_ns: str
) -> None:
    _needs_bridge_filtering(sim)
    ip = _server(core, ns)
    targets = [("7000", ip, 7000)]
    assert _probe(core, other_ns, "before", targets) == {"7000": "open hi"}, "no policy yet: all pods talk"
    net = client.NetworkingV1Api(core.api_client)
    net.create_namespaced_network_policy(ns, make_network_policy(ns))
    net.create_namespaced_network_policy(other_ns, make_network_policy(other_ns))
    assert _probe(core, ns, "neighbour", targets) == {"7000": "open hi"}
    assert _probe(core, other_ns, "stranger", targets)["7000"].startswith("closed")


def test_policy_peers_and_ports_open_only_what_they_name(
    sim: KubeSim, core: client.CoreV1Api, ns: str, other_ns: str
) -> None:
    _needs_bridge_filtering(sim)
    ip = _server(core, ns)
    net = client.NetworkingV1Api(core.api_client)
    only_7000_from_clients: Any = {
        "metadata": {"name": "clients-7000"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "server"}},
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": other_ns}},
                            "podSelector": {"matchLabels": {"role": "client"}},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": 7000}],
                }
            ],
        },
    }
    net.create_namespaced_network_policy(ns, only_7000_from_clients)
    targets = [("7000", ip, 7000), ("7001", ip, 7001)]
    client_pod = make_pod("client", ["python", "-c", _PROBE, json.dumps(targets)])
    client_pod.metadata.labels = {"role": "client"}
    core.create_namespaced_pod(other_ns, client_pod)
    done = wait_phase(core, other_ns, "client", ("Succeeded", "Failed"), timeout=60)
    found = json.loads(core.read_namespaced_pod_log("client", other_ns))
    assert done.status.phase == "Succeeded" and found["7000"] == "open hi", found
    assert found["7001"].startswith("closed"), found
    assert all(v.startswith("closed") for v in _probe(core, other_ns, "unlabelled", targets).values())
    everything_but_the_server: Any = {
        "metadata": {"name": "no-server"},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": [f"{ip}/32"]}}]}],
        },
    }
    net.create_namespaced_network_policy(other_ns, everything_but_the_server)
    blocked = make_pod("blocked", ["python", "-c", _PROBE, json.dumps(targets[:1])])
    blocked.metadata.labels = {"role": "client"}
    core.create_namespaced_pod(other_ns, blocked)
    wait_phase(core, other_ns, "blocked", ("Succeeded", "Failed"), timeout=60)
    assert json.loads(core.read_namespaced_pod_log("blocked", other_ns))["7000"].startswith("closed")


def test_kubesim_reports_its_network_over_http(sim: KubeSim) -> None:
    status = httpx.get(
        f"{sim.url}/kubesim/network", headers=sim.auth_headers(), verify=sim.ssl_context(), timeout=10
    ).json()
    assert status["isolated"] is True and status["nodeAddress"] == sim.node_ip
    assert ipaddress.ip_address(sim.node_ip) in ipaddress.ip_network(status["podCIDR"])


def test_a_cluster_ip_service_forwards_to_its_ready_pod_by_name_and_address(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    _needs_bridge_filtering(sim)
    _server(core, ns)
    spec = client.V1ServiceSpec(
        selector={"app": "server"}, ports=[client.V1ServicePort(port=80, target_port=7000)]
    )
    service = core.create_namespaced_service(
        ns, client.V1Service(metadata=client.V1ObjectMeta(name="web"), spec=spec)
    )
    ip = str(service.spec.cluster_ip)
    targets = [("name", "web", 80), ("fqdn", f"web.{ns}.svc.cluster.local", 80), ("address", ip, 80)]
    assert _probe(core, ns, "caller", targets) == dict.fromkeys(("name", "fqdn", "address"), "open hi")
    core.delete_namespaced_pod("server", ns, grace_period_seconds=0)
    wait_for(lambda: not core.list_namespaced_pod(ns, label_selector="app=server").items, timeout=30)
    assert _probe(core, ns, "orphan", targets[2:]) == {"address": "closed ConnectionRefusedError"}


def test_expose_host_port_takes_a_port_or_a_pod_port_mapped_to_a_host_port() -> None:
    from kubesim.cli import build_parser

    base = ["serve", "--state-dir", "s", "--kubeconfig", "k"]
    args = build_parser().parse_args([*base, "--expose-host-port", "8000", "--expose-host-port", "9000:9123"])
    assert args.expose_host_port == ["8000", "9000:9123"]
    for bad in ("0", "9000:", "a:1", "1:2:3", "70000"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*base, "--expose-host-port", bad])

"""Service ClusterIPs, as kube-proxy's nftables mode serves them: a connection from a pod to
``clusterIP:port`` is DNATed to one of the Service's ready endpoints (chosen at random, one rule per endpoint
with the probability kube-proxy gives it) at the port's ``targetPort`` (a number, or a container port name
looked up per pod). The rules live in the ``services`` chain of kubesim's nftables table; conntrack (through
br_netfilter) turns the replies back. Traffic from this machine to a ClusterIP is not proxied.
"""

from __future__ import annotations

import logging
import subprocess
from typing import TYPE_CHECKING

from kubesim.dns import endpoints
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

log = logging.getLogger("kubesim.proxy")


def _target(port: Obj, pod: Obj) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return int(target)
    for container in pod["spec"].get("containers") or []:
        for declared in container.get("ports") or []:
            if declared.get("name") == target and (declared.get("protocol") or "TCP") == port.get(
                "protocol", "TCP"
            ):
                return int(declared["containerPort"])
    return None


def compile_rules(services: list[Obj], pods: list[Obj], bridge: str) -> list[str]:
    """The ``services`` chain: for each ClusterIP port with endpoints, one DNAT rule per endpoint."""
    rules: list[str] = []
    for svc in services:
        spec = svc.get("spec") or {}
        cluster_ip = spec.get("clusterIP")
        if cluster_ip in (None, "", "None") or spec.get("type") == "ExternalName":
            continue
        ready = endpoints(svc, pods)
        for port in spec.get("ports") or []:
            protocol = (port.get("protocol") or "TCP").lower()
            if protocol not in ("tcp", "udp"):
                continue
            backends = [(p["status"]["podIP"], t) for p in ready if (t := _target(port, p)) is not None]
            match = f'iifname "{bridge}" ip daddr {cluster_ip} {protocol} dport {int(port["port"])}'
            for index, (ip, target) in enumerate(backends):
                left = len(backends) - index
                chance = f"numgen random mod {left} == 0 " if left > 1 else ""
                rules.append(f"{match} {chance}dnat ip to {ip}:{target}")
    return rules


class ServiceProxy:
    """Keeps the nftables ``services`` chain in step with the store's Services and pods."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.applied: list[str] | None = None

    def step(self) -> None:
        """Recompile and, when the rules changed, replace the chain in one nft transaction."""
        network = self.cluster.network
        if not network.available:
            return
        store = self.cluster.store
        rules = compile_rules(store.list("services")[0], store.list("pods")[0], network.bridge)
        if rules == self.applied:
            return
        table = network.table
        script = "\n".join(
            [f"flush chain inet {table} services", *(f"add rule inet {table} services {r}" for r in rules)]
        )
        out = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            log.error("could not apply Service rules: %s", out.stderr.strip())
            return
        self.applied = rules

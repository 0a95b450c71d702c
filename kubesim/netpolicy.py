"""NetworkPolicy enforcement between pods, as kindnet's kube-network-policies does it: on the traffic that
goes from one pod to another (the bridge's forward path, with conntrack so replies pass), compiled into the
``pods`` chain of kubesim's nftables table each time pods, policies or namespaces change.

A pod selected by a policy of type Ingress (Egress) is isolated in that direction: only what some rule of
some policy selecting it allows gets through (the union of the policies). A connection needs both the
source's egress and the destination's ingress to allow it. Peers are ``podSelector`` (the policy's
namespace), ``namespaceSelector`` (with ``podSelector``: those pods in those namespaces) and ``ipBlock``
(``cidr`` minus ``except``, matched against pod IPs, as Calico does); ports are numbers or container port
names, with ``protocol`` and ``endPort``. Traffic from a pod to its node (cluster DNS, exposed host ports)
is not subject to policies, as with kindnet; the host firewall decides it (kubesim.network).
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kubesim.selectors import labels_match, selector_from_label_selector_object
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

log = logging.getLogger("kubesim.netpolicy")
Ports = list[tuple[str, int, int]] | None  # None: every port; []: none
_TERMINAL = ("Succeeded", "Failed")


def _types(policy: Obj) -> list[str]:
    spec = policy.get("spec") or {}
    return spec.get("policyTypes") or ["Ingress", *(["Egress"] if "egress" in spec else [])]


def _selects(policy: Obj, pod: Obj) -> bool:
    if policy["metadata"]["namespace"] != pod["metadata"]["namespace"]:
        return False
    selector = selector_from_label_selector_object((policy.get("spec") or {}).get("podSelector") or {})
    return labels_match(selector, pod["metadata"].get("labels"))


def _in_block(block: Obj, ip: str) -> bool:
    try:
        address = ipaddress.ip_address(ip)
        if address not in ipaddress.ip_network(block.get("cidr", ""), strict=False):
            return False
        return not any(address in ipaddress.ip_network(e, strict=False) for e in block.get("except") or [])
    except ValueError:
        return False


def _peer_matches(peer: Obj, policy_ns: str, other: Obj, ns_labels: dict[str, dict[str, str]]) -> bool:
    if "ipBlock" in peer:
        return _in_block(peer["ipBlock"], other["status"]["podIP"])
    other_ns = other["metadata"]["namespace"]
    if peer.get("namespaceSelector") is None:
        if other_ns != policy_ns:
            return False
    elif not labels_match(
        selector_from_label_selector_object(peer["namespaceSelector"]), ns_labels.get(other_ns)
    ):
        return False
    if peer.get("podSelector") is None:
        return True
    return labels_match(
        selector_from_label_selector_object(peer["podSelector"]), other["metadata"].get("labels")
    )


def _rule_ports(rule: Obj, target: Obj) -> Ports:
    """The ports a rule opens on ``target`` (the connection's destination pod); named ports are looked up
    among its containers' ports."""
    entries = rule.get("ports") or []
    if not entries:
        return None
    named = {
        p["name"]: (p.get("protocol") or "TCP", int(p["containerPort"]))
        for c in target["spec"].get("containers") or []
        for p in c.get("ports") or []
        if p.get("name")
    }
    found: list[tuple[str, int, int]] = []
    for entry in entries:
        protocol = entry.get("protocol") or "TCP"
        port = entry.get("port")
        if port is None:
            found.append((protocol, 1, 65535))
        elif isinstance(port, str) and not port.isdigit():
            if port in named and named[port][0] == protocol:
                found.append((protocol, named[port][1], named[port][1]))
        else:
            found.append((protocol, int(port), int(entry.get("endPort") or port)))
    return found


def _allowed(policies: list[Obj], direction: str, me: Obj, other: Obj, target: Obj, ns_labels: Any) -> Ports:
    """What ``me``'s policies of ``direction`` let through with ``other`` (None: all; []: nothing)."""
    key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    ports: list[tuple[str, int, int]] = []
    for policy in policies:
        for rule in (policy.get("spec") or {}).get(key) or []:
            peers = rule.get(peers_key) or []
            ns = policy["metadata"]["namespace"]
            if peers and not any(_peer_matches(p, ns, other, ns_labels) for p in peers):
                continue
            opened = _rule_ports(rule, target)
            if opened is None:
                return None
            ports += opened
    return ports


def _intersect(a: Ports, b: Ports) -> Ports:
    if a is None:
        return b
    if b is None:
        return a
    return [
        (pa, max(la, lb), min(ha, hb))
        for pa, la, ha in a
        for pb, lb, hb in b
        if pa == pb and max(la, lb) <= min(ha, hb)
    ]


def compile_rules(pods: Iterable[Obj], policies: Iterable[Obj], namespaces: Iterable[Obj]) -> list[str]:
    """The ``pods`` chain's rules after the conntrack accept: explicit accepts for what isolated pods may
    do, then drops for everything else to or from them, then accept (pods no policy isolates)."""
    ns_labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in namespaces}
    live = [
        p for p in pods if (p.get("status") or {}).get("podIP") and p["status"].get("phase") not in _TERMINAL
    ]
    live = [p for p in live if not p["spec"].get("hostNetwork")]
    by_pod: dict[str, dict[str, list[Obj]]] = {}
    for pod in live:
        chosen = [pol for pol in policies if _selects(pol, pod)]
        by_pod[pod["metadata"]["uid"]] = {
            t: [pol for pol in chosen if t in _types(pol)] for t in ("Ingress", "Egress")
        }
    rules: list[str] = []
    for src in live:
        for dst in live:
            if src is dst or src["status"]["podIP"] == dst["status"]["podIP"]:
                continue
            egress, ingress = (
                by_pod[src["metadata"]["uid"]]["Egress"],
                by_pod[dst["metadata"]["uid"]]["Ingress"],
            )
            if not egress and not ingress:
                continue
            out = _allowed(egress, "Egress", src, dst, dst, ns_labels) if egress else None
            into = _allowed(ingress, "Ingress", dst, src, dst, ns_labels) if ingress else None
            rules += _accepts(src["status"]["podIP"], dst["status"]["podIP"], _intersect(out, into))
    egress_isolated = sorted({p["status"]["podIP"] for p in live if by_pod[p["metadata"]["uid"]]["Egress"]})
    ingress_isolated = sorted({p["status"]["podIP"] for p in live if by_pod[p["metadata"]["uid"]]["Ingress"]})
    if egress_isolated:
        rules.append(f"ip saddr {{ {', '.join(egress_isolated)} }} drop")
    if ingress_isolated:
        rules.append(f"ip daddr {{ {', '.join(ingress_isolated)} }} drop")
    return rules


def _accepts(src: str, dst: str, ports: Ports) -> list[str]:
    pair = f"ip saddr {src} ip daddr {dst}"
    if ports is None:
        return [f"{pair} accept"]
    rules = []
    for protocol in ("TCP", "UDP", "SCTP"):
        ranges = sorted({f"{lo}-{hi}" if lo != hi else str(lo) for p, lo, hi in ports if p == protocol})
        if ranges:
            rules.append(f"{pair} {protocol.lower()} dport {{ {', '.join(ranges)} }} accept")
    return rules


class PolicyEnforcer:
    """Keeps the nftables ``pods`` chain in step with the store's pods, NetworkPolicies and namespaces."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.applied: list[str] | None = None
        self.error: str | None = None

    def step(self) -> None:
        """Recompile and, when the rules changed, replace the chain in one nft transaction."""
        network = self.cluster.network
        if not network.available:
            return
        store = self.cluster.store
        rules = compile_rules(
            store.list("pods")[0], store.list("networkpolicies")[0], store.list("namespaces")[0]
        )
        if rules == self.applied:
            return
        table = network.table
        script = "\n".join(
            [
                f"flush chain inet {table} pods",
                *(
                    f"add rule inet {table} pods {r}"
                    for r in ["ct state established,related accept", *rules, "accept"]
                ),
            ]
        )
        out = subprocess.run(["nft", "-f", "-"], input=script, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            self.error = out.stderr.strip()
            log.error("could not apply NetworkPolicies: %s", self.error)
            return
        self.applied, self.error = rules, None

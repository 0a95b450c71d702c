"""Cluster DNS on the node address, as CoreDNS's kubernetes plugin answers it (A records only).

``<svc>.<ns>.svc.cluster.local``: a Service's ClusterIP, or for a headless Service the IPs of the pods it
selects that are Ready (all of them with ``publishNotReadyAddresses``); ``<hostname>.<subdomain>.<ns>.svc
.cluster.local``: a pod with that hostname and subdomain, when the headless Service named by the subdomain
lists it; ``<a-b-c-d>.<ns>.pod.cluster.local``: that address; ``host.kubesim.internal``: the node address
(where exposed host ports are forwarded). Every other name is NXDOMAIN: pods have no upstream resolver.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import DNSServer

from kubesim.selectors import labels_match, selector_from_label_selector_object
from kubesim.store import Obj, Store

log = logging.getLogger("kubesim.dns")
DOMAIN = "cluster.local"
TTL = 5
_TERMINAL = ("Succeeded", "Failed")


class _Quiet:
    """dnslib's server logs every query to stdout by default; kubesim's log stays quiet."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def _ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def endpoints(svc: Obj, pods: list[Obj]) -> list[Obj]:
    """The pods a Service's endpoints list: in its namespace, selected, with an IP, not finished, and Ready
    unless the Service publishes not-ready addresses."""
    spec = svc.get("spec") or {}
    if not spec.get("selector"):
        return []
    selector = selector_from_label_selector_object({"matchLabels": spec["selector"]})
    publish = bool(spec.get("publishNotReadyAddresses"))
    namespace = svc["metadata"]["namespace"]
    return [
        p
        for p in pods
        if p["metadata"]["namespace"] == namespace
        and labels_match(selector, p["metadata"].get("labels"))
        and (p.get("status") or {}).get("podIP")
        and (p.get("status") or {}).get("phase") not in _TERMINAL
        and (publish or _ready(p))
    ]


class ClusterResolver:
    """Answers from the store at query time, so a new pod or Service resolves as soon as it exists."""

    def __init__(self, store: Store, node_ip: str, host_name: str):
        self.store = store
        self.node_ip = node_ip
        self.host_name = host_name

    def lookup(self, name: str) -> list[str] | None:
        """The A record addresses of ``name`` (empty: the name exists with no address), or None: NXDOMAIN."""
        name = name.lower().rstrip(".")
        if name == self.host_name:
            return [self.node_ip]
        if name.endswith(f".pod.{DOMAIN}"):
            parts = name[: -len(f".pod.{DOMAIN}")].split(".")
            if len(parts) == 2:
                try:
                    return [str(ipaddress.IPv4Address(parts[0].replace("-", ".")))]
                except ValueError:
                    return None
            return None
        if not name.endswith(f".svc.{DOMAIN}"):
            return None
        parts = name[: -len(f".svc.{DOMAIN}")].split(".")
        if len(parts) == 2:
            return self._service(parts[0], parts[1])
        if len(parts) == 3:
            return self._pod(parts[0], parts[1], parts[2])
        return None

    def _service(self, name: str, namespace: str) -> list[str] | None:
        svc = self.store.peek("services", namespace, name)
        if svc is None:
            return None
        spec = svc.get("spec") or {}
        if spec.get("clusterIP") not in (None, "", "None"):
            return [spec["clusterIP"]]
        return [
            p["status"]["podIP"]
            for p in endpoints(svc, self.store.list("pods", svc["metadata"]["namespace"])[0])
        ]

    def _pod(self, hostname: str, subdomain: str, namespace: str) -> list[str] | None:
        svc = self.store.peek("services", namespace, subdomain)
        if svc is None or (svc.get("spec") or {}).get("clusterIP") not in ("None",):
            return None
        found = [
            p["status"]["podIP"]
            for p in endpoints(svc, self.store.list("pods", svc["metadata"]["namespace"])[0])
            if p["spec"].get("hostname") == hostname and p["spec"].get("subdomain") == subdomain
        ]
        return found or None

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        """dnslib's resolver interface: one reply per query; AAAA and other types of a known name get no
        data (NOERROR, no answer), as from CoreDNS on an IPv4 cluster."""
        reply = request.reply()
        qname = request.q.qname
        addresses = self.lookup(str(qname))
        if addresses is None:
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        if request.q.qtype in (QTYPE.A, QTYPE.ANY):
            for address in addresses:
                reply.add_answer(RR(qname, QTYPE.A, rdata=A(address), ttl=TTL))
        return reply


class ClusterDNS:
    """The DNS server (UDP and TCP on port 53 of the node address) for one kubesim's pods."""

    def __init__(self, store: Store, node_ip: str, host_name: str):
        self.resolver = ClusterResolver(store, node_ip, host_name)
        self.servers = [
            DNSServer(self.resolver, address=node_ip, port=53, tcp=tcp, logger=_Quiet())
            for tcp in (False, True)
        ]
        for server in self.servers:
            server.server.daemon_threads = True
            server.start_thread()

    def stop(self) -> None:
        """Stop serving and close the sockets."""
        for server in self.servers:
            server.server.shutdown()
            server.server.server_close()

"""The pod network of one kubesim: a node bridge, a network namespace and veth pair per pod, and a host
firewall (nftables) that keeps pods away from everything on this machine except what is exposed.

Each kubesim instance gets its own bridge (``ksbr<id>``), a free /24 from 10.244.0.0/16 (the node, i.e. the
bridge, takes ``.1``), an nftables table ``inet kubesim_<id>`` and a record under ``/run/kubesim-net`` naming
its pid, so that a later kubesim removes what a crashed one left (namespaces, bridge, table). Where the
kernel or the user refuses network namespaces, ``available`` is False with the ``reason``, and pods share
this machine's loopback as before.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import secrets
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesim.procfs import process_identity

log = logging.getLogger("kubesim.network")
RUN_DIR = Path("/run/kubesim-net")
POOL = ipaddress.ip_network("10.244.0.0/16")
SERVICE_RANGE = "10.96.0.0/16"  # where kubesim.defaults allocates ClusterIPs
HOST_NAME = "host.kubesim.internal"
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class PodNet:
    """One pod's network sandbox: its namespace (at ``/run/netns/<netns>``), host-side veth and IP."""

    netns: str
    veth: str
    ip: str

    @property
    def path(self) -> str:
        """The namespace's bind mount, for ``nsenter --net=``."""
        return f"/run/netns/{self.netns}"


def _run(*argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30, check=False)
    if check and out.returncode != 0:
        raise OSError(f"{' '.join(argv)}: {(out.stderr or out.stdout).strip()}")
    return out


class PodNetwork:
    """Creates and removes pod network namespaces on this kubesim's bridge, and owns its host firewall."""

    def __init__(self, enabled: bool = True):
        self.id = secrets.token_hex(3)
        self.bridge = f"ksbr{self.id}"
        self.table = f"kubesim_{self.id}"
        self.subnet = ipaddress.ip_network("10.244.0.0/24")
        self.node_ip = LOOPBACK
        self.available = False
        self.reason = "disabled (--no-network-isolation / network=False)"
        self.exposed: set[int] = set()
        self.bridge_filtered = False
        self.pods: dict[str, PodNet] = {}
        self._free: list[str] = []
        self._counter = 0
        self._lock = threading.Lock()
        self._record = RUN_DIR / f"{self.id}.json"
        if not enabled:
            log.warning("pods share this machine's network: %s", self.reason)
            return
        problem = self._missing_tools()
        if problem is None:
            try:
                self._setup()
                self.available, self.reason = True, f"bridge {self.bridge}, pods on {self.subnet}"
                atexit.register(self.close)  # a kubesim never stopped still leaves nothing behind
            except OSError as exc:
                self._teardown()
                problem = f"network namespaces refused: {exc}"
        if problem is not None:
            self.reason = problem
            log.warning(
                "PODS ARE NOT NETWORK-ISOLATED (%s): they share this machine's loopback and reach every "
                "service on it; run kubesim as root with iproute2 and nftables (make sandbox), or pass "
                "--no-network-isolation to silence this",
                problem,
            )
        else:
            log.info("kubesim network: %s, node address %s", self.reason, self.node_ip)

    @staticmethod
    def _missing_tools() -> str | None:
        if os.geteuid() != 0:
            return "kubesim is not running as root"
        for tool in ("ip", "nft", "nsenter"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed"
        return None

    def _setup(self) -> None:
        """Clean up after dead kubesims, claim a free /24 and create the bridge and the firewall."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        with open(RUN_DIR / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            taken = remove_stale()
            taken |= _host_networks()
            subnet = next(
                (s for s in POOL.subnets(new_prefix=24) if not any(s.overlaps(t) for t in taken)), None
            )
            if subnet is None:
                raise OSError("no free /24 left in 10.244.0.0/16")
            self.subnet = subnet
            self.node_ip = str(subnet.network_address + 1)
            identity = process_identity(os.getpid()) or ""
            record = {"pid": os.getpid(), "identity": identity, "subnet": str(subnet), "id": self.id}
            self._record.write_text(json.dumps(record))
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.node_ip}/{subnet.prefixlen}", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        _sysctl(f"net/ipv6/conf/{self.bridge}/disable_ipv6", "1")
        # ClusterIP connections are DNATed to a pod on the same bridge: routed back out of it, no redirects.
        _sysctl(f"net/ipv4/conf/{self.bridge}/forwarding", "1")
        _sysctl(f"net/ipv4/conf/{self.bridge}/send_redirects", "0")
        # kubeadm's preflight demands it too: bridged pod-to-pod traffic passes the inet forward hook.
        if not _sysctl("net/bridge/bridge-nf-call-iptables", "1"):
            _run("modprobe", "br_netfilter", check=False)
            _sysctl("net/bridge/bridge-nf-call-iptables", "1")
        self.bridge_filtered = _read_sysctl("net/bridge/bridge-nf-call-iptables") == "1"
        if not self.bridge_filtered:
            log.warning(
                "br_netfilter is not available: traffic between pods bypasses the firewall, so "
                "NetworkPolicies are NOT enforced and ClusterIPs do not answer (headless Services work)"
            )
        _run("nft", "-f", "-", stdin=self._ruleset())
        self._free = [str(ip) for ip in list(subnet.hosts())[1:]]

    def _ruleset(self) -> str:
        """The host firewall: from the bridge only DNS and the exposed ports of the node address are let in;
        nothing is routed out of the pod network nor into it from elsewhere."""
        br, net, node = self.bridge, self.subnet, self.node_ip
        return f"""
table inet {self.table} {{
  set exposed {{ type inet_service; }}
  chain input {{
    type filter hook input priority -5; policy accept;
    iifname "{br}" ct state established,related accept
    iifname "{br}" ip daddr {node} udp dport 53 accept
    iifname "{br}" ip daddr {node} tcp dport 53 accept
    iifname "{br}" ip daddr {node} tcp dport @exposed accept
    iifname "{br}" drop
  }}
  chain forward {{
    type filter hook forward priority -5; policy accept;
    ip saddr {net} ip daddr {net} jump pods
    ip saddr {net} ip daddr {SERVICE_RANGE} reject with icmpx type port-unreachable
    ip saddr {net} drop
    ip daddr {net} drop
  }}
  chain pods {{
    ct state established,related accept
    accept
  }}
  chain services {{
    type nat hook prerouting priority dstnat; policy accept;
  }}
}}
"""

    def attach(self, uid: str) -> PodNet:
        """Create the pod's namespace with ``eth0`` on the bridge and a default route via the node."""
        with self._lock:
            if uid in self.pods:
                return self.pods[uid]
            if not self._free:
                raise OSError(f"no free pod address left in {self.subnet}")
            ip = self._free.pop(0)
            self._counter += 1
            pod = PodNet(f"ks{self.id}-{uid[:8]}-{self._counter}", f"kv{self.id}{self._counter:05x}", ip)
            self.pods[uid] = pod
        try:
            _run("ip", "netns", "add", pod.netns)
            _run("ip", "link", "add", pod.veth, "type", "veth", "peer", "name", "eth0", "netns", pod.netns)
            _sysctl(f"net/ipv6/conf/{pod.veth}/disable_ipv6", "1")
            _run("ip", "link", "set", pod.veth, "master", self.bridge, "up")
            _run("ip", "-n", pod.netns, "addr", "add", f"{ip}/{self.subnet.prefixlen}", "dev", "eth0")
            _run("ip", "-n", pod.netns, "link", "set", "eth0", "up")
            _run("ip", "-n", pod.netns, "link", "set", "lo", "up")
            _run("ip", "-n", pod.netns, "route", "add", "default", "via", self.node_ip)
        except OSError:
            self.detach(uid)
            raise
        return pod

    def detach(self, uid: str) -> None:
        """Remove the pod's namespace (its veth pair goes with it) and free its address."""
        with self._lock:
            pod = self.pods.pop(uid, None)
        if pod is None:
            return
        _run("ip", "netns", "del", pod.netns, check=False)
        _run("ip", "link", "del", pod.veth, check=False)
        with self._lock:
            self._free.append(pod.ip)

    def expose(self, port: int) -> None:
        """Let pods in to ``node address:port`` (the forwarder to 127.0.0.1:port listens there)."""
        if self.available and port not in self.exposed:
            _run("nft", "add", "element", "inet", self.table, "exposed", f"{{ {int(port)} }}")
        self.exposed.add(port)

    def close(self) -> None:
        """Remove every pod namespace, the bridge, the firewall and the record (once)."""
        for uid in list(self.pods):
            self.detach(uid)
        if self.available:
            self._teardown()
            atexit.unregister(self.close)
        self.available = False

    def _teardown(self) -> None:
        _cleanup(self.id)
        self._record.unlink(missing_ok=True)


def _cleanup(instance: str) -> None:
    """Remove what kubesim instance ``instance`` created: namespaces, bridge (its veths) and table."""
    listing = _run("ip", "netns", "list", check=False).stdout
    for line in listing.splitlines():
        name = line.split(" ", 1)[0]
        if name.startswith(f"ks{instance}-"):
            _run("ip", "netns", "del", name, check=False)
    links = _run("ip", "-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        parts = line.split(": ")
        if len(parts) > 1 and parts[1].split("@", 1)[0].startswith(f"kv{instance}"):
            _run("ip", "link", "del", parts[1].split("@", 1)[0], check=False)
    _run("ip", "link", "del", f"ksbr{instance}", check=False)
    _run("nft", "delete", "table", "inet", f"kubesim_{instance}", check=False)


def remove_stale() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Clean up after every recorded kubesim whose process is gone; return the subnets still in use."""
    taken: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    for record in RUN_DIR.glob("*.json"):
        try:
            data = json.loads(record.read_text())
            pid, identity, subnet = int(data["pid"]), str(data["identity"]), str(data["subnet"])
        except (OSError, ValueError, KeyError):
            record.unlink(missing_ok=True)
            continue
        if process_identity(pid) == identity and identity:
            taken.add(ipaddress.ip_network(subnet))
            continue
        log.warning("removing the pod network of a kubesim that is gone (pid %d, %s)", pid, subnet)
        _cleanup(record.stem)
        record.unlink(missing_ok=True)
    return taken


def _host_networks() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """The IPv4 networks on this machine's interfaces and routes (a pod subnet must not overlap them)."""
    found: set[ipaddress.IPv4Network | ipaddress.IPv6Network] = set()
    for argv in (("ip", "-4", "-o", "addr", "show"), ("ip", "-4", "route", "show")):
        for line in _run(*argv, check=False).stdout.splitlines():
            for word in line.split():
                with contextlib.suppress(ValueError):
                    if "/" in word:
                        found.add(ipaddress.ip_network(word, strict=False))
    return found


def _sysctl(name: str, value: str) -> bool:
    try:
        Path("/proc/sys", name).write_text(value)
    except OSError:
        return False
    return True


def pod_hostname(pod: dict[str, Any]) -> str:
    """The pod's hostname: ``spec.hostname``, else its name (cut to 63 characters, as the kubelet does)."""
    return str(pod["spec"].get("hostname") or pod["metadata"]["name"])[:63].rstrip("-.")


def write_pod_files(folder: Path, pod: dict[str, Any], ip: str, node_ip: str) -> dict[str, str]:
    """Write the pod's /etc/hosts and /etc/resolv.conf as the kubelet does (cluster DNS on the node address,
    the namespace's search path, ``ndots:5``); returns {container path: file}."""
    folder.mkdir(parents=True, exist_ok=True)
    meta, spec = pod["metadata"], pod["spec"]
    namespace, hostname = meta["namespace"], pod_hostname(pod)
    names = [hostname]
    if spec.get("subdomain"):
        names.insert(0, f"{hostname}.{spec['subdomain']}.{namespace}.svc.cluster.local")
    lines = [
        "# Kubernetes-managed hosts file.",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        f"{ip}\t{' '.join(names)}",
    ]
    for alias in spec.get("hostAliases") or []:
        lines.append(
            f"# Entries added by HostAliases.\n{alias.get('ip')}\t{' '.join(alias.get('hostnames') or [])}"
        )
    hosts = folder / "hosts"
    hosts.write_text("\n".join(lines) + "\n")
    search = f"{namespace}.svc.cluster.local svc.cluster.local cluster.local"
    resolv = folder / "resolv.conf"
    resolv.write_text(f"search {search}\nnameserver {node_ip}\noptions ndots:5\n")
    for path in (hosts, resolv):
        path.chmod(0o644)
    return {"/etc/hosts": str(hosts), "/etc/resolv.conf": str(resolv)}


def _read_sysctl(name: str) -> str:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return ""

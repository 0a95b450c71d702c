"""The emulated cluster: store, API, nodes, scheduler, kubelets and controllers, driven by one loop."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubesim import persist, priorityclasses, resources, runtime, storageclasses
from kubesim.api import Api
from kubesim.attach import MAX_WAIT_FOR_UNMOUNT, AttachDetachController
from kubesim.autoscaler import ClusterAutoscaler, NodeGroup
from kubesim.cgroups import CgroupManager
from kubesim.controllers import GarbageCollector, JobController, NamespaceController, QuotaController
from kubesim.disruption import (
    NodeLifecycleController,
    PodGarbageCollector,
    TaintManager,
    evict_pod,
    kubelet_evict,
    set_node_ready,
)
from kubesim.dns import ClusterDNS
from kubesim.faults import Faults, ImagePullRule
from kubesim.forward import Forwarder
from kubesim.housekeeping import PodDirCollector
from kubesim.kubelet import Kubelet
from kubesim.meta import now_iso
from kubesim.netpolicy import PolicyEnforcer
from kubesim.network import HOST_NAME, LOOPBACK, PodNetwork
from kubesim.proxy import ServiceProxy
from kubesim.registries import PrivateRegistries
from kubesim.requestlog import RequestCounter
from kubesim.restart import reboot_node, recover_pods
from kubesim.sandbox import Sandbox
from kubesim.scheduler import Scheduler
from kubesim.store import Obj, Store
from kubesim.throttle import Throttle
from kubesim.volumes import ClaimController

LOCAL_NODE = "kubesim-node"
# The taint GKE puts on every GPU node (``gpu_taints=True``, ``--gpu-taints``).
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
_TICK = 0.05


def local_gpus() -> int:
    """How many GPUs ``nvidia-smi -L`` lists on this machine (0 when there is no nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def total_memory() -> int:
    """Physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def node_body(
    name: str,
    cpu: float,
    memory: int,
    gpus: int = 0,
    simulated: bool = False,
    labels: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
) -> Obj:
    """The Node a kubelet registers: capacity, labels (GPU ones when it has GPUs), Ready, a new boot id."""
    resources_ = {"cpu": str(cpu), "memory": str(memory), "pods": "110", "ephemeral-storage": "100Gi"}
    if gpus:
        resources_["nvidia.com/gpu"] = str(gpus)
    body: Obj = {
        "metadata": {
            "name": name,
            "labels": _node_labels(name, gpus, simulated, labels),
            "annotations": {"kubesim.io/simulated": str(simulated).lower()},
        },
        "spec": {"taints": taints or []},
        "status": _node_status(name, resources_),
    }
    return body


def _node_labels(name: str, gpus: int, simulated: bool, labels: dict[str, str] | None) -> dict[str, str]:
    """The well-known node labels, GPU feature discovery's when the node has GPUs, then the caller's."""
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "kubesim-gpu" if simulated else "kubesim-local",
    }
    if gpus:
        node_labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.product": "Simulated-GPU" if simulated else "Local-GPU",
            }
        )
    node_labels.update(labels or {})
    return node_labels


def _node_status(name: str, resources_: dict[str, str]) -> Obj:
    """A freshly registered node's status: its resources all allocatable, Ready now, and a new boot id
    (what tells a watcher that the node rebooted)."""
    stamp = now_iso()
    return {
        "capacity": dict(resources_),
        "allocatable": dict(resources_),
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        ],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.32.0-kubesim",
            "kubeProxyVersion": "",
            "osImage": "kubesim",
            "operatingSystem": "linux",
            "architecture": "amd64",
            "containerRuntimeVersion": "kubesim://local-processes",
            "kernelVersion": os.uname().release,
            "machineID": "",
            "systemUUID": "",
            "bootID": str(uuid.uuid4()),
        },
    }


def _set_internal_ip(node: Obj, address: str) -> None:
    for entry in node.setdefault("status", {}).setdefault("addresses", []):
        if entry.get("type") == "InternalIP":
            entry["address"] = address


class Cluster:
    """Everything behind the API; ``start()`` runs the control loop in a thread, ``step()`` runs one pass."""

    def __init__(
        self,
        state_dir: Path,
        gpu_nodes: int = 0,
        gpus_per_node: int = 8,
        history_size: int = 10000,
        use_cgroups: bool = True,
        local_gpu_count: int | None = None,
        restart_backoff: float = 1.0,
        bookmark_interval: float = 5.0,
        node_monitor_grace: float = 40.0,
        max_wait_for_unmount: float = MAX_WAIT_FOR_UNMOUNT,
        default_toleration_seconds: int = 300,
        fresh: bool = False,
        gpu_taints: bool = False,
        sandbox: bool = True,
        network: bool = True,
        expose_host_ports: tuple[int | str, ...] | list[int | str] = (),
        node_groups: list[NodeGroup | dict[str, Any]] | None = None,
        scale_up_delay: float = 1.0,
        scale_down_idle: float = 10.0,
        private_registries: Mapping[str, tuple[str, str] | None] | Iterable[str] = (),
    ):
        self.log = logging.getLogger("kubesim")
        self.state_dir = Path(state_dir).resolve()  # pods run in their own folders: no relative paths
        self.state_dir.mkdir(parents=True, exist_ok=True)
        disk = persist.DiskStore(self.state_dir, fresh)
        killed = runtime.kill_leftovers(self.state_dir / "pods")
        if killed:
            self.log.warning("killed %d container processes left by an earlier kubesim", len(killed))
        self.store = Store(history_size, disk)
        self.api = Api(self.store)
        self.api.default_toleration_seconds = default_toleration_seconds
        self.faults = Faults()
        self.registries = PrivateRegistries(private_registries)
        self.requests = RequestCounter()
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.api.after_write.append(self.wake.set)
        self.port = 0
        self.restart_backoff = restart_backoff
        self.bookmark_interval = bookmark_interval
        self.gpu_taints = gpu_taints
        self.sample_interval = 0.5
        self.cgroups = CgroupManager(f"kubesim-{os.getpid()}-{id(self) % 100000}", enabled=use_cgroups)
        # Always on: it skips containers whose CPU cgroup took the limit, and covers any whose did not.
        self.throttle = Throttle(enabled=True)
        self.kubelets: dict[str, Kubelet] = {}
        self.scheduler = Scheduler(self)
        self.policies = PolicyEnforcer(self)
        self.proxy = ServiceProxy(self)
        self.attacher = AttachDetachController(self, max_wait_for_unmount)
        groups = [g if isinstance(g, NodeGroup) else NodeGroup.from_dict(g) for g in node_groups or []]
        self.autoscaler = ClusterAutoscaler(self, groups, scale_up_delay, scale_down_idle)
        self.controllers = self._make_controllers(node_monitor_grace)
        self.loop_lock = threading.RLock()
        self.thread: threading.Thread | None = None
        self.sandbox = Sandbox(self.state_dir, enabled=sandbox)
        self.network = PodNetwork(enabled=network)
        self.dns: ClusterDNS | None = None
        self.forwarders: dict[int, Forwarder] = {}
        if self.network.available:
            self.dns = ClusterDNS(self.store, self.network.node_ip, HOST_NAME)
        for port in expose_host_ports:
            self.expose_host_port(port)
        self._log_enforcement()
        self._bootstrap(
            gpu_nodes, gpus_per_node, local_gpus() if local_gpu_count is None else local_gpu_count
        )

    def _make_controllers(self, node_monitor_grace: float) -> list[Any]:
        """The control loops each pass runs after the scheduler and before the kubelets, in this order."""
        return [
            NamespaceController(self),
            JobController(self),
            GarbageCollector(self),
            QuotaController(self),
            NodeLifecycleController(self, node_monitor_grace),
            TaintManager(self),
            PodGarbageCollector(self),
            ClaimController(self),
            self.attacher,
            PodDirCollector(self),
            self.policies,
            self.proxy,
            self.autoscaler,
        ]

    def _log_enforcement(self) -> None:
        """Say how container limits are enforced here, and warn where only an approximation is possible."""
        self.log.info("kubesim limits enforcement: %s", self.cgroups.describe())
        if not self.cgroups.memory_enforced:
            self.log.warning("memory cgroups not writable: memory limits enforced by polling RSS (coarse)")
        if not self.cgroups.cpu_enforced:
            self.log.warning(
                "cpu cgroups not writable: cpu limits approximated by SIGSTOP/SIGCONT duty cycling"
            )

    @property
    def node_ip(self) -> str:
        """Every node's InternalIP and the pods' hostIP: the bridge's address (127.0.0.1 without isolation)."""
        return self.network.node_ip

    def expose_host_port(self, port: int | str, host_port: int | None = None) -> None:
        """Let pods reach ``127.0.0.1:host_port`` of this machine at ``<node address>:port``
        (``host.kubesim.internal``), as a cluster reaches an outside service: a forwarder listens there and
        the firewall lets pods in to that port only. ``port`` may be ``"POD_PORT:HOST_PORT"``; ``host_port``
        defaults to ``port``, so pods of two kubesims (two bridges) can see their own service at one port.
        Without network isolation pods reach 127.0.0.1 directly, so only the same port works there."""
        if isinstance(port, str) and ":" in port:
            pod_side, host_side = port.split(":", 1)
            port, host_port = int(pod_side), int(host_side)
        port = int(port)
        host_port = port if host_port is None else int(host_port)
        if not self.network.available or port in self.forwarders:
            return
        self.forwarders[port] = Forwarder((self.network.node_ip, port), (LOOPBACK, host_port))
        self.network.expose(port)

    @property
    def sandboxed(self) -> bool:
        """Whether containers run in their own mount and PID namespaces (``sandbox.reason`` says why not)."""
        return self.sandbox.available

    def _bootstrap(self, gpu_nodes: int, gpus_per_node: int, local_gpu_count: int) -> None:
        """Create what a new cluster has; on a stored one, create only what is missing, bring the stored
        nodes back (``kubesim.restart``) and report the pods that were running on them."""
        ns = resources.find("", "v1", "namespaces")
        assert ns is not None
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            if self.store.peek("namespaces", "", name) is None:
                self.api.create(ns, None, {"metadata": {"name": name}})
        sc = resources.find("storage.k8s.io", "v1", storageclasses.PLURAL)
        assert sc is not None
        for body in storageclasses.bootstrap_classes():
            if self.store.peek(storageclasses.PLURAL, "", body["metadata"]["name"]) is None:
                self.api.create(sc, None, body)
        pc = resources.find(priorityclasses.GROUP, "v1", priorityclasses.PLURAL)
        assert pc is not None
        for body in priorityclasses.bootstrap_classes():
            if self.store.peek(priorityclasses.PLURAL, "", body["metadata"]["name"]) is None:
                self.api.create(pc, None, body)
        wanted = {LOCAL_NODE: node_body(LOCAL_NODE, os.cpu_count() or 1, total_memory(), local_gpu_count)}
        for i in range(gpu_nodes):
            name = f"kubesim-gpu-{i}"
            wanted[name] = node_body(name, 32, 256 * 2**30, gpus_per_node, simulated=True)
        for node in list(self.store.list("nodes")[0]):
            name = node["metadata"]["name"]
            reboot_node(self, name, wanted.get(name))
            self.api.mutate("nodes", "", name, lambda n: _set_internal_ip(n, self.node_ip))
        for name, body in wanted.items():
            if name not in self.kubelets:
                self._register(body)
        recover_pods(self)

    def add_node(
        self,
        name: str,
        cpu: float,
        memory: int,
        gpus: int = 0,
        simulated: bool = False,
        labels: dict[str, str] | None = None,
        taints: list[Obj] | None = None,
    ) -> Obj:
        """Register a node (and its kubelet) with the given allocatable resources."""
        return self._register(node_body(name, cpu, memory, gpus, simulated, labels, taints))

    def _register(self, body: Obj) -> Obj:
        """Create the Node and its kubelet; with ``gpu_taints`` a GPU node also gets GKE's
        ``nvidia.com/gpu=present:NoSchedule`` taint."""
        res = resources.find("", "v1", "nodes")
        assert res is not None
        gpus = int(body["status"]["capacity"].get("nvidia.com/gpu", 0))
        runtime_version = "kubesim://bubblewrap" if self.sandboxed else "kubesim://local-processes"
        body["status"]["nodeInfo"]["containerRuntimeVersion"] = runtime_version
        _set_internal_ip(body, self.node_ip)
        taints = body.setdefault("spec", {}).setdefault("taints", [])
        if gpus and self.gpu_taints and not any(t.get("key") == GPU_TAINT["key"] for t in taints):
            taints.append(dict(GPU_TAINT))
        with self.loop_lock:
            node = self.api.create(res, None, body)
            self.kubelets[node["metadata"]["name"]] = Kubelet(self, node["metadata"]["name"], gpus)
        return node

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Stop the node's heartbeat (``ready=False``: after the node-monitor grace period it becomes
        Ready=Unknown and tainted unreachable, its pods not Ready and then deleted once their toleration runs
        out, staying Terminating while no kubelet confirms) or restart it (see ``kubesim.disruption``)."""
        set_node_ready(self, name, ready)

    def lose_node(self, name: str) -> None:
        """The node is deleted (its machine gone): its processes die, the Node object goes, and pod GC then
        marks its pods Failed (DisruptionTarget DeletionByPodGC) and force-deletes them."""
        with self.loop_lock:
            self.kubelets.pop(name).shutdown()
            self.store.remove("nodes", "", name)
            self.api._notify()

    def evict_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """What ``POST .../pods/NAME/eviction`` does: the pod stops gracefully and ends Failed/Evicted."""
        options = {} if grace_period_seconds is None else {"gracePeriodSeconds": grace_period_seconds}
        evict_pod(self, namespace, name, {"kind": "Eviction", "deleteOptions": options})

    def kubelet_evict(self, namespace: str, name: str, message: str | None = None) -> None:
        """Evict a running pod as its kubelet does under node pressure: killed, Failed with reason Evicted."""
        kubelet_evict(self, namespace, name, *(() if message is None else (message,)))

    def fail_image_pulls(self, image_pattern: str, message: str | None = None) -> ImagePullRule:
        """Containers whose image matches the regex stay waiting (ErrImagePull, then ImagePullBackOff)."""
        rule = ImagePullRule(image_pattern) if message is None else ImagePullRule(image_pattern, message)
        return self.faults.fail_image_pulls(rule)

    def clear_image_pull_failures(self, rule_id: int | None = None) -> None:
        """Let images pull again (one rule, or all); waiting containers start at their next retry."""
        self.faults.clear_image_pulls(rule_id)

    def pause_kubelets(self, paused: bool = True) -> None:
        """Freeze (or resume) every kubelet: no pod starts, status updates or terminations meanwhile."""
        for kubelet in self.kubelets.values():
            kubelet.paused = paused

    def step(self) -> None:
        """Run one pass of the scheduler, controllers and kubelets."""
        with self.loop_lock:
            self.scheduler.step()
            for controller in self.controllers:
                controller.step()
            for kubelet in list(self.kubelets.values()):
                kubelet.step()

    def _loop(self) -> None:
        last_full = 0.0
        seen_rv = -1
        while not self.stopping.is_set():
            self.wake.wait(_TICK)
            self.wake.clear()
            if self.stopping.is_set():
                break
            try:
                now = time.monotonic()
                if self.store.rv != seen_rv or now - last_full > 1.0:
                    seen_rv = self.store.rv
                    last_full = now
                    with self.loop_lock:
                        self.scheduler.step()
                        for controller in self.controllers:
                            controller.step()
                with self.loop_lock:
                    for kubelet in list(self.kubelets.values()):
                        kubelet.step()
            except Exception:
                self.log.exception("control loop error")

    def start(self) -> None:
        """Run the control loop in a background thread."""
        self.thread = threading.Thread(target=self._loop, name="kubesim-loop", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the loop, kill every pod process and remove kubesim's cgroups."""
        self.stopping.set()
        self.wake.set()
        self.store.close()
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.throttle.stop()
        with self.loop_lock:
            for kubelet in list(self.kubelets.values()):
                kubelet.shutdown()
        for forwarder in self.forwarders.values():
            forwarder.stop()
        if self.dns is not None:
            self.dns.stop()
        self.network.close()
        self.cgroups.cleanup()
        self.store.close_disk()

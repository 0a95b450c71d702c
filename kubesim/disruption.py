"""Disruptions: node heartbeats and the node lifecycle controller, the taint manager, pod GC of pods whose
node is gone, the Eviction API and the kubelet's own (node-pressure) evictions.

A real control plane notices an unreachable node when its kubelet stops posting heartbeats: after the
node-monitor grace period its Ready condition becomes Unknown, it is tainted ``node.kubernetes.io/unreachable``
(NoSchedule and NoExecute) and its pods are marked not Ready. The taint manager then deletes each pod once its
toleration of the NoExecute taint runs out (300 s by default, from the DefaultTolerationSeconds admission that
``validation.default_pod`` applies). No kubelet confirms those deletions, so the pods stay Terminating until
the node comes back or is deleted (then pod GC force-deletes them). kubesim does the same so that platform code
sees what a real cluster would show it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kubesim import resources
from kubesim.errors import ApiError, bad_request, conflict, not_found
from kubesim.meta import now_iso
from kubesim.podstatus import set_condition
from kubesim.scheduler import matching_toleration
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
_TERMINAL = ("Succeeded", "Failed")


def set_node_ready(cluster: Cluster, name: str, ready: bool) -> None:
    """Stop (``ready=False``) or restart the node's heartbeat. The node lifecycle controller reacts as a real
    one does: Ready=Unknown and the unreachable taints once the monitor grace period has passed without a
    heartbeat, and Ready=True without them once heartbeats come back."""
    with cluster.loop_lock:
        kubelet = cluster.kubelets[name]
        kubelet.unreachable = not ready
        if ready:
            kubelet.last_heartbeat = time.monotonic()
    cluster.wake.set()


def _delete_pod(
    cluster: Cluster, pod: Obj, condition: tuple[str, str], options: Obj | None = None, fail: bool = False
) -> None:
    """Add a DisruptionTarget condition (reason, message) to a pod — and, with ``fail``, phase Failed in the
    same write, as pod GC does — then delete it through the API's graceful path (the pod's own grace period
    unless ``options`` say otherwise)."""
    meta = pod["metadata"]
    reason, message = condition

    def apply(p: Obj) -> None:
        status = p.setdefault("status", {})
        set_condition(status, "DisruptionTarget", True, reason, message)
        if fail and status.get("phase") not in _TERMINAL:
            status["phase"] = "Failed"

    cluster.api.mutate("pods", meta["namespace"], meta["name"], apply)
    pods = resources.find("", "v1", "pods")
    assert pods is not None
    try:
        cluster.api.delete(pods, meta["namespace"], meta["name"], options or {})
    except ApiError as exc:
        if exc.code != 404:
            raise


class NodeLifecycleController:
    """Marks nodes whose kubelet stopped posting heartbeats Unknown and taints them; undoes it when they return.

    ``monitor_grace`` is kube-controller-manager's ``--node-monitor-grace-period`` (40 s by default there).
    """

    def __init__(self, cluster: Cluster, monitor_grace: float = 40.0):
        self.cluster = cluster
        self.monitor_grace = monitor_grace

    def step(self) -> None:
        """Compare every node's last heartbeat with the grace period and update it if its health changed."""
        now = time.monotonic()
        for name, kubelet in list(self.cluster.kubelets.items()):
            node = self.cluster.store.peek("nodes", "", name)
            if node is None:
                continue
            ready: Obj = next((c for c in node["status"]["conditions"] if c["type"] == "Ready"), {})
            alive = now - kubelet.last_heartbeat <= self.monitor_grace
            if alive and ready.get("status") == "Unknown":
                self._mark(name, True)
                kubelet.resync()
            elif not alive and ready.get("status") == "True":
                self._mark(name, False)

    def _mark(self, name: str, ready: bool) -> None:
        stamp = now_iso()

        def apply(node: Obj) -> None:
            for cond in node["status"]["conditions"]:
                if cond["type"] != "Ready":
                    continue
                cond.update(
                    status="True" if ready else "Unknown",
                    reason="KubeletReady" if ready else "NodeStatusUnknown",
                    message="kubelet is posting ready status"
                    if ready
                    else "Kubelet stopped posting node status.",
                    lastTransitionTime=stamp,
                )
                if ready:
                    cond["lastHeartbeatTime"] = stamp
            spec = node.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE]
            if not ready:
                taints += [
                    {"key": UNREACHABLE, "effect": e, "timeAdded": stamp} for e in ("NoSchedule", "NoExecute")
                ]
            spec["taints"] = taints

        node = self.cluster.api.mutate("nodes", "", name, apply)
        if node is not None:
            self.cluster.api.record_event(
                node,
                "Normal",
                "NodeReady" if ready else "NodeNotReady",
                f"Node {name} status is now: {'NodeReady' if ready else 'NodeNotReady'}",
                "node-controller",
            )
        if ready:
            return
        for pod in self.cluster.kubelets[name].bound_pods():
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                continue
            meta = pod["metadata"]
            self.cluster.api.mutate(
                "pods",
                meta["namespace"],
                meta["name"],
                lambda p: set_condition(p.setdefault("status", {}), "Ready", False, ""),
            )
            self.cluster.api.record_event(
                pod, "Warning", "NodeNotReady", "Node is not ready", "node-controller"
            )


class PodGarbageCollector:
    """Pod GC of orphans: a pod bound to a node that no longer exists is marked Failed with DisruptionTarget
    (DeletionByPodGC) and force-deleted, as kube-controller-manager's podgc does."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def step(self) -> None:
        """Force-delete every pod whose node is gone."""
        store = self.cluster.store
        nodes = {n["metadata"]["name"] for n in store.list("nodes")[0]}
        orphans = [
            p for p in store.list("pods")[0] if (p.get("spec") or {}).get("nodeName") not in (None, *nodes)
        ]
        for pod in orphans:
            gone = ("DeletionByPodGC", "PodGC: node no longer exists")
            _delete_pod(self.cluster, pod, gone, {"gracePeriodSeconds": 0}, fail=True)


class TaintManager:
    """Evicts pods from nodes with NoExecute taints once their tolerationSeconds have run out."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.first_seen: dict[tuple[str, str, str], float] = {}

    def step(self) -> None:
        """Evict every pod whose toleration of a NoExecute taint on its node has expired."""
        store = self.cluster.store
        now = time.time()
        live: set[tuple[str, str, str]] = set()
        tainted: dict[str, list[tuple[Obj, float]]] = {}
        for node in store.list("nodes")[0]:
            name = node["metadata"]["name"]
            for taint in (node.get("spec") or {}).get("taints") or []:
                if taint.get("effect") != "NoExecute":
                    continue
                key = (name, taint.get("key", ""), taint.get("value", ""))
                live.add(key)
                tainted.setdefault(name, []).append((taint, self.first_seen.setdefault(key, now)))
        self.first_seen = {k: v for k, v in self.first_seen.items() if k in live}
        if not tainted:
            return
        for pod in store.list("pods")[0]:
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name not in tainted or (pod.get("status") or {}).get("phase") in _TERMINAL:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            for taint, since in tainted[node_name]:
                toleration = matching_toleration(pod, taint)
                if toleration is not None and toleration.get("tolerationSeconds") is None:
                    continue
                grace = max(float(toleration["tolerationSeconds"]), 0.0) if toleration else 0.0
                if now >= since + grace:
                    self._evict(node_name, pod, taint)
                    break

    def _evict(self, node_name: str, pod: Obj, taint: Obj) -> None:
        meta = pod["metadata"]
        self.cluster.api.record_event(
            pod,
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {meta['namespace']}/{meta['name']}",
            "taint-eviction-controller",
        )
        _delete_pod(
            self.cluster, pod, ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
        )


def evict_pod(cluster: Cluster, namespace: str, name: str, body: Obj | None = None) -> None:
    """POST .../pods/NAME/eviction: a DisruptionTarget condition (EvictionByEvictionAPI), then the same
    graceful delete as ``DELETE`` (``deleteOptions`` honoured). There are no PodDisruptionBudgets, so an
    eviction is never refused with 429."""
    body = body or {}
    if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
        raise bad_request("the body of an eviction must be a policy/v1 Eviction")
    options = body.get("deleteOptions") or {}
    with cluster.store.lock:
        pod = cluster.store.peek("pods", namespace, name)
        if pod is None:
            raise not_found("pods", name)
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            raise conflict("pods", name)
        if pod["metadata"].get("deletionTimestamp"):
            return
        _delete_pod(cluster, pod, ("EvictionByEvictionAPI", "Eviction API: evicting"), options)


NODE_PRESSURE = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 42Mi. "


def kubelet_evict(cluster: Cluster, namespace: str, name: str, message: str = NODE_PRESSURE) -> None:
    """Evict a running pod as its kubelet does under node pressure (a hard threshold): a Warning ``Evicted``
    Event, its containers killed at once, then in one status write phase ``Failed``, reason ``Evicted``, the
    eviction message and DisruptionTarget reason ``TerminationByKubelet``; the pod is not deleted (the
    kubelet deletes nothing; its owner or pod GC does later)."""
    with cluster.loop_lock:  # between two passes of the kubelets
        pod = cluster.store.peek("pods", namespace, name)
        if pod is None:
            raise not_found("pods", name)
        kubelet = cluster.kubelets.get((pod.get("spec") or {}).get("nodeName") or "")
        if kubelet is None or pod["metadata"]["uid"] not in kubelet.pods:
            raise bad_request(f"pod {namespace}/{name} is not running on a kubelet")

        cluster.api.record_event(pod, "Warning", "Evicted", message, "kubelet")
        kubelet.evicting[pod["metadata"]["uid"]] = message
    cluster.wake.set()

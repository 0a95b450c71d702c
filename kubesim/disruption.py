"""Disruptions: NotReady nodes and the taint manager that evicts their pods, and the Eviction API.

A real control plane marks an unreachable node's Ready condition Unknown, taints it
``node.kubernetes.io/unreachable`` (NoSchedule and NoExecute), marks its pods not Ready, and evicts each pod
once its toleration of the NoExecute taint runs out (300 s by default, from the DefaultTolerationSeconds
admission that ``validation.default_pod`` applies). kubesim does the same so that platform code sees the
disruption a real cluster would show it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kubesim import resources
from kubesim.api import now_iso
from kubesim.errors import bad_request, conflict, not_found
from kubesim.kubelet import EVICTION_DEADLINE
from kubesim.podstatus import set_condition
from kubesim.scheduler import matching_toleration
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
_TERMINAL = ("Succeeded", "Failed")


def set_node_ready(cluster: Cluster, name: str, ready: bool) -> None:
    """NotReady: Ready=Unknown, unreachable taints, pods not Ready, the kubelet silent. Ready undoes it."""
    with cluster.loop_lock:
        kubelet = cluster.kubelets[name]
        stamp = now_iso()

        def apply(node: Obj) -> None:
            for cond in node["status"]["conditions"]:
                if cond["type"] != "Ready":
                    continue
                wanted = "True" if ready else "Unknown"
                if cond["status"] != wanted:
                    cond["lastTransitionTime"] = stamp
                cond.update(
                    status=wanted,
                    reason="KubeletReady" if ready else "NodeStatusUnknown",
                    message="kubelet is posting ready status"
                    if ready
                    else "Kubelet stopped posting node status.",
                    lastHeartbeatTime=stamp,
                )
            spec = node.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE]
            if not ready:
                taints += [
                    {"key": UNREACHABLE, "effect": e, "timeAdded": stamp} for e in ("NoSchedule", "NoExecute")
                ]
            spec["taints"] = taints

        node = cluster.api.mutate("nodes", "", name, apply)
        if node is not None:
            cluster.api.record_event(
                node,
                "Normal",
                "NodeReady" if ready else "NodeNotReady",
                f"Node {name} status is now: {'NodeReady' if ready else 'NodeNotReady'}",
                "node-controller",
            )
        if ready:
            kubelet.unreachable = False
            kubelet.resync()
            return
        kubelet.unreachable = True
        for pod in kubelet.bound_pods():
            if (pod.get("status") or {}).get("phase") in _TERMINAL:
                continue
            meta = pod["metadata"]
            cluster.api.mutate(
                "pods",
                meta["namespace"],
                meta["name"],
                lambda p: set_condition(p.setdefault("status", {}), "Ready", False, ""),
            )
            cluster.api.record_event(pod, "Warning", "NodeNotReady", "Node is not ready", "node-controller")


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
        kubelet = self.cluster.kubelets.get(node_name)
        if kubelet is None:
            return
        if taint.get("key") in (UNREACHABLE, NOT_READY):
            reason = "NodeLost"
            message = f"Node {node_name} which was running pod {pod['metadata']['name']} is unresponsive"
        else:
            reason, message = "Evicted", f"Pod was evicted by the taint {taint.get('key')}:NoExecute"
        kubelet.fail_pods(
            {pod["metadata"]["uid"]},
            reason,
            message,
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        self.cluster.api.record_event(
            pod,
            "Normal",
            "TaintManagerEviction",
            f"Marking for deletion Pod {pod['metadata']['namespace']}/{pod['metadata']['name']}",
            "taint-eviction-controller",
        )


def evict_pod(cluster: Cluster, namespace: str, name: str, body: Obj | None = None) -> None:
    """POST .../pods/NAME/eviction: DisruptionTarget (EvictionByEvictionAPI), then a graceful stop that
    ends the pod Failed with reason Evicted. The pod object stays (unlike the apiserver, which deletes it)
    so that its final status can be read; a pod that never ran is simply deleted."""
    body = body or {}
    if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
        raise bad_request("the body of an eviction must be a policy/v1 Eviction")
    options = body.get("deleteOptions") or {}
    pods = resources.find("", "v1", "pods")
    assert pods is not None
    with cluster.store.lock:
        pod = cluster.store.peek("pods", namespace, name)
        if pod is None:
            raise not_found("pods", name)
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            raise conflict("pods", name)
        if pod["metadata"].get("deletionTimestamp") or EVICTION_DEADLINE in (
            pod["metadata"].get("annotations") or {}
        ):
            return
        if not pod["spec"].get("nodeName") or (pod.get("status") or {}).get("phase") in _TERMINAL:
            cluster.api.delete(pods, namespace, name, options)
            return
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)

        def apply(p: Obj) -> None:
            annotations = p["metadata"].setdefault("annotations", {})
            annotations[EVICTION_DEADLINE] = str(time.time() + float(grace))
            set_condition(
                p.setdefault("status", {}),
                "DisruptionTarget",
                True,
                "EvictionByEvictionAPI",
                "Eviction API: evicting",
            )

        cluster.api.mutate("pods", namespace, name, apply)

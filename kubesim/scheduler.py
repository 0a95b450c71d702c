"""The scheduler: binds pending pods to nodes whose free allocatable resources fit their requests."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kubesim.admission import TERMINAL, pod_requests
from kubesim.podstatus import set_condition as _set_condition
from kubesim.quantity import parse_quantity
from kubesim.store import Obj
from kubesim.volumes import PLURAL as PVCS
from kubesim.volumes import claim_problem

if TYPE_CHECKING:
    from kubesim.cluster import Cluster


def node_ready(node: Obj) -> bool:
    """Whether the node's Ready condition is True."""
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def matching_toleration(pod: Obj, taint: Obj) -> Obj | None:
    """The pod's first toleration of a node taint (operator Exists or Equal, empty effect matches all)."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint.get("key")):
            return tol
        if tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return tol
    return None


def tolerates(pod: Obj, taint: Obj) -> bool:
    """Whether a pod tolerates a node taint."""
    return matching_toleration(pod, taint) is not None


def _affinity_ok(pod: Obj, labels: dict[str, str]) -> bool:
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:
        ok = True
        for expr in term.get("matchExpressions") or []:
            value, values, op = labels.get(expr["key"]), expr.get("values") or [], expr["operator"]
            if (
                (op == "In" and value not in values)
                or (op == "NotIn" and value in values)
                or (op == "Exists" and value is None)
                or (op == "DoesNotExist" and value is not None)
            ):
                ok = False
        if ok:
            return True
    return False


class Scheduler:
    """Binds pods in creation order; unschedulable pods are retried only when cluster capacity changes."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.unschedulable: dict[str, Any] = {}

    def step(self) -> None:
        """One scheduling pass over all pending, unbound pods."""
        store = self.cluster.store
        pods, _ = store.list("pods")
        nodes, _ = store.list("nodes")
        used: dict[str, Counter[str]] = {n["metadata"]["name"]: Counter() for n in nodes}
        pending = []
        for pod in pods:
            node_name = pod["spec"].get("nodeName")
            if node_name:
                if node_name in used and (pod.get("status") or {}).get("phase") not in TERMINAL:
                    used[node_name].update(pod_requests(pod))
                    used[node_name]["pods"] += 1
            elif not pod["metadata"].get("deletionTimestamp") and pod["spec"].get("schedulerName") in (
                None,
                "default-scheduler",
            ):
                pending.append(pod)
        claims = tuple(
            (c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["resourceVersion"])
            for c in store.list(PVCS)[0]
        )
        signature = (
            tuple((n["metadata"]["name"], n["metadata"]["resourceVersion"]) for n in nodes),
            tuple(sorted((k, tuple(sorted(v.items()))) for k, v in used.items())),
            claims,
        )
        pending.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["resourceVersion"]))
        for pod in pending:
            uid = pod["metadata"]["uid"]
            if self.unschedulable.get(uid) == signature:
                continue
            problem = claim_problem(store, pod)
            chosen, reasons = (None, Counter({problem: -1})) if problem else self._pick(pod, nodes, used)
            if chosen is None:
                self._unschedulable(pod, reasons, len(nodes))
                self.unschedulable[uid] = signature
                continue
            self.unschedulable.pop(uid, None)
            used[chosen].update(pod_requests(pod))
            used[chosen]["pods"] += 1
            self._bind(pod, chosen)
            signature = (
                signature[0],
                tuple(sorted((k, tuple(sorted(v.items()))) for k, v in used.items())),
                claims,
            )
        live = {p["metadata"]["uid"] for p in pending}
        for uid in list(self.unschedulable):
            if uid not in live:
                del self.unschedulable[uid]

    def _pick(
        self, pod: Obj, nodes: list[Obj], used: dict[str, Counter[str]]
    ) -> tuple[str | None, Counter[str]]:
        reasons: Counter[str] = Counter()
        requests = pod_requests(pod)
        selector = pod["spec"].get("nodeSelector") or {}
        best: tuple[Decimal, str] | None = None
        for node in nodes:
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            if not node_ready(node) or (node.get("spec") or {}).get("unschedulable"):
                reasons["node(s) were unschedulable or not ready"] += 1
                continue
            taints = [
                t
                for t in (node.get("spec") or {}).get("taints") or []
                if t.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, t)
            ]
            if taints:
                reasons[
                    f"node(s) had untolerated taint {{{taints[0]['key']}: {taints[0].get('value', '')}}}"
                ] += 1
                continue
            if any(labels.get(k) != v for k, v in selector.items()) or not _affinity_ok(pod, labels):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                continue
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            short = [
                r
                for r, amount in [*list(requests.items()), ("pods", Decimal(1))]
                if amount > 0 and used[name][r] + amount > parse_quantity(allocatable.get(r, 0))
            ]
            if short:
                for r in short:
                    reasons[f"Insufficient {r}"] += 1
                continue
            gpu_free = parse_quantity(allocatable.get("nvidia.com/gpu", 0)) - used[name]["nvidia.com/gpu"]
            score = (gpu_free if requests.get("nvidia.com/gpu") else -gpu_free, name)
            if best is None or score < best:
                best = score
        return (best[1] if best else None), reasons

    def _unschedulable(self, pod: Obj, reasons: Counter[str], node_count: int) -> None:
        # A volume problem (count -1) is a PreFilter failure: the scheduler names it without a node count.
        detail = ", ".join(r if n < 0 else f"{n} {r}" for r, n in sorted(reasons.items()))
        message = f"0/{node_count} nodes are available: {detail}." if detail else "no nodes available"
        meta = pod["metadata"]

        def apply(p: Obj) -> None:
            _set_condition(p.setdefault("status", {}), "PodScheduled", False, "Unschedulable", message)
            for cond in p["status"]["conditions"]:
                if cond["type"] == "PodScheduled":
                    cond["message"] = message

        self.cluster.api.mutate("pods", meta["namespace"], meta["name"], apply)
        self.cluster.api.record_event(pod, "Warning", "FailedScheduling", message, "default-scheduler")

    def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]

        def apply(p: Obj) -> None:
            p["spec"]["nodeName"] = node
            _set_condition(p.setdefault("status", {}), "PodScheduled", True, "")

        self.cluster.api.mutate("pods", meta["namespace"], meta["name"], apply)
        self.cluster.api.record_event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
            "default-scheduler",
        )

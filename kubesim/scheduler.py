"""The scheduler: binds pending pods to nodes whose free allocatable resources fit their requests.

It filters nodes as kube-scheduler's default plugins do (cordon, taints, node selector and required node
affinity, resources) and words a pod it cannot place as kube-scheduler v1.32 does, preemption verdict
included. Pods with ``spec.nodeName`` never reach it: the kubelet admits or rejects them
(``kubesim.nodeadmit``).
"""

from __future__ import annotations

import time
from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kubesim.admission import TERMINAL, pod_requests
from kubesim.podstatus import set_condition as _set_condition
from kubesim.quantity import parse_quantity
from kubesim.storageclasses import SELECTED_NODE
from kubesim.store import Obj
from kubesim.volumes import PLURAL as PVCS
from kubesim.volumes import claim_problem, unbound_claims

if TYPE_CHECKING:
    from kubesim.cluster import Cluster


UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
# How long a pod waits in VolumeBinding's PreBind for its WaitForFirstConsumer claims (kube-scheduler's default).
BIND_TIMEOUT = 600.0


def _toleration_matches(tol: Obj, taint: Obj) -> bool:
    """``Toleration.ToleratesTaint``: an empty effect or key matches any, ``Exists`` ignores the value and an
    empty operator means ``Equal``."""
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    operator = tol.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")


def matching_toleration(pod: Obj, taint: Obj) -> Obj | None:
    """The pod's first toleration of a node taint."""
    for tol in (pod.get("spec") or {}).get("tolerations") or []:
        if _toleration_matches(tol, taint):
            return tol
    return None


def tolerates(pod: Obj, taint: Obj) -> bool:
    """Whether a pod tolerates a node taint."""
    return matching_toleration(pod, taint) is not None


def untolerated_taint(pod: Obj, node: Obj, effects: tuple[str, ...]) -> Obj | None:
    """The node's first taint with one of ``effects`` that the pod does not tolerate."""
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in effects and not tolerates(pod, taint):
            return taint
    return None


def _requirement_ok(expr: Obj, value: str | None) -> bool:
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_ok(term: Obj, node: Obj) -> bool:
    """A node selector term: all its expressions (labels) and fields (``metadata.name``) hold; an empty
    term matches no node."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    fields_of = {"metadata.name": node["metadata"]["name"]}
    return all(_requirement_ok(e, labels.get(e.get("key", ""))) for e in expressions) and all(
        _requirement_ok(f, fields_of.get(f.get("key", ""))) for f in fields
    )


def node_affinity_ok(pod: Obj, node: Obj) -> bool:
    """Whether the node matches the pod's ``nodeSelector`` and required node affinity (any of its terms)."""
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(_term_ok(term, node) for term in required.get("nodeSelectorTerms") or [])


def insufficient(
    requests: dict[str, Decimal], used: Counter[str], allocatable: Obj
) -> list[tuple[str, Decimal, Decimal]]:
    """The resources a pod does not fit in, in NodeResourcesFit's order (pods, cpu, memory, then the rest),
    as ``(name, used, capacity)``; the pod itself counts as one pod."""
    order = ["pods", "cpu", "memory", "ephemeral-storage"]
    names = order + sorted(r for r in requests if r not in order)
    wanted = {**requests, "pods": Decimal(1)}
    short = []
    for name in names:
        amount = wanted.get(name, Decimal(0))
        capacity = parse_quantity(allocatable.get(name, 0))
        if amount > 0 and used[name] + amount > capacity:
            short.append((name, Decimal(used[name]), capacity))
    return short


def fit_message(
    node_count: int, reasons: Counter[str], resolvable: int, pre_filter: str | None, pod: Obj
) -> str:
    """The scheduler's FitError text: reasons per node (``N reason``, sorted as strings) or a PreFilter
    message, then what preemption found for the ``resolvable`` nodes (those only short of room) and the
    rest. kubesim never preempts: all its pods have the same priority, so no node has victims."""
    if node_count == 0:
        return "no nodes available to schedule pods"
    message = f"0/{node_count} nodes are available:"
    if pre_filter:
        message += f" {pre_filter}."
    elif reasons:
        message += " " + ", ".join(sorted(f"{n} {r}" for r, n in reasons.items())) + "."
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return message + " preemption: not eligible due to preemptionPolicy=Never."
    verdicts = Counter({NO_VICTIMS: resolvable, NOT_HELPFUL: node_count - resolvable})
    histogram = ", ".join(sorted(f"{n} {r}" for r, n in verdicts.items() if n))
    return f"{message} preemption: 0/{node_count} nodes are available: {histogram}."


def _usage_signature(used: dict[str, Counter[str]]) -> tuple[Any, ...]:
    """Each node's usage as a sorted, hashable value, part of what makes an unschedulable pod worth a retry."""
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in used.items()))


class Scheduler:
    """Binds pods in creation order; unschedulable pods are retried only when cluster capacity changes.

    A pod with WaitForFirstConsumer claims is assumed on the node picked for it (its requests reserved there)
    while the claims are provisioned for that node, and bound once they all are, as VolumeBinding's PreBind
    waits; ``assumed`` holds those pods (node, since when).
    """

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.unschedulable: dict[str, Any] = {}
        self.assumed: dict[str, tuple[str, float]] = {}

    def step(self) -> None:
        """One scheduling pass over all pending, unbound pods."""
        store = self.cluster.store
        pods, _ = store.list("pods")
        nodes, _ = store.list("nodes")
        used, pending = self._usage_and_pending(pods, nodes)
        claims = tuple(
            (c["metadata"]["namespace"], c["metadata"]["name"], c["metadata"]["resourceVersion"])
            for c in store.list(PVCS)[0]
        )
        node_versions = tuple((n["metadata"]["name"], n["metadata"]["resourceVersion"]) for n in nodes)
        signature = (node_versions, _usage_signature(used), claims)
        pending.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["resourceVersion"]))
        for pod in pending:
            if self._schedule(pod, nodes, used, signature):
                signature = (node_versions, _usage_signature(used), claims)
        live = {p["metadata"]["uid"] for p in pending}
        for uid in list(self.unschedulable):
            if uid not in live:
                del self.unschedulable[uid]
        self.assumed = {uid: held for uid, held in self.assumed.items() if uid in live}

    def _usage_and_pending(
        self, pods: list[Obj], nodes: list[Obj]
    ) -> tuple[dict[str, Counter[str]], list[Obj]]:
        """What each node has in use (its running pods' requests and the pods assumed on it), and the
        pods this scheduler is to place: unbound, not being deleted, with no other scheduler named."""
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
        for pod in pending:
            node_name = self.assumed.get(pod["metadata"]["uid"], ("", 0.0))[0]
            if node_name in used:
                used[node_name].update(pod_requests(pod))
                used[node_name]["pods"] += 1
        return used, pending

    def _schedule(self, pod: Obj, nodes: list[Obj], used: dict[str, Counter[str]], signature: Any) -> bool:
        """Place one pending pod, reserving its requests in `used`; tell whether it was placed.

        An assumed pod only waits for its claims. A pod found unschedulable under the same `signature`
        (nodes, usage, claims) is not tried again until something in it changes.
        """
        store = self.cluster.store
        uid = pod["metadata"]["uid"]
        if uid in self.assumed:
            self._await_volumes(pod)
            return False
        if self.unschedulable.get(uid) == signature:
            return False
        problem = claim_problem(store, pod)
        chosen, reasons, resolvable = (None, Counter[str](), 0) if problem else self._pick(pod, nodes, used)
        if chosen is None:
            self._unschedulable(pod, fit_message(len(nodes), reasons, resolvable, problem, pod))
            self.unschedulable[uid] = signature
            return False
        self.unschedulable.pop(uid, None)
        used[chosen].update(pod_requests(pod))
        used[chosen]["pods"] += 1
        if unbound_claims(store, pod):
            self._assume(pod, chosen)
        else:
            self._bind(pod, chosen)
        return True

    def _assume(self, pod: Obj, node: str) -> None:
        """Reserve the node for the pod and ask for its WaitForFirstConsumer claims to be provisioned there."""
        self.assumed[pod["metadata"]["uid"]] = (node, time.monotonic())
        for claim in unbound_claims(self.cluster.store, pod) or []:

            def select(c: Obj) -> None:
                c["metadata"].setdefault("annotations", {}).setdefault(SELECTED_NODE, node)

            self.cluster.api.mutate(PVCS, claim["metadata"]["namespace"], claim["metadata"]["name"], select)

    def _await_volumes(self, pod: Obj) -> None:
        """Bind an assumed pod once its claims are bound; give up after BIND_TIMEOUT as PreBind does (the pod
        is then tried again), or at once when a claim has gone."""
        uid = pod["metadata"]["uid"]
        node, since = self.assumed[uid]
        waiting = unbound_claims(self.cluster.store, pod)
        if waiting == []:
            del self.assumed[uid]
            self._bind(pod, node)
        elif waiting is None or node not in self.cluster.kubelets:
            del self.assumed[uid]
        elif time.monotonic() - since > BIND_TIMEOUT:
            del self.assumed[uid]
            message = 'running PreBind plugin "VolumeBinding": binding volumes: context deadline exceeded'
            self._unschedulable(pod, message)

    def _pick(
        self, pod: Obj, nodes: list[Obj], used: dict[str, Counter[str]]
    ) -> tuple[str | None, Counter[str], int]:
        """The best node for the pod, or None with each rejected node's reasons (the filter plugins in the
        default order: NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit; a node fails at
        the first) and how many nodes were only short of room."""
        reasons: Counter[str] = Counter()
        resolvable = 0
        requests = pod_requests(pod)
        best: tuple[Decimal, str] | None = None
        for node in nodes:
            name = node["metadata"]["name"]
            if (node.get("spec") or {}).get("unschedulable") and not tolerates(pod, UNSCHEDULABLE_TAINT):
                reasons["node(s) were unschedulable"] += 1
                continue
            taint = untolerated_taint(pod, node, ("NoSchedule", "NoExecute"))
            if taint is not None:
                reasons[f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value') or ''}}}"] += 1
                continue
            if not node_affinity_ok(pod, node):
                reasons[AFFINITY_MISMATCH] += 1
                continue
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            short = insufficient(requests, used[name], allocatable)
            if short:
                resolvable += 1
                for resource, _, _ in short:
                    reasons["Too many pods" if resource == "pods" else f"Insufficient {resource}"] += 1
                continue
            gpu_free = parse_quantity(allocatable.get("nvidia.com/gpu", 0)) - used[name]["nvidia.com/gpu"]
            score = (gpu_free if requests.get("nvidia.com/gpu") else -gpu_free, name)
            if best is None or score < best:
                best = score
        return (best[1] if best else None), reasons, resolvable

    def _unschedulable(self, pod: Obj, message: str) -> None:
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

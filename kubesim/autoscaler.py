"""The cluster autoscaler: node groups that grow for unschedulable pods and ProvisioningRequests, and shrink
when their nodes sit idle.

Like the Cluster Autoscaler, it adds nodes of a group whose node shape fits pods the scheduler marked
Unschedulable (``scale_up_delay`` seconds later, the time a cloud takes to boot a machine), never beyond the
group's ``max_nodes``, and removes a node of the group that has run no pod for ``scale_down_idle`` seconds,
never below ``min_nodes``. It serves ``autoscaling.x-k8s.io/v1`` ProvisioningRequests of two classes:
``best-effort-atomic-scale-up`` (room for every pod of every podSet at once, or no node at all) and
``check-capacity`` (only checks that the cluster already has the room), with the condition types, reasons
and timings of the Cluster Autoscaler's provisioning-request code (kubernetes/autoscaler,
``cluster-autoscaler/provisioningrequest`` and ``processors/provreq``; docs/kubesim.md says what was checked).
Pods annotated ``autoscaling.x-k8s.io/consume-provisioning-request`` are left to the request's booked
capacity.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import yaml

from kubesim import resources
from kubesim.admission import TERMINAL, pod_requests
from kubesim.errors import ApiError
from kubesim.meta import now_iso
from kubesim.podstatus import set_condition
from kubesim.scheduler import insufficient, node_affinity_ok, untolerated_taint
from kubesim.store import Obj, clone

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

GROUP = "autoscaling.x-k8s.io"
PLURAL = "provisioningrequests"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK = "check-capacity.autoscaling.x-k8s.io"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
GROUP_LABEL = "kubesim.io/node-group"
# The status ConfigMap the Cluster Autoscaler keeps (``--status-config-map-name``), and how often it rewrites
# it (every loop, ~10 s; at once here when a group's sizes change).
STATUS_NAMESPACE, STATUS_NAME = "kube-system", "cluster-autoscaler-status"
STATUS_SECONDS = 10.0
# How long provisioned capacity stays booked for the request's pods (the Cluster Autoscaler's
# defaultReservationTime), and how long a request may stay unprovisioned before it is Failed, Expired
# (defaultExpirationTime: 7 days from creation; the Cluster Autoscaler reads neither from the request).
BOOKING_SECONDS = 600.0
EXPIRY_SECONDS = 7 * 24 * 3600.0
# The Cluster Autoscaler's reasons and messages (provisioningrequest/conditions).
ACCEPTED_MESSAGE = "ProvisioningRequest is accepted by ClusterAutoscaler"
FOUND_MESSAGE = "Capacity is found in the cluster"
NOT_FOUND_MESSAGE = "Capacity is not found, CA will try to find it later."


@dataclass
class NodeGroup:
    """One scalable group: the shape of its nodes and how many it may have."""

    name: str
    cpu: float = 8
    memory: int = 64 * 2**30
    gpus: int = 0
    gpu_product: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Obj] = field(default_factory=list)
    min_nodes: int = 0
    max_nodes: int = 1

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> NodeGroup:
        """A group from its JSON form (``--node-group``): the dataclass's field names, memory in bytes."""
        known = set(cls.__dataclass_fields__)
        unknown = set(spec) - known
        if unknown or "name" not in spec:
            raise ValueError(f"a node group needs a name and only {sorted(known)}; got {sorted(spec)}")
        group = cls(**spec)
        if not 0 <= group.min_nodes <= group.max_nodes:
            raise ValueError(f"node group {group.name}: need 0 <= min_nodes <= max_nodes")
        return group

    def node_labels(self) -> dict[str, str]:
        """The labels its nodes carry: the group's, the group name and the GPU product."""
        labels = {GROUP_LABEL: self.name, "node.kubernetes.io/instance-type": f"kubesim-{self.name}"}
        if self.gpus:
            labels["nvidia.com/gpu.product"] = self.gpu_product or "Simulated-GPU"
        labels.update(self.labels)
        return labels

    def template(self) -> Obj:
        """A node of this group as the scheduler would see it, for fit checks."""
        allocatable = {"cpu": str(self.cpu), "memory": str(self.memory), "pods": "110"}
        allocatable["ephemeral-storage"] = "100Gi"
        if self.gpus:
            allocatable["nvidia.com/gpu"] = str(self.gpus)
        return {
            "metadata": {"name": f"template-{self.name}", "labels": self.node_labels()},
            "spec": {"taints": list(self.taints)},
            "status": {"allocatable": allocatable},
        }


def _fits(pod: Obj, node: Obj, used: Counter[str]) -> bool:
    """Whether the pod passes the scheduler's filters on the node with ``used`` already taken."""
    if untolerated_taint(pod, node, ("NoSchedule", "NoExecute")) is not None:
        return False
    if not node_affinity_ok(pod, node):
        return False
    return not insufficient(pod_requests(pod), used, node["status"]["allocatable"])


def _take(used: Counter[str], pod: Obj) -> None:
    used.update(pod_requests(pod))
    used["pods"] += 1


def _unschedulable(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled":
            return cond.get("status") == "False" and cond.get("reason") == "Unschedulable"
    return False


def _ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def _age(request: Obj) -> float:
    """Seconds since the request was created (0 when its creationTimestamp cannot be read)."""
    created = (request.get("metadata") or {}).get("creationTimestamp")
    try:
        born = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return 0.0
    return (datetime.now(UTC) - born).total_seconds()


def _condition(obj: Obj, type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def _as_pod(template: Obj) -> Obj:
    """The pod a PodTemplate describes, its containers' requests defaulted from their limits as the
    apiserver defaults a created pod's."""
    body = clone(template.get("template") or {})
    body.setdefault("metadata", {})
    spec = body.setdefault("spec", {})
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        resources = container.setdefault("resources", {})
        requests = resources.setdefault("requests", {})
        for name, amount in (resources.get("limits") or {}).items():
            requests.setdefault(name, amount)
    return body


@dataclass
class _ScaleUp:
    group: NodeGroup
    names: list[str]
    ready_at: float
    request: tuple[str, str] | None = None


class ClusterAutoscaler:
    """Grows and shrinks the node groups; a controller of ``Cluster`` (one pass per ``step``)."""

    def __init__(
        self,
        cluster: Cluster,
        groups: list[NodeGroup],
        scale_up_delay: float = 1.0,
        scale_down_idle: float = 10.0,
        booking_seconds: float = BOOKING_SECONDS,
        expiry_seconds: float = EXPIRY_SECONDS,
    ):
        self.cluster = cluster
        self.groups = {g.name: g for g in groups}
        self.scale_up_delay = scale_up_delay
        self.scale_down_idle = scale_down_idle
        self.booking_seconds = booking_seconds
        self.expiry_seconds = expiry_seconds
        # The Cluster Autoscaler looks at ProvisioningRequests once per loop (--scan-interval, 10 s); here at
        # every pass unless a test sets a longer interval.
        self.scan_interval = 0.0
        self.scanned_at = -1e9
        self.in_flight: list[_ScaleUp] = []
        self.idle_since: dict[str, float] = {}
        self.booked: dict[tuple[str, str], tuple[list[str], float]] = {}
        self.counter = 0
        self.passes = 0  # how many times `step` has run (tests wait for passes)
        self.status_at = -STATUS_SECONDS
        self.status_groups: list[Obj] = []

    def step(self) -> None:
        """Finish due scale-ups, serve ProvisioningRequests, grow for unschedulable pods, shrink idle nodes."""
        self.passes += 1
        if not self.groups:
            return
        now = time.monotonic()
        self._finish_scale_ups(now)
        nodes = self.cluster.store.list("nodes")[0]
        pods = self.cluster.store.list("pods")[0]
        self._keep_minimum(nodes)
        used = self._usage(nodes, pods)
        if now - self.scanned_at >= self.scan_interval:
            self.scanned_at = now
            for request in self.cluster.store.list(PLURAL)[0]:
                self._serve(request, nodes, pods, used, now)
        self._grow_for_pods(pods, nodes, used, now)
        self._shrink(nodes, pods, now)
        self._publish_status(self.cluster.store.list("nodes")[0], now)

    def _group_nodes(self, nodes: list[Obj], group: str) -> list[Obj]:
        return [n for n in nodes if (n["metadata"].get("labels") or {}).get(GROUP_LABEL) == group]

    def _planned(self, group: str) -> int:
        return sum(len(s.names) for s in self.in_flight if s.group.name == group)

    def _usage(self, nodes: list[Obj], pods: list[Obj]) -> dict[str, Counter[str]]:
        used: dict[str, Counter[str]] = {n["metadata"]["name"]: Counter() for n in nodes}
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if node in used and (pod.get("status") or {}).get("phase") not in TERMINAL:
                _take(used[node], pod)
        return used

    def _keep_minimum(self, nodes: list[Obj]) -> None:
        for group in self.groups.values():
            missing = group.min_nodes - len(self._group_nodes(nodes, group.name)) - self._planned(group.name)
            if missing > 0:
                self._start(group, missing, None, time.monotonic())

    def _start(self, group: NodeGroup, count: int, request: tuple[str, str] | None, now: float) -> list[str]:
        names = []
        for _ in range(count):
            self.counter += 1
            names.append(f"{group.name}-{self.counter:04d}")
        self.in_flight.append(_ScaleUp(group, names, now + self.scale_up_delay, request))
        self.cluster.log.info("autoscaler: scaling %s up by %d (%s)", group.name, count, ", ".join(names))
        return names

    def _finish_scale_ups(self, now: float) -> None:
        for scale_up in [s for s in self.in_flight if s.ready_at <= now]:
            self.in_flight.remove(scale_up)
            group = scale_up.group
            for name in scale_up.names:
                self.cluster.add_node(
                    name,
                    cpu=group.cpu,
                    memory=group.memory,
                    gpus=group.gpus,
                    simulated=True,
                    labels=group.node_labels(),
                    taints=[dict(t) for t in group.taints],
                )

    def _place(
        self, pods: list[Obj], nodes: list[Obj], used: dict[str, Counter[str]], grow: bool
    ) -> dict[str, int] | None:
        """Room for every pod: on existing nodes first (reserving it in ``used``), then on new nodes of the
        groups (when ``grow``) within their maximum. The new nodes per group, or None when some pod has none."""
        scratch = {k: Counter(v) for k, v in used.items()}
        new: list[tuple[NodeGroup, Obj, Counter[str]]] = []
        counts: dict[str, int] = {}
        for pod in pods:
            spot = next((n for n in nodes if _fits(pod, n, scratch[n["metadata"]["name"]])), None)
            if spot is not None:
                _take(scratch[spot["metadata"]["name"]], pod)
                continue
            fresh = next((entry for entry in new if _fits(pod, entry[1], entry[2])), None)
            if fresh is None and grow:
                fresh = self._new_node(pod, nodes, counts)
                if fresh is not None:
                    new.append(fresh)
                    counts[fresh[0].name] = counts.get(fresh[0].name, 0) + 1
            if fresh is None:
                return None
            _take(fresh[2], pod)
        used.update(scratch)
        return counts

    def _new_node(
        self, pod: Obj, nodes: list[Obj], counts: dict[str, int]
    ) -> tuple[NodeGroup, Obj, Counter[str]] | None:
        for group in self.groups.values():
            size = len(self._group_nodes(nodes, group.name)) + self._planned(group.name)
            if size + counts.get(group.name, 0) >= group.max_nodes:
                continue
            template = group.template()
            if _fits(pod, template, Counter()):
                return group, template, Counter()
        return None

    def _grow_for_pods(
        self, pods: list[Obj], nodes: list[Obj], used: dict[str, Counter[str]], now: float
    ) -> None:
        waiting = [
            p
            for p in pods
            if not p["spec"].get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and CONSUME not in (p["metadata"].get("annotations") or {})
            and _unschedulable(p)
        ]
        waiting = self._not_covered(waiting, used)
        for pod in waiting:
            counts = self._place([pod], nodes, used, grow=True)
            for group, count in (counts or {}).items():
                if count:
                    self._start(self.groups[group], count, None, now)
                    key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
                    self.cluster.api.record_event(
                        pod,
                        "Normal",
                        "TriggeredScaleUp",
                        f"pod triggered scale-up: [{{{group} {count}}}] ({key[0]}/{key[1]})",
                        "cluster-autoscaler",
                    )

    def _not_covered(self, pods: list[Obj], used: dict[str, Counter[str]]) -> list[Obj]:
        """The pods that the nodes already on their way do not have room for."""
        coming = [(s.group.template(), Counter[str]()) for s in self.in_flight for _ in s.names]
        left = []
        for pod in pods:
            spot = next((entry for entry in coming if _fits(pod, entry[0], entry[1])), None)
            if spot is None:
                left.append(pod)
            else:
                _take(spot[1], pod)
        return left

    def _request_pods(self, request: Obj) -> list[Obj] | None:
        """The pods a request asks room for (its podSets' templates times their counts); None when a
        referenced PodTemplate does not exist."""
        namespace = request["metadata"]["namespace"]
        pods: list[Obj] = []
        for pod_set in (request.get("spec") or {}).get("podSets") or []:
            ref = (pod_set.get("podTemplateRef") or {}).get("name", "")
            template = self.cluster.store.peek("podtemplates", namespace, ref)
            if template is None:
                return None
            pods.extend([_as_pod(template)] * int(pod_set.get("count", 1)))
        return pods

    def _set(self, request: Obj, type_: str, value: bool, reason: str, message: str) -> None:
        meta = request["metadata"]
        self.cluster.api.mutate(
            PLURAL,
            meta["namespace"],
            meta["name"],
            lambda r: set_condition(r.setdefault("status", {}), type_, value, reason, message),
        )

    def _serve(
        self, request: Obj, nodes: list[Obj], pods: list[Obj], used: dict[str, Counter[str]], now: float
    ) -> None:
        """Move one ProvisioningRequest along as the Cluster Autoscaler does: Accepted when picked up; then
        Provisioned=True (CapacityIsFound, or CapacityIsProvisioned once the scale-up is requested, before
        the nodes are up: the atomic class is best effort) or Provisioned=False CapacityIsNotFound, tried
        again every pass; Failed only for a missing PodTemplate (FailedToCreatePods), a check-capacity
        request with ``noRetry`` (CapacityIsNotFound) or one still unprovisioned ``expiry_seconds`` after
        its creation (Expired); BookingExpired once its pods are all on nodes (CapacityBookingConsumed) or
        ``booking_seconds`` after Provisioned (CapacityReservationTimeExpired). The Cluster Autoscaler never
        sets CapacityRevoked (a cloud provider's own provisioning may); ``revoke`` emulates that."""
        meta = request["metadata"]
        key = (meta["namespace"], meta["name"])
        kind = (request.get("spec") or {}).get("provisioningClassName")
        if kind not in (ATOMIC, CHECK) or meta.get("deletionTimestamp"):
            return
        done = ("Failed", "BookingExpired", "CapacityRevoked")
        if any((_condition(request, t) or {}).get("status") == "True" for t in done):
            return
        provisioned = _condition(request, "Provisioned")
        if provisioned and provisioned["status"] == "True":
            self._keep_booking(request, key, pods, now)
            return
        if _age(request) > self.expiry_seconds:
            self._set(request, "Failed", True, "Expired", "ProvisioningRequest is expired")
            return
        pods_wanted = self._request_pods(request)
        if pods_wanted is None:
            message = "a podSet's podTemplateRef names no PodTemplate in the request's namespace"
            self._set(request, "Failed", True, "FailedToCreatePods", message)
            return
        if _condition(request, "Accepted") is None:
            self._set(request, "Accepted", True, "Accepted", ACCEPTED_MESSAGE)
        if kind == CHECK:
            if self._place(pods_wanted, nodes, used, grow=False) is not None:
                self._provisioned(request, key, [], now, "CapacityIsFound", FOUND_MESSAGE)
            elif ((request.get("spec") or {}).get("parameters") or {}).get("noRetry") == "true":
                self._set(
                    request, "Failed", True, "CapacityIsNotFound", "CA could not find requested capacity"
                )
            else:
                self._set(request, "Provisioned", False, "CapacityIsNotFound", NOT_FOUND_MESSAGE)
            return
        counts = self._place(pods_wanted, nodes, used, grow=True)
        if counts is None:
            self._set(request, "Provisioned", False, "CapacityIsNotFound", NOT_FOUND_MESSAGE)
            return
        names: list[str] = []
        for group, count in counts.items():
            names += self._start(self.groups[group], count, key, now)
        reason = "CapacityIsProvisioned" if names else "CapacityIsFound"
        self._provisioned(request, key, names, now, reason, FOUND_MESSAGE)

    def _provisioned(
        self, request: Obj, key: tuple[str, str], names: list[str], now: float, *msg: str
    ) -> None:
        self.booked[key] = (names, now + self.booking_seconds)
        self._set(request, "Provisioned", True, msg[0], msg[1])

    def _keep_booking(self, request: Obj, key: tuple[str, str], pods: list[Obj], now: float) -> None:
        """End the booking of a provisioned request once all its pods are on nodes, or when it runs out."""
        until = self.booked.get(key, ([], now))[1]
        wanted = sum(int(s.get("count", 1)) for s in (request.get("spec") or {}).get("podSets") or [])
        placed = sum(
            1
            for p in pods
            if p["metadata"].get("namespace") == key[0]
            and (p["metadata"].get("annotations") or {}).get(CONSUME) == key[1]
            and p["spec"].get("nodeName")
        )
        if wanted and placed >= wanted:
            self.booked.pop(key, None)
            self._set(request, "BookingExpired", True, "CapacityBookingConsumed", "Capacity booking consumed")
        elif now >= until:
            self.booked.pop(key, None)
            message = "Capacity reservation time is expired"
            self._set(request, "BookingExpired", True, "CapacityReservationTimeExpired", message)

    def revoke(
        self, namespace: str, name: str, message: str = "the provisioned capacity was taken back"
    ) -> None:
        """Mark a request CapacityRevoked, as a cloud provider's provisioning does when it takes the nodes
        back (the open-source Cluster Autoscaler itself never sets it)."""
        request = self.cluster.store.peek(PLURAL, namespace, name)
        if request is not None:
            self.booked.pop((namespace, name), None)
            self._set(request, "CapacityRevoked", True, "CapacityRevoked", message)

    def _publish_status(self, nodes: list[Obj], now: float) -> None:
        """Write ``kube-system/cluster-autoscaler-status`` as the Cluster Autoscaler 1.30+ does: YAML under
        ``status``, one ``nodeGroups`` entry per group with its health (node counts, cloudProviderTarget,
        minSize, maxSize)."""
        groups = []
        for group in sorted(self.groups.values(), key=lambda g: g.name):
            members = self._group_nodes(nodes, group.name)
            ready = sum(1 for n in members if _ready(n))
            groups.append(
                {
                    "name": group.name,
                    "health": {
                        "status": "Healthy",
                        "nodeCounts": {"registered": {"total": len(members), "ready": ready}},
                        "cloudProviderTarget": len(members) + self._planned(group.name),
                        "minSize": group.min_nodes,
                        "maxSize": group.max_nodes,
                    },
                    "scaleUp": {"status": "InProgress" if self._planned(group.name) else "NoActivity"},
                }
            )
        if groups == self.status_groups and now - self.status_at < STATUS_SECONDS:
            return
        self.status_groups, self.status_at = groups, now
        status = yaml.safe_dump(
            {"time": now_iso(), "autoscalerStatus": "Running", "nodeGroups": groups}, sort_keys=False
        )
        if self.cluster.store.peek("configmaps", STATUS_NAMESPACE, STATUS_NAME) is None:
            configmaps = resources.find("", "v1", "configmaps")
            assert configmaps is not None
            body = {"metadata": {"name": STATUS_NAME}, "data": {"status": status}}
            with contextlib.suppress(ApiError):  # created meanwhile: the next loop rewrites it
                self.cluster.api.create(configmaps, STATUS_NAMESPACE, body)
            return
        self.cluster.api.mutate(
            "configmaps",
            STATUS_NAMESPACE,
            STATUS_NAME,
            lambda c: c.setdefault("data", {}).update(status=status),
        )

    def _shrink(self, nodes: list[Obj], pods: list[Obj], now: float) -> None:
        busy = {
            p["spec"].get("nodeName") for p in pods if (p.get("status") or {}).get("phase") not in TERMINAL
        }
        requests = {
            (r["metadata"]["namespace"], r["metadata"]["name"]) for r in self.cluster.store.list(PLURAL)[0]
        }
        self.booked = {k: v for k, v in self.booked.items() if k in requests}
        held = {name for names, _ in self.booked.values() for name in names}
        for group in self.groups.values():
            members = self._group_nodes(nodes, group.name)
            size = len(members)
            for node in members:
                name = node["metadata"]["name"]
                if name in busy or name in held:
                    self.idle_since.pop(name, None)
                    continue
                since = self.idle_since.setdefault(name, now)
                if now - since >= self.scale_down_idle and size > group.min_nodes:
                    size -= 1
                    self.idle_since.pop(name, None)
                    self.cluster.log.info("autoscaler: removing idle node %s of %s", name, group.name)
                    self.cluster.lose_node(name)

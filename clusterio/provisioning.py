"""ProvisioningRequests (`autoscaling.x-k8s.io/v1`): ask the cluster autoscaler for room for a whole gang
at once before its pods are created (class `best-effort-atomic-scale-up`: every learner's node or none).

The request and the PodTemplate it names carry the job's labels and are named after the attempt, so a
retried launch adopts them and `teardown` deletes them with the attempt's other objects. Clusters that do
not serve the API (no `autoscaling.x-k8s.io/v1` in discovery) get none: their autoscaler sees the pending
pods instead.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from kubernetes import client

from clusterio import names
from clusterio.builders import JobPodsSpec, make_learner_pod
from clusterio.connection import Connection, Obj
from clusterio.errors import Conflict, NotFound

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"


# What the Cluster Autoscaler sets (kubernetes/autoscaler, cluster-autoscaler/apis/provisioningrequest/
# autoscaling.x-k8s.io/v1/types.go and provisioningrequest/conditions): Provisioned=True once it found or
# asked for the room (best effort: the nodes may still be booting), False (CapacityIsNotFound) while it keeps
# trying; Failed=True when it gives up (Expired after 7 days, FailedToCreatePods, ...); BookingExpired=True
# when the booking ends: consumed by the request's pods (CapacityBookingConsumed) or not used in time
# (CapacityReservationTimeExpired). CapacityRevoked=True comes from providers that take capacity back.
CONSUMED = "CapacityBookingConsumed"


@dataclass(frozen=True)
class Provisioning:
    """Where a request stands: `provisioned`, `failed` (with the autoscaler's words), or neither (waiting,
    with the autoscaler's latest words in `waiting`, if any)."""

    name: str
    provisioned: bool = False
    failed: str = ""
    waiting: str = ""


def request_name(job_id: names.JobId, attempt: int) -> str:
    """The attempt's ProvisioningRequest and PodTemplate name (its learner pods' common stem)."""
    return names.job_object_name(job_id, attempt)


def _condition(obj: Obj, type_: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


class ProvisioningRequests(Connection):
    """The ProvisioningRequest calls of a `Cluster`."""

    _serves: bool | None = None

    def serves_provisioning_requests(self) -> bool:
        """Whether the cluster serves `autoscaling.x-k8s.io/v1` provisioningrequests (asked once per client)."""
        if self._serves is None:
            try:
                found = self._json(self.custom.get_api_resources, GROUP, VERSION)
            except NotFound:
                found = {}
            self._serves = any(r.get("name") == PLURAL for r in (found or {}).get("resources") or [])
        return self._serves

    def provision(self, *, spec: JobPodsSpec, valid_until_seconds: int | None = None) -> Provisioning:
        """Create (or adopt) the attempt's PodTemplate and atomic ProvisioningRequest for all its learners,
        and say where the request stands. `valid_until_seconds` is sent as the `ValidUntilSeconds` parameter
        that types.go documents for atomic scale-up; the open-source Cluster Autoscaler does not read it (it
        fails a request only after 7 days), so what stops it is the launch giving up: the job goes back to
        the queue and its teardown deletes the request."""
        name = request_name(spec.job_id, spec.attempt)
        labels = {**names.job_labels(spec.tenant, spec.job_id, spec.attempt)}
        if self.installation:
            labels[names.LABEL_INSTALLATION] = self.installation
        pod_spec = make_learner_pod(spec, 0).spec
        assert pod_spec is not None
        pod_spec.node_name = None
        template = client.V1PodTemplate(
            metadata=client.V1ObjectMeta(name=name, namespace=spec.namespace, labels=labels),
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=pod_spec),
        )
        with contextlib.suppress(Conflict):
            self._json(self.core.create_namespaced_pod_template, spec.namespace, template)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": spec.namespace, "labels": labels},
            "spec": {
                "provisioningClassName": ATOMIC,
                "podSets": [{"podTemplateRef": {"name": name}, "count": spec.learners}],
                "parameters": {"ValidUntilSeconds": str(valid_until_seconds)} if valid_until_seconds else {},
            },
        }
        with contextlib.suppress(Conflict):
            self._json(
                self.custom.create_namespaced_custom_object,
                "autoscaling.x-k8s.io",
                "v1",
                spec.namespace,
                "provisioningrequests",
                body,
            )
        found = self._json(
            self.custom.get_namespaced_custom_object,
            "autoscaling.x-k8s.io",
            "v1",
            spec.namespace,
            "provisioningrequests",
            name,
        )
        for type_ in ("Failed", "CapacityRevoked", "BookingExpired"):
            cond = _condition(found, type_) or {}
            # A booking its pods consumed is no failure: a relaunch of the attempt adopts those pods.
            if cond.get("status") == "True" and not (
                type_ == "BookingExpired" and cond.get("reason") == CONSUMED
            ):
                return Provisioning(
                    name, failed=f"{type_} {cond.get('reason', '')}: {cond.get('message', '')}"
                )
        provisioned = _condition(found, "Provisioned") or {}
        if provisioned.get("status") == "True":
            return Provisioning(name, provisioned=True)
        said = f"{provisioned.get('reason', '')}: {provisioned.get('message', '')}" if provisioned else ""
        return Provisioning(name, waiting=said)

    def delete_provisioning(self, *, namespace: str, selector: str) -> int:
        """Delete the ProvisioningRequests and PodTemplates matching `selector` (where the API is served)."""
        if not self.serves_provisioning_requests():
            return 0
        deleted = 0
        listed = self._json(
            self.custom.list_namespaced_custom_object,
            "autoscaling.x-k8s.io",
            "v1",
            namespace,
            "provisioningrequests",
            label_selector=selector,
        )
        for item in (listed or {}).get("items") or []:
            try:
                self._json(
                    self.custom.delete_namespaced_custom_object,
                    "autoscaling.x-k8s.io",
                    "v1",
                    namespace,
                    "provisioningrequests",
                    item["metadata"]["name"],
                )
                deleted += 1
            except NotFound:
                continue
        templates, _ = self._list_all(
            self.core.list_namespaced_pod_template, namespace, label_selector=selector
        )
        for item in templates:
            try:
                self._json(self.core.delete_namespaced_pod_template, item["metadata"]["name"], namespace)
                deleted += 1
            except NotFound:
                continue
        return deleted

"""The one place Trainyard talks to the Kubernetes API: tenant fences, job launch/teardown, reads.

`Cluster` joins the topics: the call path with its retries and typed errors (`clusterio.connection`),
the tenant fences (`clusterio.tenancy`), and, here, a job's objects and the reads the engine watches by.
Objects come back as plain dicts in the API's own JSON shape (camelCase), so callers never depend on the
client's model classes. Creation is idempotent: names are deterministic (`clusterio.names`), so a
retried launch adopts what a previous try created instead of duplicating it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from clusterio import names
from clusterio.autoscalerstatus import NodeGroupSize, parse_status
from clusterio.builders import (
    JobPodsSpec,
    RegistryLogin,
    attempt_secret_name,
    make_datastore_secret,
    make_headless_service,
    make_job_checkpoint_pvcs,
    make_learner_pod,
    make_pull_secret,
)
from clusterio.builders.job import gpu_product
from clusterio.capacity import NodeInfo, Resources, node_infos
from clusterio.connection import Obj, labels_of
from clusterio.errors import BadRequest, Conflict, Forbidden, NotFound, Unavailable
from clusterio.logs import Stream
from clusterio.provisioning import CONSUME, ProvisioningRequests
from clusterio.tenancy import TenantFences

__all__ = ["Cluster", "ManagedKind", "NodeInfo", "Resources", "Stream"]

ManagedKind = Literal["services", "secrets", "persistentvolumeclaims"]


def _rfc3339_seconds(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster(TenantFences, ProvisioningRequests):
    """A connection to one Kubernetes cluster (see `Connection` for its arguments) and all Trainyard asks of it.

    Tenant fences come from `TenantFences`; a job's objects (launch, adopt, teardown, claims) and the reads
    (pods, watches, logs, nodes, metrics) are here.
    """

    # -- jobs --------------------------------------------------------------------------------------

    def launch(
        self,
        *,
        spec: JobPodsSpec,
        credentials: dict[str, dict[str, str]] | None = None,
        artifact_token: str | None = None,
        provisioning_request: str | None = None,
        registry_login: RegistryLogin | None = None,
    ) -> list[str]:
        """Create one attempt's Secret (`credentials`, `artifact_token`), headless Service and learner pods.

        With `spec.checkpoint_claim_size` the job's checkpoint claims (shared, or one per learner) are
        created first (or adopted: they belong to the job, not the attempt, and `teardown` leaves them).
        A retried call adopts objects of the same job and attempt; a name taken by anything else raises
        `Conflict`. A quota refusal raises `Forbidden` and leaves what was created so far for `teardown`.
        Returns the pod names in learner order. A spec with `artifacts` needs `artifact_token`
        (ValueError otherwise). With `provisioning_request` the pods consume that ProvisioningRequest's
        capacity (`clusterio.provisioning`). With `registry_login` the attempt's image pull Secret is created
        too, under `spec.image_pull_secret`, the name the pods give in `imagePullSecrets` (ValueError without).
        """
        ns = spec.namespace
        if registry_login is not None and not spec.image_pull_secret:
            raise ValueError("a registry_login needs spec.image_pull_secret, the name the pods pull with")
        if spec.artifacts is not None and not artifact_token:
            raise ValueError("a spec with artifacts needs the attempt's artifact_token")
        if spec.checkpoint_claims and spec.checkpoint_claim_size:
            for claim in make_job_checkpoint_pvcs(spec):
                self._create_or_adopt(
                    spec,
                    claim,
                    self.core.create_namespaced_persistent_volume_claim,
                    self.core.read_namespaced_persistent_volume_claim,
                    same_attempt=False,
                )
        if credentials or artifact_token:
            labels = names.job_labels(spec.tenant, spec.job_id, spec.attempt)
            secret = make_datastore_secret(
                ns, attempt_secret_name(spec), labels, credentials or {}, artifact_token=artifact_token
            )
            self._create_or_adopt(
                spec, secret, self.core.create_namespaced_secret, self.core.read_namespaced_secret
            )
        if registry_login is not None and spec.image_pull_secret:
            labels = names.job_labels(spec.tenant, spec.job_id, spec.attempt)
            pull = make_pull_secret(ns, spec.image_pull_secret, labels, registry_login)
            self._create_or_adopt(
                spec, pull, self.core.create_namespaced_secret, self.core.read_namespaced_secret
            )
        service = make_headless_service(spec)
        self._create_or_adopt(
            spec, service, self.core.create_namespaced_service, self.core.read_namespaced_service
        )
        pods = []
        for index in range(spec.learners):
            pod = make_learner_pod(spec, index)
            if provisioning_request and pod.metadata is not None:
                pod.metadata.annotations = {**(pod.metadata.annotations or {}), CONSUME: provisioning_request}
            self._create_or_adopt(spec, pod, self.core.create_namespaced_pod, self.core.read_namespaced_pod)
            pods.append(names.learner_pod_name(spec.job_id, spec.attempt, index))
        return pods

    def _create_or_adopt(
        self,
        spec: JobPodsSpec,
        body: Any,
        create: Callable[..., Any],
        read: Callable[..., Any],
        *,
        same_attempt: bool = True,
    ) -> None:
        name, namespace = body.metadata.name, body.metadata.namespace
        if self.installation:
            body.metadata.labels = {
                **(body.metadata.labels or {}),
                names.LABEL_INSTALLATION: self.installation,
            }
        try:
            self._json(create, namespace, body)
            return
        except Conflict:
            pass
        labels = labels_of(self._json(read, name, namespace))
        if (
            labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY
            or labels.get(names.LABEL_INSTALLATION) != self.installation
            or labels.get(names.LABEL_JOB) != names.label_value(spec.job_id)
            or (same_attempt and labels.get(names.LABEL_ATTEMPT) != str(spec.attempt))
        ):
            raise Conflict(
                f"{body.kind} {namespace}/{name} exists and belongs to something else",
                status=409,
                reason="AlreadyExists",
            )

    def teardown(
        self,
        *,
        namespace: str,
        job_id: names.JobId,
        attempt: int | None = None,
        grace_seconds: int | None = None,
    ) -> int:
        """Delete a job's pods, Services and Secrets (of one attempt, or of all), in the background.

        The job's checkpoint claims are not deleted here: they outlive attempts (`delete_checkpoint_claims`).

        Returns how many objects this call started deleting (objects already terminating are deleted
        again, e.g. to shorten their grace period, but not counted), so a repeated teardown returns 0.
        """
        selector = self.selector(names.job_selector(job_id, attempt))
        options = client.V1DeleteOptions(propagation_policy="Background", grace_period_seconds=grace_seconds)
        kinds = (
            (self.core.list_namespaced_pod, self.core.delete_namespaced_pod),
            (self.core.list_namespaced_service, self.core.delete_namespaced_service),
            (self.core.list_namespaced_secret, self.core.delete_namespaced_secret),
        )
        deleted = 0
        for list_fn, delete_fn in kinds:
            items, _ = self._list_all(list_fn, namespace, label_selector=selector)
            for item in items:
                meta = item.get("metadata") or {}
                try:
                    self._json(delete_fn, meta["name"], namespace, body=options)
                except NotFound:
                    continue
                if not meta.get("deletionTimestamp"):
                    deleted += 1
        return deleted + self.delete_provisioning(namespace=namespace, selector=selector)

    def delete_checkpoint_claims(self, *, namespace: str, job_id: names.JobId) -> int:
        """Delete every checkpoint claim of a job (when the job itself is deleted), found by its labels: the
        shared one and the per-learner ones alike, whatever layout its attempts used. Returns how many this
        call started deleting (claims already going are not counted).

        `teardown` never touches them, so a requeued attempt resumes from the same checkpoints.
        """
        items, _ = self._list_all(
            self.core.list_namespaced_persistent_volume_claim,
            namespace,
            label_selector=self.selector(names.job_selector(job_id)),
        )
        deleted = 0
        for item in items:
            meta = item.get("metadata") or {}
            if not meta.get("deletionTimestamp"):
                deleted += self.delete_checkpoint_claim(namespace=namespace, name=meta["name"])
        return deleted

    def delete_checkpoint_claim(self, *, namespace: str, name: str) -> bool:
        """Delete one checkpoint claim by name (one whose job is gone); False when it was already gone."""
        try:
            self._json(
                self.core.delete_namespaced_persistent_volume_claim,
                name,
                namespace,
                body=client.V1DeleteOptions(propagation_policy="Background"),
            )
        except NotFound:
            return False
        return True

    def job_pods(self, *, namespace: str, job_id: names.JobId, attempt: int | None = None) -> list[Obj]:
        """A job's pods (of one attempt, or all), ordered by attempt then learner index."""
        items, _ = self._list_all(
            self.core.list_namespaced_pod,
            namespace,
            label_selector=self.selector(names.job_selector(job_id, attempt)),
        )

        def key(pod: Obj) -> tuple[int, int, str]:
            labels = labels_of(pod)
            attempt_ = labels.get(names.LABEL_ATTEMPT, "")
            learner = labels.get(names.LABEL_LEARNER, "")
            return (
                int(attempt_) if attempt_.isdigit() else -1,
                int(learner) if learner.isdigit() else -1,
                pod["metadata"]["name"],
            )

        return sorted(items, key=key)

    def list_pods(self, *, label_selector: str, namespace: str | None = None) -> tuple[list[Obj], str]:
        """All pods matching `label_selector` (in one namespace, or all) and the list's resourceVersion."""
        if namespace is None:
            return self._list_all(self.core.list_pod_for_all_namespaces, label_selector=label_selector)
        return self._list_all(self.core.list_namespaced_pod, namespace, label_selector=label_selector)

    def managed_pods(self) -> tuple[list[Obj], str]:
        """Every pod Trainyard manages, across namespaces, and the list's resourceVersion (to watch from)."""
        return self.list_pods(label_selector=self.selector(names.managed_selector()))

    def managed_objects(self, kind: ManagedKind) -> list[Obj]:
        """Every Service, Secret or claim (`kind`) of this installation's jobs, across namespaces."""
        list_fn = {
            "services": self.core.list_service_for_all_namespaces,
            "secrets": self.core.list_secret_for_all_namespaces,
            "persistentvolumeclaims": self.core.list_persistent_volume_claim_for_all_namespaces,
        }[kind]
        items, _ = self._list_all(list_fn, label_selector=self.selector(names.managed_selector()))
        return items

    def watch_pods(self, *, label_selector: str, resource_version: str, timeout_seconds: int) -> Stream:
        """Open a pod watch (with bookmarks) across namespaces; the server ends it after `timeout_seconds`."""
        return self._open_stream(
            self.core.list_pod_for_all_namespaces,
            read_timeout=timeout_seconds + self.request_timeout,
            watch=True,
            allow_watch_bookmarks=True,
            label_selector=label_selector,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
        )

    def list_nodes(self) -> tuple[list[Obj], str]:
        """Every node and the list's resourceVersion (to watch from)."""
        return self._list_all(self.core.list_node)

    def watch_nodes(self, *, resource_version: str, timeout_seconds: int) -> Stream:
        """Open a node watch (with bookmarks); the server ends it after `timeout_seconds`."""
        return self._open_stream(
            self.core.list_node,
            read_timeout=timeout_seconds + self.request_timeout,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
        )

    def get_pod(self, *, namespace: str, pod: str) -> Obj | None:
        """One pod, or None when it does not exist."""
        try:
            result: Obj = self._json(self.core.read_namespaced_pod, pod, namespace)
        except NotFound:
            return None
        return result

    def get_claim(self, *, namespace: str, name: str) -> Obj | None:
        """One PersistentVolumeClaim, or None when it does not exist."""
        try:
            result: Obj = self._json(self.core.read_namespaced_persistent_volume_claim, name, namespace)
        except NotFound:
            return None
        return result

    def follow_log(
        self, *, namespace: str, pod: str, container: str, since: datetime | None, read_timeout: float
    ) -> Stream:
        """Open a followed, timestamped log stream from `since` (rounded down to whole seconds).

        The generated client has no `sinceTime` argument, so the request is serialized by its own
        `ApiClient` (same auth, TLS and pool). The API resumes at one-second precision anyway, so
        the stream may start with lines the caller has seen; `clusterio.logs` skips them.
        """
        query: list[tuple[str, Any]] = [("container", container), ("follow", True), ("timestamps", True)]
        if since is not None:
            query.append(("sinceTime", _rfc3339_seconds(since)))
        request = self.api_client.param_serialize(
            method="GET",
            resource_path="/api/v1/namespaces/{namespace}/pods/{name}/log",
            path_params={"namespace": namespace, "name": pod},
            query_params=query,
            header_params={"Accept": "text/plain"},
            auth_settings=["BearerToken"],
        )
        timeout = (self.request_timeout, read_timeout)

        def call() -> Any:
            response = self.api_client.call_api(*request, _request_timeout=timeout)
            if not 200 <= response.status <= 299:
                response.read()
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return response.response

        return Stream(self._retry(call))

    # -- capacity, logs, metrics -------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """Every node with its allocatable resources and what unfinished pods bound to it leave free."""
        nodes, _ = self._list_all(self.core.list_node)
        pods, _ = self._list_all(
            self.core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
        return node_infos(nodes, pods, self.pool_label)

    def node_states(self) -> list[NodeInfo]:
        """Every node's name, readiness, taints and allocatable resources, from one list of nodes and no
        pods (so `free` is not counted: use `nodes` for that)."""
        nodes, _ = self._list_all(self.core.list_node)
        return node_infos(nodes, [], self.pool_label)

    def ready_node_names(self) -> set[str]:
        """The names of the nodes whose Ready condition is True (one list of nodes, no pods)."""
        return {info.name for info in self.node_states() if info.ready}

    def gpu_products(self) -> list[str]:
        """The GPU product label of every node that has one (`gpu_product`), sorted, once each. Lists nodes
        only (no pods): cheap enough for every submit and launch."""
        nodes, _ = self._list_all(self.core.list_node)
        return sorted({p for node in nodes if (p := gpu_product(labels_of(node)))})

    def autoscaler_node_groups(self, namespace: str, name: str) -> dict[str, NodeGroupSize] | None:
        """The node groups the cluster autoscaler reports in its status ConfigMap (`autoscalerstatus`), or
        None when there is no such ConfigMap or this installation may not read it."""
        try:
            found = self._json(self.core.read_namespaced_config_map, name, namespace)
        except (NotFound, Forbidden):
            return None
        return parse_status(str(((found or {}).get("data") or {}).get("status") or ""))

    def pod_log_tail(
        self, *, namespace: str, pod: str, lines: int = 20, container: str = "learner"
    ) -> list[str]:
        """The last `lines` lines of a container's log (invalid UTF-8 replaced); [] if there is none yet
        or the pod is gone."""

        def call() -> bytes:
            response: Any = self.core.read_namespaced_pod_log(
                pod,
                namespace,
                container=container,
                tail_lines=lines,
                _preload_content=False,
                _request_timeout=self.request_timeout,
            )
            data: bytes = response.data
            return data

        try:
            data = self._retry(call)
        except (NotFound, BadRequest):
            return []
        text = data.decode("utf-8", "replace")
        return text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else []

    def pod_metrics(self, *, namespace: str, pod: str) -> Obj | None:
        """The pod's metrics.k8s.io `PodMetrics` (per-container cpu/memory usage), or None when the
        metrics API or the pod's sample is unavailable."""
        try:
            result: Obj = self._json(
                self.custom.get_namespaced_custom_object, "metrics.k8s.io", "v1beta1", namespace, "pods", pod
            )
        except (NotFound, Unavailable):
            return None
        return result

    def delete_pod(self, *, namespace: str, pod: str, grace_seconds: int | None = None) -> bool:
        """Delete one pod (background propagation; `grace_seconds` 0 forces it: the API forgets the pod at
        once, whatever its kubelet does); False when it was already gone."""
        try:
            self._json(
                self.core.delete_namespaced_pod,
                pod,
                namespace,
                body=client.V1DeleteOptions(
                    propagation_policy="Background", grace_period_seconds=grace_seconds
                ),
            )
        except NotFound:
            return False
        return True

"""A tenant's fences in the cluster: its namespace, ResourceQuota, LimitRange, NetworkPolicy and service account.

A namespace is this installation's when it carries the managed-by label and the installation's label; one
that exists without them (another team's, another installation's) is never adopted nor changed:
`ensure_tenant` raises `NamespaceNotOwned` before writing anything. One the platform created before
namespaces carried the installation label (managed-by trainyard, this tenant's label, no installation
label) is still its own, and gets the label.

Brought up to date idempotently on every launch: an object that already says what is wanted is kept,
one that does not (the tenant's quota changed, an operator edited it) is replaced optimistically by
resourceVersion, so two launches racing for one tenant never undo each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client

from clusterio import names
from clusterio.builders import (
    TenantLimits,
    make_limit_range,
    make_namespace,
    make_network_policy,
    make_resource_quota,
    make_service_account,
    to_dict,
)
from clusterio.builders.tenant import NODE_LOCAL_DNS_CIDRS, PodSecurityLevel
from clusterio.capacity import covers, same_quota_hard
from clusterio.connection import Connection, Obj, labels_of
from clusterio.errors import Conflict, NamespaceNotOwned, NotFound

_UPDATE_ATTEMPTS = 3


class TenantFences(Connection):
    """The tenant half of `Cluster`: `ensure_tenant` and the create-or-replace step it repeats."""

    def ensure_tenant(
        self,
        *,
        namespace: str,
        tenant_slug: str,
        limits: TenantLimits,
        default_cpu_millis: int = 1000,
        default_memory_mib: int = 1024,
        labels: dict[str, str] | None = None,
        egress_cidrs: Sequence[str] = (),
        dns_cidrs: Sequence[str] = NODE_LOCAL_DNS_CIDRS,
        pod_security: PodSecurityLevel | None = None,
    ) -> None:
        """Create (or bring up to date) a tenant's namespace and the objects that fence it in.

        Idempotent: existing objects are kept when they already say what is wanted and replaced
        (optimistically, by resourceVersion) when not, e.g. after the tenant's quota changed. `labels` are
        extra namespace labels (the operator's; the platform's own win); `egress_cidrs` are the addresses
        learners may reach beyond their namespace and DNS (the platform's artifact endpoint, S3), `dns_cidrs`
        the node-local DNS cache's addresses they may query on port 53;
        `pod_security` is the Pod Security Admission level enforced on the namespace.
        """
        body = make_namespace(namespace, tenant_slug, labels, pod_security=pod_security)
        assert body.metadata is not None and body.metadata.labels is not None
        body.metadata.labels.update(self.ownership_labels(tenant_slug))
        self._ensure_namespace(body, tenant_slug)
        core, net = self.core, self.networking
        self._ensure(
            lambda: make_resource_quota(namespace, limits),
            core.create_namespaced_resource_quota,
            core.read_namespaced_resource_quota,
            core.replace_namespaced_resource_quota,
            same_quota_hard,
        )
        self._ensure(
            lambda: make_limit_range(
                namespace, default_cpu_millis=default_cpu_millis, default_memory_mib=default_memory_mib
            ),
            core.create_namespaced_limit_range,
            core.read_namespaced_limit_range,
            core.replace_namespaced_limit_range,
            lambda want, have: covers(want.get("spec"), have.get("spec")),
        )
        self._ensure(
            lambda: make_network_policy(namespace, egress_cidrs=egress_cidrs, dns_cidrs=dns_cidrs),
            net.create_namespaced_network_policy,
            net.read_namespaced_network_policy,
            net.replace_namespaced_network_policy,
            lambda want, have: covers(want.get("spec"), have.get("spec")),
        )
        self._ensure(
            lambda: make_service_account(namespace),
            core.create_namespaced_service_account,
            core.read_namespaced_service_account,
            core.replace_namespaced_service_account,
            lambda want, have: (
                want.get("automountServiceAccountToken") == have.get("automountServiceAccountToken")
            ),
        )

    def ownership_labels(self, tenant_slug: str) -> dict[str, str]:
        """The labels that make a namespace this installation's (what an operator sets to hand one over)."""
        found = names.tenant_labels(tenant_slug)
        if self.installation:
            found[names.LABEL_INSTALLATION] = self.installation
        return found

    def namespace_owned(self, *, namespace: str, tenant_slug: str) -> bool:
        """Whether the platform may use `namespace` for the tenant: it does not exist yet, or it carries this
        installation's labels (or the platform's own from before the installation label)."""
        try:
            current = self._json(self.core.read_namespace, namespace)
        except NotFound:
            return True
        return self._owns(labels_of(current), tenant_slug)

    def priority_class_exists(self, name: str) -> bool:
        """Whether the cluster has the PriorityClass `name` (a pod naming a missing one is refused at creation)."""
        try:
            self._json(self.scheduling.read_priority_class, name)
        except NotFound:
            return False
        return True

    def namespace_quotas(self, namespace: str) -> list[Obj]:
        """Every ResourceQuota in `namespace` (the platform's and anyone else's): what refuses pods there."""
        return list(self._json(self.core.list_namespaced_resource_quota, namespace).get("items") or [])

    def _owns(self, labels: dict[str, str], tenant_slug: str) -> bool:
        if labels.get(names.LABEL_MANAGED_BY) != names.MANAGED_BY:
            return False
        mark = labels.get(names.LABEL_INSTALLATION)
        if mark is not None or not self.installation:
            return mark == self.installation
        return labels.get(names.LABEL_TENANT) == names.label_value(tenant_slug)

    def _ensure_namespace(self, body: client.V1Namespace, tenant_slug: str) -> None:
        """Create the namespace, or patch its labels when an existing one of ours lacks some.

        Labels only: a namespace has no spec worth replacing, and patching leaves labels the
        platform does not own (an operator's, the cluster's) in place. One that is not ours raises
        `NamespaceNotOwned` untouched.
        """
        try:
            self._json(self.core.create_namespace, body)
        except Conflict:
            assert body.metadata is not None
            name = body.metadata.name
            current = self._json(self.core.read_namespace, name)
            if not self._owns(labels_of(current), tenant_slug):
                raise NamespaceNotOwned(str(name), self.ownership_labels(tenant_slug)) from None
            wanted = to_dict(body)["metadata"]["labels"]
            if not covers(wanted, labels_of(current)):
                self._json(self.core.patch_namespace, name, {"metadata": {"labels": wanted}})

    def _ensure(
        self,
        build: Callable[[], Any],
        create: Callable[..., Any],
        read: Callable[..., Any],
        replace: Callable[..., Any],
        same: Callable[[Obj, Obj], bool],
    ) -> None:
        body = build()
        name, namespace = body.metadata.name, body.metadata.namespace
        try:
            self._json(create, namespace, body)
            return
        except Conflict:
            pass
        for attempt in range(_UPDATE_ATTEMPTS):
            current = self._json(read, name, namespace)
            if same(to_dict(body), current):
                return
            body = build()
            body.metadata.resource_version = current["metadata"]["resourceVersion"]
            try:
                self._json(replace, name, namespace, body)
                return
            except Conflict:
                if attempt == _UPDATE_ATTEMPTS - 1:
                    raise

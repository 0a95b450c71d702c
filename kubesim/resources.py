"""The resource types kubesim serves and the discovery documents describing them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Resource:
    """One REST resource: where it lives, its kind and whether it is namespaced."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    stored: bool = True
    verbs: list[str] = field(default_factory=lambda: list(_VERBS))

    @property
    def api_version(self) -> str:
        """``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        """Lower-case kind, as discovery reports it."""
        return self.kind.lower()


RESOURCES: list[Resource] = [
    Resource("", "v1", "namespaces", "Namespace", False, ("ns",), ("status", "finalize")),
    Resource("", "v1", "nodes", "Node", False, ("no",), ("status",)),
    Resource("", "v1", "pods", "Pod", True, ("po",), ("status", "log", "binding", "eviction")),
    Resource("", "v1", "services", "Service", True, ("svc",), ("status",)),
    Resource("", "v1", "endpoints", "Endpoints", True, ("ep",)),
    Resource("", "v1", "secrets", "Secret", True),
    Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",)),
    Resource("", "v1", "resourcequotas", "ResourceQuota", True, ("quota",), ("status",)),
    Resource("", "v1", "limitranges", "LimitRange", True, ("limits",)),
    Resource("", "v1", "events", "Event", True, ("ev",)),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True, ("pvc",), ("status",)),
    Resource("", "v1", "podtemplates", "PodTemplate", True),
    Resource("batch", "v1", "jobs", "Job", True, (), ("status",)),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, ("netpol",)),
    Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ("sc",)),
    Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False, ("pc",)),
    Resource(
        "autoscaling.x-k8s.io",
        "v1",
        "provisioningrequests",
        "ProvisioningRequest",
        True,
        ("provreq",),
        ("status",),
    ),
    Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, stored=False, verbs=["get", "list"]),
    Resource("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, stored=False, verbs=["get", "list"]),
]

STATUS_SUBRESOURCE = {r.plural for r in RESOURCES if "status" in r.subresources and r.stored}


def find(group: str, version: str, plural: str) -> Resource | None:
    """Look up a resource by its URL coordinates."""
    for res in RESOURCES:
        if res.group == group and res.version == version and res.plural == plural:
            return res
    return None


def by_kind(kind: str) -> Resource | None:
    """Look up a stored resource by its kind (used by garbage collection and events)."""
    for res in RESOURCES:
        if res.kind == kind and res.stored:
            return res
    return None


def groups() -> dict[str, list[str]]:
    """Named API groups (not the core group) and their versions."""
    result: dict[str, list[str]] = {}
    for res in RESOURCES:
        if res.group and res.version not in result.setdefault(res.group, []):
            result[res.group].append(res.version)
    return result


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    """The ``APIResourceList`` for one group version, or None if kubesim does not serve it."""
    members = [r for r in RESOURCES if r.group == group and r.version == version]
    if not members:
        return None
    entries: list[dict[str, Any]] = []
    for res in members:
        entries.append(
            {
                "name": res.plural,
                "singularName": res.singular,
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": res.verbs,
                "shortNames": list(res.short_names),
            }
        )
        for sub in res.subresources:
            entries.append(
                {
                    "name": f"{res.plural}/{sub}",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": res.kind,
                    "verbs": ["get", "patch", "update"] if sub == "status" else ["get", "create"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def api_group_list() -> dict[str, Any]:
    """The ``APIGroupList`` served at ``/apis``."""
    items = []
    for name, versions in groups().items():
        gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        items.append({"name": name, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": items}


def api_group(name: str) -> dict[str, Any] | None:
    """The ``APIGroup`` served at ``/apis/GROUP``."""
    for group in api_group_list()["groups"]:
        if group["name"] == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **group}
    return None

"""Operator overrides applied to a learner pod (its API JSON): the platform's pod first, then each overrides
document in order (the global one, then the tenant's), then their patches, last.

The documents arrive checked (the platform's `common.podoverrides`, which refuses what would break a
tenant's isolation); this module merges them and checks once more that the result keeps what the platform
relies on (name, namespace, its labels, no API token, the security context), so a patch can never undo it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

# Lists whose items a patch merges by a key (Kubernetes' patchMergeKey), as a strategic merge patch does;
# every other list is replaced whole.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of the platform's own whose items a patch changes where the pod has them and never adds to: a patch of
# the `fetch` init container leaves a pod that fetches nothing as it is.
_OWN_LISTS = ("containers", "initContainers")
_KEPT_SPEC = (
    "serviceAccountName",
    "automountServiceAccountToken",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "securityContext",
    "restartPolicy",
    "hostname",
    "subdomain",
    "nodeName",
)


def apply_pod_overrides(pod: Mapping[str, Any], documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pod with `documents` applied; raises ValueError when the result would change what the platform owns
    (a container or volume of its own replaced, its labels, the pod's identity or security)."""
    result = copy.deepcopy(dict(pod))
    metadata = result.setdefault("metadata", {})
    spec = result.setdefault("spec", {})
    for doc in documents:
        tolerations = spec.get("tolerations") or []
        tolerations += [t for t in doc.get("tolerations", []) if t not in tolerations]
        if tolerations:
            spec["tolerations"] = tolerations
        if doc.get("node_selector"):
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **doc["node_selector"]}
        if doc.get("node_affinity"):
            _require_nodes(spec, doc["node_affinity"])
        if doc.get("priority_class_name"):
            spec["priorityClassName"] = doc["priority_class_name"]
        for field in ("labels", "annotations"):
            if doc.get(field):
                metadata[field] = {**(metadata.get(field) or {}), **doc[field]}
    if (pod.get("metadata") or {}).get("labels"):
        metadata["labels"].update(pod["metadata"]["labels"])
    placed = copy.deepcopy((spec.get("affinity") or {}).get("nodeAffinity"))
    for doc in documents:
        if doc.get("patch"):
            result = strategic_merge(result, doc["patch"])
    if ((result.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") != placed:
        raise ValueError(
            "a pod overrides patch may not change spec.affinity.nodeAffinity (use node_affinity)"
        )
    _check_kept(pod, result)
    return result


def _require_nodes(spec: dict[str, Any], requirements: list[dict[str, Any]]) -> None:
    """AND `requirements` into every required node affinity term (one term of them alone when there is none):
    the operator narrows where the pods may go and never widens the platform's choice."""
    affinity = spec.setdefault("affinity", {}) or {}
    spec["affinity"] = affinity
    node = affinity.setdefault("nodeAffinity", {})
    required = node.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", []) or [{}]
    required["nodeSelectorTerms"] = terms
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), *copy.deepcopy(requirements)]


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """`patch` merged into `target` as a strategic merge patch does: objects merge key by key (null deletes
    a key), lists named in MERGE_KEYS merge item by item on their key (a container the pod has not is left
    out), other lists and values are replaced."""
    if isinstance(patch, Mapping) and isinstance(target, Mapping):
        merged = dict(target)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in _OWN_LISTS and not merged.get(key):
                continue
            else:
                merged[key] = strategic_merge(merged.get(key), value, key)
        return merged
    if isinstance(patch, list) and isinstance(target, list) and field in MERGE_KEYS:
        key = MERGE_KEYS[field]
        merged_list = list(target)
        for item in patch:
            at = next((i for i, old in enumerate(merged_list) if old.get(key) == item.get(key)), None)
            if at is None and field in _OWN_LISTS:
                continue
            if at is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[at] = strategic_merge(merged_list[at], item, field)
        return merged_list
    return copy.deepcopy(patch)


def _check_kept(before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    meta_before, meta_after = before.get("metadata") or {}, after.get("metadata") or {}
    for key in ("name", "namespace"):
        if meta_before.get(key) != meta_after.get(key):
            raise ValueError(f"pod overrides may not change the pod's {key}")
    labels = meta_after.get("labels") or {}
    for key, value in (meta_before.get("labels") or {}).items():
        if labels.get(key) != value:
            raise ValueError(f"pod overrides may not change the platform's label {key}")
    spec_before, spec_after = before.get("spec") or {}, after.get("spec") or {}
    for key in _KEPT_SPEC:
        if spec_before.get(key) != spec_after.get(key):
            raise ValueError(f"pod overrides may not change spec.{key}")
    for field in ("containers", "initContainers"):
        old = {c["name"]: c for c in spec_before.get(field) or []}
        new = spec_after.get(field) or []
        if sorted(c.get("name") for c in new) != sorted(old):
            raise ValueError(
                f"pod overrides may not add or remove {field} (the pod has {', '.join(old) or 'none'})"
            )
        for container in new:
            for key in ("image", "command", "args", "env", "envFrom", "resources", "securityContext"):
                if container.get(key) != old[container["name"]].get(key):
                    raise ValueError(f"pod overrides may not change {field} {container['name']}'s {key}")
    own = {v["name"]: v for v in spec_before.get("volumes") or []}
    for volume in spec_after.get("volumes") or []:
        if "hostPath" in volume and own.get(volume.get("name")) != volume:
            raise ValueError(f"pod overrides may not add a hostPath volume ({volume.get('name')})")
        if volume.get("name") in own and own[volume["name"]] != volume:
            raise ValueError(f"pod overrides may not change the platform's volume {volume['name']}")

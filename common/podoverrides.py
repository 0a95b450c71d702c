"""Operator overrides of learner pods, validated: what an operator may add to the pods the platform builds.

Pure (no Django, no cluster call), so the settings (POD_OVERRIDES, checked when they load), the tenant
policy (checked at every edit) and the pod builder's caller (`jobs.cluster.podspec`) share one reading of
them. An overrides document is a JSON object with any of:

  tolerations          [{key, operator, value, effect, tolerationSeconds}]   added to the learner's own
  node_selector        {label: value}                                          merged, later wins
  node_affinity        [{key, operator, values}]   required, ANDed into every term the platform's pod has
  priority_class_name  "name"                                                   later wins
  labels, annotations  {key: value}                                             merged, later wins
  patch                a strategic-merge-style patch of the pod ({"spec": {...}}), applied last

The platform's own pod comes first, then the global overrides, then the tenant's, then the patches (the
global one, then the tenant's); clusterio.overrides applies them. What would break a tenant's isolation or
the platform's hold on its pods is refused here, with the path at fault (`REFUSED_*`, docs/operations.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s

FIELDS = (
    "tolerations",
    "node_selector",
    "node_affinity",
    "priority_class_name",
    "labels",
    "annotations",
    "patch",
)
MAX_ENTRIES = 50
MAX_PATCH_BYTES = 64 * 1024
TOLERATION_OPERATORS = ("Exists", "Equal")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
AFFINITY_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
# The label and annotation keys the platform owns: it finds, counts and tears down its pods by them.
PLATFORM_KEY_PREFIXES = ("trainyard.io/", "app.kubernetes.io/managed-by", "autoscaling.x-k8s.io/")
# The learner pod's containers and init containers (clusterio.builders: CONTAINER_NAME, FETCH_CONTAINER_NAME);
# a patch may only change these, never add one (a container of its own would run outside the platform's
# security context). A pod without the init container (no code or data to fetch) is left as it is.
PLATFORM_CONTAINERS = {"containers": ("learner",), "initContainers": ("fetch",)}

# Pod spec fields a patch may not touch, and why: the node's namespaces and files, the API token, the
# identity and place of the pod, its security context, and what has a field of its own (so that admission,
# which reads those fields, sees what the pods carry).
REFUSED_SPEC: dict[str, str] = {
    "hostNetwork": "a learner never shares the node's network",
    "hostPID": "a learner never shares the node's processes",
    "hostIPC": "a learner never shares the node's IPC",
    "hostUsers": "a learner never shares the node's user namespace",
    "securityContext": "the pod's security context is the platform's",
    "serviceAccountName": "a learner runs without the cluster's credentials",
    "serviceAccount": "a learner runs without the cluster's credentials",
    "automountServiceAccountToken": "a learner runs without the cluster's credentials",
    "nodeName": "admission chooses the node",
    "restartPolicy": "the platform retries a job itself",
    "hostname": "learners find each other by the platform's names",
    "subdomain": "learners find each other by the platform's names",
    "enableServiceLinks": "the platform sets the learner's environment",
    "ephemeralContainers": "containers are the platform's",
    "tolerations": "use `tolerations` (admission reads it)",
    "nodeSelector": "use `node_selector`",
    "priorityClassName": "use `priority_class_name`",
    "priority": "use `priority_class_name`",
}
REFUSED_CONTAINER: dict[str, str] = {
    "image": "the job's spec chooses the image",
    "command": "the job's spec chooses the command",
    "args": "the job's spec chooses the command",
    "workingDir": "the platform sets the working directory",
    "env": "the platform sets the learner's environment",
    "envFrom": "the platform sets the learner's environment",
    "resources": "admission and the tenant's quota count the job's resources",
    "securityContext": "a container's security context (privileged, capabilities, user) is the platform's",
}
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_MODEL = re.compile(r"^(list|dict)\[(.*)\]$|^dict\(str, (.*)\)$")


class OverridesError(ValueError):
    """The overrides are refused; `problems` lists each one as `path: why`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def overrides_clean(value: Any) -> dict[str, Any]:
    """The overrides document `value`, checked (raises OverridesError naming every problem) and without its
    empty fields ({} for none); None and "" read as none."""
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise OverridesError([f"must be a JSON object with any of {', '.join(FIELDS)}"])
    problems: list[str] = []
    clean: dict[str, Any] = {}
    for name, item in value.items():
        if name not in FIELDS:
            problems.append(f"{name}: unknown field (known: {', '.join(FIELDS)})")
        elif item not in (None, "", [], {}):
            clean[name] = _CHECKS[name](item, name, problems)
    if problems:
        raise OverridesError(problems)
    return clean


def overrides_tolerations(*documents: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every toleration the (clean) documents add, in order: what admission must count the pods as tolerating."""
    return [t for doc in documents for t in doc.get("tolerations", [])]


def overrides_select_nodes(document: Mapping[str, Any]) -> bool:
    """Whether the (clean) document keeps pods off some nodes by their labels (node_selector, node_affinity)."""
    return bool(document.get("node_selector") or document.get("node_affinity"))


def node_matches(document: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a node with `labels` meets the (clean) document's node_selector and node_affinity, as the
    kube-scheduler reads them: what admission must know so as not to place a job where its pods cannot go."""
    if any(labels.get(key) != value for key, value in (document.get("node_selector") or {}).items()):
        return False
    return all(_requirement_met(r, labels) for r in document.get("node_affinity") or [])


def _requirement_met(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or []
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator == "NotIn":
        return labels.get(key) not in values
    if key not in labels:
        return False
    if operator == "In":
        return labels[key] in values
    try:
        number, limit = int(labels[key]), int(values[0])
    except ValueError:
        return False
    return number > limit if operator == "Gt" else number < limit


def _tolerations(value: Any, path: str, problems: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for i, item in enumerate(_list(value, path, problems)):
        at = f"{path}[{i}]"
        if not _object(item, at, problems, ("key", "operator", "value", "effect", "tolerationSeconds")):
            continue
        key, value_ = item.get("key") or "", item.get("value") or ""
        operator, effect = item.get("operator") or "Equal", item.get("effect") or ""
        seconds = item.get("tolerationSeconds")
        if operator not in TOLERATION_OPERATORS:
            problems.append(f"{at}.operator: must be Exists or Equal, got {operator!r}")
        if key and not _qualified(key):
            problems.append(f"{at}.key: {key!r} is not a label key like example.com/gpu")
        if not key and operator != "Exists":
            problems.append(f"{at}: a toleration without a key must use the Exists operator")
        if operator == "Exists" and value_:
            problems.append(f"{at}.value: an Exists toleration has no value")
        if not isinstance(value_, str) or (value_ and not _LABEL_VALUE.match(value_)):
            problems.append(f"{at}.value: {value_!r} is not a taint value")
        if effect not in ("", *TAINT_EFFECTS):
            problems.append(
                f"{at}.effect: must be one of {', '.join(TAINT_EFFECTS)} or empty, got {effect!r}"
            )
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            problems.append(f"{at}.tolerationSeconds: must be a whole number of seconds")
        elif seconds is not None and effect != "NoExecute":
            problems.append(f"{at}.tolerationSeconds: applies to NoExecute tolerations only")
        toleration = {"operator": operator}
        toleration |= {k: v for k, v in (("key", key), ("value", value_), ("effect", effect)) if v}
        found.append(toleration | ({"tolerationSeconds": seconds} if seconds is not None else {}))
    return found


def _node_selector(value: Any, path: str, problems: list[str]) -> dict[str, str]:
    found = _string_map(value, path, problems)
    for key, item in found.items():
        if not _LABEL_VALUE.match(item):
            problems.append(f"{path}.{key}: {item!r} is not a label value")
    return found


def _node_affinity(value: Any, path: str, problems: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for i, item in enumerate(_list(value, path, problems)):
        at = f"{path}[{i}]"
        if not _object(item, at, problems, ("key", "operator", "values")):
            continue
        key, operator, values = item.get("key"), item.get("operator"), item.get("values") or []
        if not isinstance(key, str) or not _qualified(key):
            problems.append(f"{at}.key: {key!r} is not a label key like topology.kubernetes.io/zone")
        if operator not in AFFINITY_OPERATORS:
            problems.append(
                f"{at}.operator: must be one of {', '.join(AFFINITY_OPERATORS)}, got {operator!r}"
            )
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            problems.append(f"{at}.values: must be a list of strings")
        elif operator in ("In", "NotIn") and not values:
            problems.append(f"{at}.values: {operator} needs at least one value")
        elif operator in ("Exists", "DoesNotExist") and values:
            problems.append(f"{at}.values: {operator} takes no values")
        elif operator in ("Gt", "Lt") and (len(values) != 1 or not values[0].lstrip("-").isdigit()):
            problems.append(f"{at}.values: {operator} takes one whole number")
        found.append({"key": key, "operator": operator} | ({"values": values} if values else {}))
    return found


def _priority_class(value: Any, path: str, problems: list[str]) -> str:
    if not isinstance(value, str) or not _DNS_SUBDOMAIN.match(value):
        problems.append(f"{path}: {value!r} is not a PriorityClass name")
    elif value.startswith("system-"):
        problems.append(f"{path}: {value} is reserved for the cluster's own pods")
    return str(value)


def _labels(value: Any, path: str, problems: list[str]) -> dict[str, str]:
    found = _string_map(value, path, problems)
    for key, item in found.items():
        if not _LABEL_VALUE.match(item):
            problems.append(f"{path}.{key}: {item!r} is not a label value")
    return found


def _annotations(value: Any, path: str, problems: list[str]) -> dict[str, str]:
    return _string_map(value, path, problems)


def _string_map(value: Any, path: str, problems: list[str]) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        problems.append(f"{path}: must be an object of strings")
        return {}
    if len(value) > MAX_ENTRIES:
        problems.append(f"{path}: at most {MAX_ENTRIES} entries")
    for key in value:
        if not _qualified(key):
            problems.append(f"{path}.{key}: not a key like example.com/team")
        elif key.startswith(PLATFORM_KEY_PREFIXES):
            problems.append(f"{path}.{key}: the platform owns this key (it finds its pods by it)")
    return dict(value)


def _patch(value: Any, path: str, problems: list[str]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        problems.append(f'{path}: must be an object like {{"spec": {{...}}}}')
        return {}
    if len(repr(value)) > MAX_PATCH_BYTES:
        problems.append(f"{path}: larger than {MAX_PATCH_BYTES} bytes")
        return dict(value)
    for key, item in value.items():
        if key == "spec":
            _patch_spec(item, f"{path}.spec", problems)
        elif key == "metadata":
            problems.append(
                f"{path}.metadata: use `labels` and `annotations`; the rest of a pod's metadata is the platform's"
            )
        else:
            problems.append(f"{path}.{key}: unknown field (a patch holds `spec`)")
    return dict(value)


def _patch_spec(spec: Any, path: str, problems: list[str]) -> None:
    if not isinstance(spec, Mapping):
        problems.append(f"{path}: must be an object")
        return
    for key, why in REFUSED_SPEC.items():
        if key in spec:
            problems.append(f"{path}.{key}: cannot be overridden ({why})")
    affinity = spec.get("affinity")
    if "affinity" in spec and affinity is None:
        problems.append(f"{path}.affinity: cannot be removed (the platform's node binding must stay)")
    if isinstance(affinity, Mapping) and "nodeAffinity" in affinity:
        problems.append(
            f"{path}.affinity.nodeAffinity: use `node_affinity` (the platform's binding must stay)"
        )
    for field in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(field) or []):
            at = f"{path}.{field}[{i}]"
            if not isinstance(container, Mapping) or container.get("name") not in PLATFORM_CONTAINERS[field]:
                names = ", ".join(PLATFORM_CONTAINERS[field])
                problems.append(f"{at}.name: must name one of the learner pod's {field} ({names})")
                continue
            for key, why in REFUSED_CONTAINER.items():
                if key in container:
                    problems.append(f"{at}.{key}: cannot be overridden ({why})")
    for i, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, Mapping) and "hostPath" in volume:
            problems.append(f"{path}.volumes[{i}].hostPath: a learner never mounts the node's folders")
    _check_model(spec, "V1PodSpec", path, problems)


def _check_model(value: Any, kind: str, path: str, problems: list[str]) -> None:
    """Check `value` against the Kubernetes model `kind` (the client's own field list): unknown fields and
    the wrong kinds of values are refused; null (delete the field) is allowed anywhere."""
    if value is None:
        return
    nested = _MODEL.match(kind)
    if nested:
        inner = nested.group(2) or nested.group(3)
        if kind.startswith("list"):
            if not isinstance(value, list):
                problems.append(f"{path}: must be a list")
                return
            for i, item in enumerate(value):
                _check_model(item, inner, f"{path}[{i}]", problems)
        elif not isinstance(value, Mapping):
            problems.append(f"{path}: must be an object")
        else:
            for key, item in value.items():
                _check_model(item, inner, f"{path}.{key}", problems)
        return
    expected = _PRIMITIVES.get(kind)
    if expected is not None:
        if kind == "object":
            return
        if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
            problems.append(f"{path}: must be {_PRIMITIVE_WORDS[kind]}")
        return
    model = getattr(k8s, kind, None)
    if model is None:
        return
    if not isinstance(value, Mapping):
        problems.append(f"{path}: must be an object")
        return
    fields = {api: python for python, api in model.attribute_map.items()}
    for key, item in value.items():
        if key == "$patch":
            problems.append(f"{path}.$patch: patch directives are not supported")
        elif key not in fields:
            problems.append(f"{path}.{key}: unknown field of {kind[2:]}")
        else:
            _check_model(item, model.openapi_types[fields[key]], f"{path}.{key}", problems)


_PRIMITIVES: dict[str, Any] = {
    "str": str,
    "int": int,
    "bool": bool,
    "float": (int, float),
    "object": object,
    "datetime": str,
    "date": str,
}
_PRIMITIVE_WORDS = {
    "str": "a string",
    "int": "a whole number",
    "bool": "true or false",
    "float": "a number",
    "datetime": "a time",
    "date": "a date",
}


def _list(value: Any, path: str, problems: list[str]) -> list[Any]:
    if not isinstance(value, list):
        problems.append(f"{path}: must be a list")
        return []
    if len(value) > MAX_ENTRIES:
        problems.append(f"{path}: at most {MAX_ENTRIES} entries")
        return []
    return value


def _object(item: Any, path: str, problems: list[str], known: tuple[str, ...]) -> bool:
    if not isinstance(item, Mapping):
        problems.append(f"{path}: must be an object with {', '.join(known)}")
        return False
    unknown = [key for key in item if key not in known]
    for key in unknown:
        problems.append(f"{path}.{key}: unknown field (known: {', '.join(known)})")
    return not unknown


def _qualified(key: Any) -> bool:
    return isinstance(key, str) and len(key) <= 316 and bool(_QUALIFIED_NAME.match(key))


_CHECKS = {
    "tolerations": _tolerations,
    "node_selector": _node_selector,
    "node_affinity": _node_affinity,
    "priority_class_name": _priority_class,
    "labels": _labels,
    "annotations": _annotations,
    "patch": _patch,
}

"""Validation (422 Invalid) and defaulting of incoming objects, following the apiserver's rules."""

from __future__ import annotations

import re
from typing import Any

from kubesim.errors import invalid
from kubesim.quantity import QuantityError, parse_quantity

Obj = dict[str, Any]
Cause = tuple[str, str, str]

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAMED = {"namespaces", "services"}
GPU = "nvidia.com/gpu"
_GROUPS = {"jobs": "batch", "storageclasses": "storage.k8s.io"}


def name_causes(plural: str, name: str) -> list[Cause]:
    """Causes for a name that is not a DNS-1123 label (namespaces, services) or subdomain (the rest)."""
    if plural in _LABEL_NAMED:
        if len(name) > 63 or not _LABEL.match(name):
            return [
                (
                    "metadata.name",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": a lowercase RFC 1123 label '
                    "must consist of lower case alphanumeric characters or '-', and must start and end "
                    "with an "
                    "alphanumeric character",
                )
            ]
    elif len(name) > 253 or not _SUBDOMAIN.match(name):
        return [
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain '
                "must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
                "with an "
                "alphanumeric character",
            )
        ]
    return []


def validate(plural: str, kind: str, obj: Obj) -> None:
    """Raise 422 Invalid when the object breaks a rule kubesim checks."""
    name = obj["metadata"].get("name", "")
    causes = name_causes(plural, name)
    if plural == "pods":
        causes += pod_spec_causes(obj.get("spec") or {}, "spec")
    elif plural == "jobs":
        causes += _job_causes(obj.get("spec") or {})
    elif plural == "persistentvolumeclaims":
        from kubesim.volumes import claim_causes

        causes += claim_causes(obj)
    elif plural == "namespaces":
        from kubesim.podsecurity import label_causes

        causes += label_causes(obj)
    elif plural == "storageclasses":
        from kubesim.storageclasses import class_causes

        causes += class_causes(obj)
    elif plural == "priorityclasses":
        from kubesim.priorityclasses import class_causes as priority_class_causes

        causes += priority_class_causes(obj)
    elif plural == "secrets":
        from kubesim.registries import secret_causes

        causes += secret_causes(obj)
    for key in ("labels", "annotations"):
        for label_key, value in (obj["metadata"].get(key) or {}).items():
            if not isinstance(value, str):
                causes.append(
                    (f"metadata.{key}", "FieldValueInvalid", f"{label_key}: value must be a string")
                )
    if causes:
        raise invalid(kind, name, causes, _GROUPS.get(plural, ""))


def pod_spec_causes(spec: Obj, path: str) -> list[Cause]:
    """Problems with a pod spec (used for pods and job templates)."""
    causes: list[Cause] = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append((f"{path}.containers", "FieldValueRequired", "Required value"))
    seen: set[str] = set()
    for i, container in enumerate((spec.get("initContainers") or []) + containers):
        cpath = f"{path}.containers[{i}]"
        cname = container.get("name") or ""
        if not cname:
            causes.append((f"{cpath}.name", "FieldValueRequired", "Required value"))
        elif not _LABEL.match(cname) or len(cname) > 63:
            causes.append(
                (f"{cpath}.name", "FieldValueInvalid", f'Invalid value: "{cname}": must be a DNS label')
            )
        elif cname in seen:
            causes.append((f"{cpath}.name", "FieldValueDuplicate", f'Duplicate value: "{cname}"'))
        seen.add(cname)
        causes += _resource_causes(container.get("resources") or {}, f"{cpath}.resources")
        causes += _container_restart_causes(container, cpath, init=i < len(spec.get("initContainers") or []))
    policy = spec.get("restartPolicy", "Always")
    if policy not in ("Always", "OnFailure", "Never"):
        causes.append((f"{path}.restartPolicy", "FieldValueNotSupported", f'Unsupported value: "{policy}"'))
    return causes


def _container_restart_causes(container: Obj, path: str, *, init: bool) -> list[Cause]:
    """A container's own restartPolicy: only `Always`, and only on an init container (a native sidecar)."""
    policy = container.get("restartPolicy")
    if policy is None:
        return []
    if not init:
        return [
            (
                f"{path}.restartPolicy",
                "FieldValueForbidden",
                "Forbidden: may not be set for non-init containers",
            )
        ]
    if policy != "Always":
        return [
            (
                f"{path}.restartPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{policy}": supported values: "Always"',
            )
        ]
    return []


def _resource_causes(resources: Obj, path: str) -> list[Cause]:
    causes: list[Cause] = []
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    parsed: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for section, values in (("requests", requests), ("limits", limits)):
        for res, value in values.items():
            try:
                parsed[section][res] = parse_quantity(value)
            except QuantityError:
                causes.append((f"{path}.{section}[{res}]", "FieldValueInvalid", f'Invalid value: "{value}"'))
                continue
            if parsed[section][res] < 0:
                causes.append(
                    (f"{path}.{section}[{res}]", "FieldValueInvalid", "must be greater than or equal to 0")
                )
    req, lim = parsed["requests"], parsed["limits"]
    if GPU in req or GPU in lim:
        if GPU not in lim:
            causes.append(
                (
                    f"{path}.limits",
                    "FieldValueRequired",
                    f"Limit must be set for non overcommitable resources: {GPU}",
                )
            )
        elif GPU in req and req[GPU] != lim[GPU]:
            causes.append(
                (
                    f"{path}.requests[{GPU}]",
                    "FieldValueInvalid",
                    f'Invalid value: "{requests[GPU]}": must be equal to {GPU} limit of {limits[GPU]}',
                )
            )
    for res in ("cpu", "memory"):
        if res in req and res in lim and req[res] > lim[res]:
            causes.append(
                (
                    f"{path}.requests",
                    "FieldValueInvalid",
                    f'Invalid value: "{requests[res]}": must be '
                    f"less than or equal to {res} limit of {limits[res]}",
                )
            )
    return causes


def _job_causes(spec: Obj) -> list[Cause]:
    causes: list[Cause] = []
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    causes += pod_spec_causes(tspec, "spec.template.spec")
    if tspec.get("restartPolicy", "Always") not in ("Never", "OnFailure"):
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                "FieldValueNotSupported",
                f'Unsupported value: "{tspec.get("restartPolicy", "Always")}": supported values: '
                '"OnFailure", "Never"',
            )
        )
    for field in ("parallelism", "completions", "backoffLimit"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{field}", "FieldValueInvalid", "must be greater than or equal to 0"))
    if spec.get("completionMode") == "Indexed" and spec.get("completions") is None:
        causes.append(("spec.completions", "FieldValueRequired", "when completion mode is Indexed"))
    return causes


def default_pod(pod: Obj, toleration_seconds: int = 300) -> None:
    """Fill the defaults the apiserver adds to a new pod; ``toleration_seconds`` is what the
    DefaultTolerationSeconds admission gives a pod that does not tolerate not-ready/unreachable nodes."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("securityContext", {})
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations):
            tolerations.append(
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": toleration_seconds,
                }
            )
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        resources = container.setdefault("resources", {})
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        for res, value in limits.items():
            requests.setdefault(res, value)
        if requests:
            resources["requests"] = requests
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}


def qos_class(spec: Obj) -> str:
    """Guaranteed, Burstable or BestEffort, from the containers' requests and limits."""
    containers = spec.get("containers") or []
    any_set = False
    guaranteed = True
    for container in containers:
        res = container.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        any_set = any_set or bool(req) or bool(lim)
        for name in ("cpu", "memory"):
            if name not in lim or req.get(name, lim[name]) != lim[name]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_job(job: Obj) -> None:
    """Fill the defaults of a new Job (parallelism, completions, backoffLimit, selector, labels)."""
    spec = job.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    uid = job["metadata"]["uid"]
    name = job["metadata"]["name"]
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    if not spec.get("manualSelector"):
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
    job["metadata"]["labels"] = job["metadata"].get("labels") or dict(labels)
    job["status"] = {}

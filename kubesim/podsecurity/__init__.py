"""Pod Security admission: a namespace's `pod-security.kubernetes.io/enforce` level checked on every pod it
gets, as the apiserver's PodSecurity plugin checks the Pod Security Standards (version `latest`; an
`enforce-version` label is validated, then read as latest), refusing with its words:
``pods "x" is forbidden: violates PodSecurity "restricted:latest": reason (detail), ...``.

Checks run in the plugin's order (its baseline checks, then the restricted ones or, at baseline, the baseline
checks that the restricted level replaces) and word their reasons and details as it does. Pods that exist when
a namespace's label changes stay (the apiserver only warns); an update re-checks a pod only when it changes an
image, as the plugin does. No exemptions (the plugin's defaults) and no audit or warn modes.
"""

from __future__ import annotations

import re
from typing import Any

from kubesim.errors import forbidden
from kubesim.podsecurity.baseline import BASELINE, REPLACED_BY_RESTRICTED
from kubesim.podsecurity.restricted import RESTRICTED
from kubesim.podsecurity.wording import Obj

Cause = tuple[str, str, str]

PREFIX = "pod-security.kubernetes.io/"
ENFORCE = PREFIX + "enforce"
LEVELS = ("privileged", "baseline", "restricted")
_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")


def label_causes(namespace: Obj) -> list[Cause]:
    """422 causes for Pod Security labels with values the plugin cannot parse (it refuses such a namespace)."""
    causes: list[Cause] = []
    for key, value in sorted((namespace["metadata"].get("labels") or {}).items()):
        if not key.startswith(PREFIX):
            continue
        mode = key[len(PREFIX) :]
        if mode in ("enforce", "audit", "warn") and value not in LEVELS:
            problem = f"must be one of {', '.join(LEVELS)}"
        elif mode in ("enforce-version", "audit-version", "warn-version") and not (
            value == "latest" or _VERSION.match(str(value))
        ):
            problem = 'must be "latest" or "v1.x"'
        else:
            continue
        causes.append(
            (f"metadata.labels[{key}]", "FieldValueInvalid", f'Invalid value: "{value}": {problem}')
        )
    return causes


def enforced_level(namespace: Obj | None) -> str:
    """The level a namespace enforces: privileged without the label, restricted for a value that does not
    parse (the plugin fails closed)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE, "privileged")
    return level if level in LEVELS else "restricted"


def admit(pod: Obj, namespace: Obj | None, old: Obj | None = None) -> None:
    """Refuse (403) a pod that its namespace's enforced level forbids; an update (`old` given) is checked only
    when it changes an image."""
    level = enforced_level(namespace)
    if level == "privileged" or (old is not None and not _images_changed(old, pod)):
        return
    found = violations(pod, level)
    if found:
        detail = ", ".join(f"{reason} ({text})" if text else reason for reason, text in found)
        name = pod["metadata"].get("name", "")
        raise forbidden("pods", name, f'violates PodSecurity "{level}:latest": {detail}')


def violations(pod: Obj, level: str) -> list[tuple[str, str]]:
    """(reason, detail) of every check `pod` fails at `level`, in the plugin's order."""
    if level == "privileged":
        return []
    checks = BASELINE + (RESTRICTED if level == "restricted" else REPLACED_BY_RESTRICTED)
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return [result for check in checks if (result := check(meta, spec)) is not None]


def _images_changed(old: Obj, new: Obj) -> bool:
    def images(pod: Obj) -> list[tuple[str, Any]]:
        spec = pod.get("spec") or {}
        return [
            (c.get("name"), c.get("image"))
            for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or []
        ]

    return images(old) != images(new)

"""Taints and tolerations as the kube-scheduler matches them, in one place for the pods and for admission.

The builders put `learner_tolerations` on every learner pod, and admission asks `tolerates` which nodes
those pods may go to, so the platform never admits a job onto a node its pods would be kept off.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Operator = Literal["Exists", "Equal"]
# The effects that keep a pod off a node; PreferNoSchedule only steers the scheduler's scoring.
HARD_EFFECTS = ("NoSchedule", "NoExecute")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NODE_UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NODE_NOT_READY_TAINT = "node.kubernetes.io/not-ready"


@dataclass(frozen=True, order=True)
class Taint:
    """One node taint (`spec.taints[]`); an empty value is no value."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        """kubectl's spelling: `key=value:Effect`, or `key:Effect` without a value."""
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class Toleration:
    """One pod toleration (`spec.tolerations[]`), with Kubernetes' matching rules in `tolerates`."""

    key: str = ""
    operator: Operator = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.operator not in ("Exists", "Equal"):
            raise ValueError(f"toleration operator must be Exists or Equal, got {self.operator!r}")
        if self.operator == "Exists" and self.value:
            raise ValueError("an Exists toleration has no value")
        if not self.key and self.operator != "Exists":
            raise ValueError("a toleration without a key must use the Exists operator")
        if self.effect and self.effect not in EFFECTS:
            raise ValueError(f"toleration effect must be one of {', '.join(EFFECTS)}, got {self.effect!r}")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("toleration_seconds applies to NoExecute tolerations only")

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' `Toleration.ToleratesTaint`: an empty effect matches every effect, an empty key (with
        Exists) every key; Exists ignores the value, Equal compares it."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    def as_api(self) -> dict[str, Any]:
        """The toleration as the API spells it (camelCase, empty fields left out)."""
        body: dict[str, Any] = {"operator": self.operator}
        if self.key:
            body["key"] = self.key
        if self.value:
            body["value"] = self.value
        if self.effect:
            body["effect"] = self.effect
        if self.toleration_seconds is not None:
            body["tolerationSeconds"] = self.toleration_seconds
        return body


GPU_TAINT_KEY = "nvidia.com/gpu"
# Any NoSchedule taint on the key the device plugin's resource is named after, with any value: GKE's
# `nvidia.com/gpu=present:NoSchedule`, the common `nvidia.com/gpu=true:NoSchedule` and a bare key alike
# (the toleration Kubernetes' ExtendedResourceToleration admission plugin adds to pods asking for GPUs).
DEFAULT_GPU_TOLERATIONS = (Toleration(key=GPU_TAINT_KEY, operator="Exists", effect="NoSchedule"),)


def parse_toleration(text: str) -> Toleration:
    """A toleration from kubectl's taint spelling, as operators write it in settings.

    `key:Effect` tolerates the key with any value (Exists), `key=value:Effect` that value only (Equal);
    without `:Effect` every effect is tolerated; `*` tolerates every taint. Raises ValueError.
    """
    text = text.strip()
    if text == "*":
        return Toleration(operator="Exists")
    head, sep, effect = text.rpartition(":") if ":" in text else (text, "", "")
    if sep and not effect:
        raise ValueError(f"toleration {text!r} ends with ':' but names no effect")
    key, eq, value = head.partition("=")
    if not key:
        raise ValueError(f"toleration {text!r} has no key")
    return Toleration(key=key, operator="Equal" if eq else "Exists", value=value, effect=effect)


def taints_of(node: Mapping[str, Any]) -> tuple[Taint, ...]:
    """The node's taints that keep pods off it (NoSchedule, NoExecute), from its API JSON, sorted."""
    found = {
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect")))
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("effect") in HARD_EFFECTS
    }
    return tuple(sorted(found))


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of `tolerations` tolerates `taint`."""
    return any(t.tolerates(taint) for t in tolerations)


def untolerated(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> tuple[Taint, ...]:
    """The taints among `taints` that none of `tolerations` tolerates (a node is open to the pod when none)."""
    tolerations = tuple(tolerations)
    return tuple(t for t in taints if not tolerates(tolerations, t))


def learner_tolerations(
    *, gpus: int, gpu_tolerations: Iterable[Toleration], node_lost_seconds: int | None
) -> tuple[Toleration, ...]:
    """The tolerations a learner pod carries: the configured GPU ones when it asks for GPUs (a CPU-only
    learner tolerates no GPU taint, so it stays off GPU nodes that are tainted), and, with
    `node_lost_seconds`, how long it stays bound to a NotReady or unreachable node."""
    found = list(gpu_tolerations) if gpus > 0 else []
    if node_lost_seconds is not None:
        found += [
            Toleration(key=key, operator="Exists", effect="NoExecute", toleration_seconds=node_lost_seconds)
            for key in (NODE_UNREACHABLE_TAINT, NODE_NOT_READY_TAINT)
        ]
    return tuple(found)

"""Fault injection: API requests answered with an error code or a hang (a failing admission webhook among
them), image pulls that fail, and pods a kubelet rejects at admission."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kubesim.errors import ApiError


@dataclass
class FaultRule:
    """Requests whose method and path match get ``code`` (after hanging ``hang_seconds``), ``count`` times."""

    method: str
    path: str
    code: int | None = None
    hang_seconds: float = 0.0
    count: int | None = None
    message: str = "injected fault"
    id: int = 0
    pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.pattern = re.compile(self.path)

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the admin endpoint."""
        return {
            "id": self.id,
            "method": self.method,
            "path": self.path,
            "code": self.code,
            "hangSeconds": self.hang_seconds,
            "count": self.count,
        }


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass
class ImagePullRule:
    """Containers whose image matches the ``pattern`` regex (``re.search``) fail to pull with ``message``."""

    pattern: str
    message: str = "kubesim: injected image pull failure"
    id: int = 0
    regex: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.regex = re.compile(self.pattern)

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the admin endpoint."""
        return {"id": self.id, "pattern": self.pattern, "message": self.message}


# What a kubelet writes after `Pod was rejected: ` for the reasons tests inject most (kubelet.rejectPod).
ADMISSION_MESSAGES = {
    "UnexpectedAdmissionError": (
        "Allocate failed due to no healthy devices present; cannot allocate unhealthy devices "
        "nvidia.com/gpu, which is unexpected"
    ),
    "OutOfnvidia.com/gpu": (
        "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 0, capacity: 0"
    ),
}
WEBHOOK_FAILURE = (
    'Internal error occurred: failed calling webhook "sidecar-injector.kubesim.io": failed to call '
    'webhook: Post "https://injector.kubesim-system.svc:443/inject?timeout=10s": context deadline exceeded'
)


def pod_create_path(namespace_regex: str) -> str:
    """The path regex of pod creations in namespaces whose whole name matches ``namespace_regex``."""
    return f"^/api/v1/namespaces/(?:{namespace_regex})/pods/?$"


@dataclass
class AdmissionRule:
    """Pods whose ``namespace/name`` matches ``pattern`` (``re.search``), on a node whose name matches ``node``
    (any when empty), are rejected by their kubelet with ``reason`` and ``message``, ``count`` times."""

    pattern: str
    reason: str = "UnexpectedAdmissionError"
    message: str = ""
    node: str = ""
    count: int | None = None
    id: int = 0
    regex: re.Pattern[str] = field(init=False, repr=False)
    node_regex: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.regex = re.compile(self.pattern)
        self.node_regex = re.compile(self.node)
        self.message = self.message or ADMISSION_MESSAGES.get(self.reason, f"{self.reason}: injected")

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the admin endpoint."""
        return {
            "id": self.id,
            "pattern": self.pattern,
            "node": self.node,
            "reason": self.reason,
            "message": self.message,
            "count": self.count,
        }


class Faults:
    """The active fault rules: the server consults the API rules before routing every request, the
    kubelets consult the image-pull rules before starting each container."""

    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._image_rules: list[ImagePullRule] = []
        self._admission_rules: list[AdmissionRule] = []
        self._lock = threading.Lock()
        self._next_id = 1

    def fail_image_pulls(self, rule: ImagePullRule) -> ImagePullRule:
        """Make pulls of matching images fail until the rule is cleared; returns it with its id set."""
        with self._lock:
            rule.id = self._next_id
            self._next_id += 1
            self._image_rules.append(rule)
        return rule

    def clear_image_pulls(self, rule_id: int | None = None) -> None:
        """Let images pull again: one rule, or all of them."""
        with self._lock:
            self._image_rules = [r for r in self._image_rules if rule_id is not None and r.id != rule_id]

    def image_rules(self) -> list[ImagePullRule]:
        """The active image-pull rules."""
        with self._lock:
            return list(self._image_rules)

    def image_pull_error(self, image: str) -> str | None:
        """The pull error for ``image``, or None when it pulls (kubesim pulls nothing: the image is ignored)."""
        with self._lock:
            rule = next((r for r in self._image_rules if r.regex.search(image)), None)
        return rule.message if rule else None

    def reject_pod_admission(self, rule: AdmissionRule) -> AdmissionRule:
        """Make kubelets reject matching pods at admission until cleared (or ``count`` times)."""
        with self._lock:
            rule.id = self._next_id
            self._next_id += 1
            self._admission_rules.append(rule)
        return rule

    def clear_admission_rejections(self, rule_id: int | None = None) -> None:
        """Let kubelets admit pods again: one rule, or all of them."""
        with self._lock:
            self._admission_rules = [
                r for r in self._admission_rules if rule_id is not None and r.id != rule_id
            ]

    def admission_rules(self) -> list[AdmissionRule]:
        """The active kubelet admission rules."""
        with self._lock:
            return list(self._admission_rules)

    def admission_rejection(self, namespace: str, name: str, node: str) -> tuple[str, str] | None:
        """``(reason, message)`` for a pod its kubelet must reject now (one use of the rule), or None."""
        with self._lock:
            rule = next(
                (
                    r
                    for r in self._admission_rules
                    if r.regex.search(f"{namespace}/{name}") and r.node_regex.search(node)
                ),
                None,
            )
            if rule is None:
                return None
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    self._admission_rules.remove(rule)
        return rule.reason, rule.message

    def add(self, rule: FaultRule) -> FaultRule:
        """Activate a rule; returns it with its id set."""
        with self._lock:
            rule.id = self._next_id
            self._next_id += 1
            self._rules.append(rule)
        return rule

    def clear(self, rule_id: int | None = None) -> None:
        """Remove one API rule, or all of them."""
        with self._lock:
            self._rules = [r for r in self._rules if rule_id is not None and r.id != rule_id]

    def rules(self) -> list[FaultRule]:
        """The active rules."""
        with self._lock:
            return list(self._rules)

    def apply(self, method: str, path: str, stopping: threading.Event) -> None:
        """Hang and/or raise for the first matching rule; no-op when none matches."""
        with self._lock:
            rule = next(
                (r for r in self._rules if r.method in ("*", method) and r.pattern.search(path)),
                None,
            )
            if rule is None:
                return
            if rule.count is not None:
                rule.count -= 1
                if rule.count <= 0:
                    self._rules.remove(rule)
        if rule.hang_seconds:
            deadline = time.monotonic() + rule.hang_seconds
            while time.monotonic() < deadline and not stopping.is_set():
                time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
        if rule.code:
            raise ApiError(rule.code, _REASONS.get(rule.code, "InternalError"), rule.message)

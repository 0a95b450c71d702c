"""The Pod Security checks' shared vocabulary: the result type, and how the plugin walks a pod and words its findings.

Reasons and details are compared word for word with the apiserver's (tests hold them), so every check
builds them with these helpers, as the plugin's checks share its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Obj = dict[str, Any]
# A failed check's (reason, detail); None when the pod passes.
Result = tuple[str, str] | None
Check = Callable[[Obj, Obj], Result]


def containers(spec: Obj) -> Iterator[Obj]:
    """Every container of a pod spec: init, regular and ephemeral, in that order (the plugin's walk)."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def sc(obj: Obj) -> Obj:
    """A pod spec's or container's securityContext ({} when unset)."""
    return obj.get("securityContext") or {}


def quote(items: list[str]) -> str:
    """`"a", "b"`, as the plugin lists names and values."""
    return '"' + '", "'.join(items) + '"' if items else ""


def plural(one: str, many: str, count: int) -> str:
    """`one` for a count of one, `many` otherwise."""
    return one if count == 1 else many


def who(names: list[str]) -> str:
    """`container "a"` or `containers "a", "b"`."""
    return f"{plural('container', 'containers', len(names))} {quote(names)}"


def who_set(pod_bad: bool, names: list[str]) -> str:
    """Who set a forbidden value: `pod`, the containers, or `pod and containers ...`."""
    return " and ".join((["pod"] if pod_bad else []) + ([who(names)] if names else []))

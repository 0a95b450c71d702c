"""Counts of the API requests kubesim has served, by verb and resource, as the apiserver's
`apiserver_request_total{verb,resource}` metric counts them (the `/kubesim/` admin endpoints are not
counted). Read with ``GET /kubesim/requests``, reset with ``DELETE /kubesim/requests``."""

from __future__ import annotations

import threading
from collections import Counter


def classify(method: str, path: str, watch: bool) -> tuple[str, str] | None:
    """The (verb, resource) of one request, as the apiserver names them, or None for a path that is not a
    resource (discovery, openapi)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        rest = parts[3:]
    else:
        return None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    if not rest:
        return None
    resource = "/".join([rest[0], *rest[2:3]])
    collection = len(rest) == 1
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method)
    if method == "GET":
        verb = "watch" if watch else "list" if collection else "get"
    elif method == "DELETE":
        verb = "deletecollection" if collection else "delete"
    return (verb or method.lower(), resource)


class RequestCounter:
    """Thread-safe counts of requests by (verb, resource)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def count(self, method: str, path: str, watch: bool) -> None:
        """Count one request (nothing for paths that are not resources)."""
        key = classify(method, path, watch)
        if key is not None:
            with self._lock:
                self._counts[key] += 1

    def snapshot(self) -> dict[str, int]:
        """The counts so far, keyed ``"verb resource"`` (e.g. ``"list pods"``)."""
        with self._lock:
            return {f"{verb} {resource}": n for (verb, resource), n in sorted(self._counts.items())}

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self._counts.clear()

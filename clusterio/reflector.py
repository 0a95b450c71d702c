"""The watch loop over every managed pod, in the shape of client-go's reflector.

List, then watch from the list's resourceVersion; the server ends each watch after a (jittered)
timeout and the loop watches again from the last resourceVersion seen (events and bookmarks alike).
A fresh list, whose full result goes to `on_sync` so the caller can reconcile anything it missed, comes
after a 410 Gone (the version was compacted away), after a callback that failed (its event is not
dropped: the state it carried comes back in the list), and every `relist_seconds` in any case (a watch
that silently sees nothing, e.g. from a resourceVersion the server never reaches, cannot last). Errors
back off, capped and with jitter.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clusterio import names
from clusterio.errors import ClusterError, Gone, error_from_status_object

if TYPE_CHECKING:
    from clusterio.client import Cluster
    from clusterio.logs import Stream

log = logging.getLogger(__name__)

EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")


class CallbackFailed(Exception):
    """A callback raised: list again (after a back-off) rather than lose what its event said."""


class PodReflector:
    """List+watch of all managed pods that calls back for every change.

    `on_sync(pods)` gets every current pod after each (re)list; `on_event(type, pod)` each ADDED,
    MODIFIED or DELETED watch event, in order. Callback exceptions are logged and counted in
    `callback_errors`, never fatal: the loop backs off and lists again. Counters: `lists` (all lists),
    `relists` (lists after the first), `watches` (watch connections opened), `errors` (failed calls);
    `last_resource_version` is where the next watch resumes; `healthy` tells whether its last list or watch
    succeeded after its last failure. `lister` and `watcher` replace the managed
    pods' list and watch (e.g. with nodes', or every pod's, for the capacity cache).
    """

    def __init__(
        self,
        cluster: Cluster,
        *,
        on_sync: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        label_selector: str | None = None,
        watch_timeout_seconds: int = 60,
        backoff_max: float = 5.0,
        relist_seconds: float = 300.0,
        on_alive: Callable[[], None] | None = None,
        lister: Callable[[], tuple[list[dict[str, Any]], str]] | None = None,
        watcher: Callable[[str, int], Stream] | None = None,
    ) -> None:
        if watch_timeout_seconds < 1:
            raise ValueError("watch_timeout_seconds must be at least 1")
        self.cluster = cluster
        self.on_sync = on_sync
        self.on_event = on_event
        self.label_selector = (
            label_selector if label_selector is not None else cluster.selector(names.managed_selector())
        )
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_max = backoff_max
        self.relist_seconds = relist_seconds
        self.on_alive = on_alive
        self.lister = lister or (lambda: cluster.list_pods(label_selector=self.label_selector))
        self.watcher = watcher or (
            lambda version, timeout: cluster.watch_pods(
                label_selector=self.label_selector, resource_version=version, timeout_seconds=timeout
            )
        )
        self.listed_at = 0.0
        self.last_resource_version = ""
        self.lists = 0
        self.relists = 0
        self.watches = 0
        self.errors = 0
        self.callback_errors = 0
        self.alive_at = 0.0
        self.failed_at = 0.0

    @property
    def healthy(self) -> bool:
        """Whether it has listed, and succeeded since its last failure (a quiet open watch is healthy)."""
        return self.alive_at > 0 and self.alive_at >= self.failed_at

    def run(self, stop: threading.Event) -> None:
        """List and watch until `stop` is set; never raises for API errors."""
        failures = 0
        need_list = True
        while not stop.is_set():
            try:
                if need_list or time.monotonic() - self.listed_at >= self.relist_seconds:
                    need_list = True
                    self._list()
                    need_list = False
                self._watch(stop)
                failures = 0
                continue
            except CallbackFailed:
                need_list = True
            except Gone as exc:
                log.info("pod watch expired (%s); listing again", exc)
                need_list = True
                if failures == 0:
                    failures = 1
                    continue
            except ClusterError as exc:
                log.warning("pod list/watch failed: %s", exc)
            except Exception:
                log.exception("pod list/watch failed unexpectedly")
            self.errors += 1
            self.failed_at = time.monotonic()
            stop.wait(self._backoff(failures))
            failures += 1

    def _backoff(self, failures: int) -> float:
        return float(min(self.backoff_max, 0.1 * 2**failures) * random.uniform(0.5, 1.0))

    def _list(self) -> None:
        pods, resource_version = self.lister()
        if self.lists:
            self.relists += 1
        self.lists += 1
        self._callback(self.on_sync, pods)
        self.last_resource_version = resource_version
        self.listed_at = time.monotonic()
        self._alive()

    def _watch(self, stop: threading.Event) -> None:
        timeout = int(self.watch_timeout_seconds * random.uniform(1.0, 1.25))
        stream = self.watcher(self.last_resource_version, timeout)
        self.watches += 1
        self._alive()
        with stream.closing_on(stop):
            for line in stream.lines():
                if stop.is_set():
                    return
                if line.strip():
                    self._handle(json.loads(line))

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            raise error_from_status_object(obj)
        resource_version = (obj.get("metadata") or {}).get("resourceVersion")
        if resource_version:
            self.last_resource_version = str(resource_version)
        self._alive()
        if kind in EVENT_TYPES:
            self._callback(self.on_event, kind, obj)

    def _alive(self) -> None:
        """Report progress (a list, a watch opened, an event or bookmark): the watcher's liveness signal."""
        self.alive_at = time.monotonic()
        if self.on_alive is not None:
            self.on_alive()

    def _callback(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception as exc:
            self.callback_errors += 1
            log.exception("pod reflector callback %r failed; listing again", callback)
            raise CallbackFailed(str(exc)) from exc

"""The object store: one monotonically increasing resourceVersion and a bounded event history for watches."""

from __future__ import annotations

import builtins
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubesim.persist import DiskStore

Obj = dict[str, Any]


def clone(value: Any) -> Any:
    """Deep-copy a JSON-like tree (much faster than ``copy.deepcopy`` for plain dicts and lists)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


@dataclass(frozen=True)
class WatchEvent:
    """One change: the object after it (``obj``) and before it (``old``; None for ADDED)."""

    rv: int
    plural: str
    type: str
    obj: Obj
    old: Obj | None


class Compacted(Exception):
    """The requested resourceVersion is older than the kept history."""


def key_of(obj: Obj) -> tuple[str, str]:
    """The (namespace, name) key of an object; namespace is "" for cluster-scoped ones."""
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


class Store:
    """Thread-safe map of objects per resource plus the change history every watch reads from.

    Every write bumps the single resourceVersion by exactly one and appends exactly one event, so the
    event for version ``v`` sits at ``history[v - history[0].rv]``. With a ``disk`` it starts from the objects
    and resourceVersion stored there and writes every change through to it; like an apiserver's watch cache
    after a restart, its history then starts empty, so watches from older versions get 410 Gone.
    """

    def __init__(self, history_size: int = 10000, disk: DiskStore | None = None):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._history: deque[WatchEvent] = deque()
        self.history_size = history_size
        self.compacted_through = 0
        self.rv = 0
        self.listeners: list[Callable[[WatchEvent], None]] = []
        self.closed = False
        self.disk = disk
        if disk is not None:
            self._objects, self.rv = disk.load()
            self.compacted_through = self.rv

    def _record(self, plural: str, type_: str, obj: Obj, old: Obj | None) -> WatchEvent:
        event = WatchEvent(self.rv, plural, type_, obj, old)
        self._history.append(event)
        self.compact(self.history_size)
        self.changed.notify_all()
        for listener in self.listeners:
            listener(event)
        return event

    def compact(self, keep: int) -> None:
        """Drop all but the newest ``keep`` events; watches from before them get 410 Gone."""
        with self.lock:
            while len(self._history) > max(keep, 0):
                self.compacted_through = self._history.popleft().rv

    def insert(self, plural: str, obj: Obj) -> Obj:
        """Store a new object, stamping its resourceVersion; returns a copy of what was stored."""
        with self.lock:
            self.rv += 1
            stored = clone(obj)
            stored["metadata"]["resourceVersion"] = str(self.rv)
            if self.disk is not None:
                self.disk.put(plural, key_of(stored), stored, self.rv)
            self._objects.setdefault(plural, {})[key_of(stored)] = stored
            self._record(plural, "ADDED", stored, None)
            return clone(stored)

    def replace(self, plural: str, obj: Obj) -> Obj:
        """Overwrite an existing object with a new version; returns a copy of what was stored."""
        with self.lock:
            bucket = self._objects.setdefault(plural, {})
            key = key_of(obj)
            old = bucket[key]
            self.rv += 1
            stored = clone(obj)
            stored["metadata"]["resourceVersion"] = str(self.rv)
            if self.disk is not None:
                self.disk.put(plural, key, stored, self.rv)
            bucket[key] = stored
            self._record(plural, "MODIFIED", stored, old)
            return clone(stored)

    def remove(self, plural: str, namespace: str, name: str) -> Obj | None:
        """Remove an object; the DELETED event carries a new resourceVersion."""
        with self.lock:
            old = self._objects.get(plural, {}).get((namespace, name))
            if old is None:
                return None
            self.rv += 1
            final = clone(old)
            final["metadata"]["resourceVersion"] = str(self.rv)
            if self.disk is not None:
                self.disk.delete(plural, (namespace, name), self.rv)
            del self._objects[plural][(namespace, name)]
            self._record(plural, "DELETED", final, old)
            return clone(final)

    def get(self, plural: str, namespace: str, name: str) -> Obj | None:
        """A private copy of one object, or None."""
        with self.lock:
            obj = self._objects.get(plural, {}).get((namespace, name))
            return clone(obj) if obj is not None else None

    def peek(self, plural: str, namespace: str, name: str) -> Obj | None:
        """The stored object itself, for read-only use."""
        with self.lock:
            return self._objects.get(plural, {}).get((namespace, name))

    def list(self, plural: str, namespace: str | None = None) -> tuple[builtins.list[Obj], int]:
        """Stored objects (read-only references) sorted by namespace and name, with the list's version."""
        with self.lock:
            bucket = self._objects.get(plural, {})
            keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
            return [bucket[k] for k in keys], self.rv

    def events_after(self, rv: int) -> builtins.list[WatchEvent]:
        """Events newer than ``rv``; raises Compacted when some of them are no longer kept."""
        with self.lock:
            if rv < self.compacted_through:
                raise Compacted(rv)
            if not self._history or rv >= self.rv:
                return []
            start = rv - self._history[0].rv + 1
            return [self._history[i] for i in range(max(start, 0), len(self._history))]

    def wait(self, rv: int, timeout: float) -> None:
        """Block until the store is newer than ``rv``, it is closed, or ``timeout`` seconds pass."""
        with self.lock:
            if self.rv <= rv and not self.closed:
                self.changed.wait(timeout)

    def wait_until(self, rv: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the store to reach version ``rv``; whether it did."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.rv < rv and not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self.changed.wait(remaining)
            return self.rv >= rv

    def close(self) -> None:
        """Wake every waiting watch so it can end (used at shutdown)."""
        with self.lock:
            self.closed = True
            self.changed.notify_all()

    def close_disk(self) -> None:
        """Close the file behind the store (the last step of a shutdown)."""
        with self.lock:
            if self.disk is not None:
                self.disk.close()

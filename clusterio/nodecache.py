"""A watch-backed view of every node and of what each node's pods request, for admission's capacity.

Two reflectors (list once, then watch; relist after a 410 and every `relist_seconds`) keep the nodes and a
compact copy of every pod (its node, phase and resource requests: what `node_infos` counts, others' pods
included), so capacity is read without listing every pod in the cluster each time it is needed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clusterio.capacity import NodeInfo, node_infos
from clusterio.reflector import PodReflector

if TYPE_CHECKING:
    from clusterio.client import Cluster

Obj = dict[str, Any]


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _compact_pod(pod: Obj) -> Obj:
    """The parts of a pod that capacity counts: node, phase, containers' resources, overhead."""
    spec = pod.get("spec") or {}

    def containers(field: str) -> list[Obj]:
        return [{"resources": c.get("resources") or {}} for c in spec.get(field) or []]

    return {
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": containers("containers"),
            "initContainers": containers("initContainers"),
            "overhead": spec.get("overhead") or {},
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


class NodeCache:
    """Nodes and every pod's requests, kept by two reflectors; `infos()` is what `Cluster.nodes()` returns.

    `on_change()` is called after each sync or event (from the reflector threads), e.g. to publish a
    summary. `synced` is set once both kinds have been listed."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        on_change: Callable[[], None] | None = None,
        watch_timeout_seconds: int = 60,
        relist_seconds: float = 300.0,
    ) -> None:
        self._lock = threading.Lock()
        self._pool_label = cluster.pool_label
        self._nodes: dict[tuple[str, str], Obj] = {}
        self._pods: dict[tuple[str, str], Obj] = {}
        self._synced: set[str] = set()
        self.synced = threading.Event()
        self.on_change = on_change
        options: dict[str, Any] = {
            "watch_timeout_seconds": watch_timeout_seconds,
            "relist_seconds": relist_seconds,
        }
        self.node_reflector = PodReflector(
            cluster,
            on_sync=lambda items: self._sync("nodes", items),
            on_event=lambda kind, obj: self._event("nodes", kind, obj),
            lister=cluster.list_nodes,
            watcher=lambda rv, timeout: cluster.watch_nodes(resource_version=rv, timeout_seconds=timeout),
            **options,
        )
        self.pod_reflector = PodReflector(
            cluster,
            on_sync=lambda items: self._sync("pods", items),
            on_event=lambda kind, obj: self._event("pods", kind, obj),
            label_selector="",
            **options,
        )

    def _store(self, kind: str) -> dict[tuple[str, str], Obj]:
        return self._nodes if kind == "nodes" else self._pods

    def _sync(self, kind: str, items: list[Obj]) -> None:
        compact = (lambda o: o) if kind == "nodes" else _compact_pod
        with self._lock:
            store = self._store(kind)
            store.clear()
            store.update({_key(o): compact(o) for o in items})
            self._synced.add(kind)
            if len(self._synced) == 2:
                self.synced.set()
        self._changed()

    def _event(self, kind: str, event: str, obj: Obj) -> None:
        with self._lock:
            store = self._store(kind)
            if event == "DELETED":
                store.pop(_key(obj), None)
            else:
                store[_key(obj)] = obj if kind == "nodes" else _compact_pod(obj)
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None and self.synced.is_set():
            self.on_change()

    def infos(self) -> list[NodeInfo]:
        """Every node with its allocatable and free resources, as `Cluster.nodes()` computes them."""
        with self._lock:
            nodes, pods = list(self._nodes.values()), list(self._pods.values())
        return node_infos(nodes, pods, self._pool_label)

    def run(self, stop: threading.Event) -> list[threading.Thread]:
        """Start both reflectors in daemon threads until `stop` is set; returns the threads (to join)."""
        threads = [
            threading.Thread(target=r.run, args=(stop,), name=f"nodecache-{n}", daemon=True)
            for n, r in (("nodes", self.node_reflector), ("pods", self.pod_reflector))
        ]
        for thread in threads:
            thread.start()
        return threads

    @property
    def healthy(self) -> bool:
        """Whether both kinds are listed and both reflectors are watching without a failure since."""
        return self.synced.is_set() and self.node_reflector.healthy and self.pod_reflector.healthy

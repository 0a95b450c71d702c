"""The attach-detach controller for network block disks (claims of a ``kubesim.io/block`` class).

A block disk is attached to one node at a time. A pod on another node waits, its containers not created,
with a ``FailedAttachVolume`` Event from the attachdetach-controller (``Multi-Attach error ...``), until the
disk is detached. kube-controller-manager detaches a disk once no pod on its node uses it: at once from a
healthy node (the kubelet unmounts it), but from a node that is NotReady or gone only after
``maxWaitForUnmountDuration`` (6 minutes; ``max_wait_for_unmount`` here), since that node might still write
to it, or at once when the node carries the ``node.kubernetes.io/out-of-service`` taint (non-graceful node
shutdown). Attachments live in memory: after a kubesim restart each disk is attached again by a pod using it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kubesim.admission import TERMINAL
from kubesim.storageclasses import BLOCK
from kubesim.store import Obj
from kubesim.volumes import STORAGE_PROVISIONER, claim_names

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

MAX_WAIT_FOR_UNMOUNT = 360.0
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
COMPONENT = "attachdetach-controller"


def multi_attach_message(volume: str) -> str:
    """The attachdetach-controller's words for a disk another node holds."""
    return (
        f'Multi-Attach error for volume "{volume}" Volume is already exclusively attached to one node and '
        "can't be attached to another"
    )


class AttachDetachController:
    """Attaches each block disk to the node of the first pod that needs it, and detaches it as above."""

    def __init__(self, cluster: Cluster, max_wait_for_unmount: float = MAX_WAIT_FOR_UNMOUNT):
        self.cluster = cluster
        self.max_wait_for_unmount = max_wait_for_unmount
        self.attached: dict[str, str] = {}
        self._unused_since: dict[str, float] = {}
        self._reported: set[tuple[str, str]] = set()

    def step(self) -> None:
        """Detach the disks no pod on their node uses any more (after the wait where that node is down),
        then attach the free ones to the nodes of the pods that want them."""
        wanted = self._wanted()
        users: dict[str, set[str]] = {}
        for _, volume, node in wanted:
            users.setdefault(volume, set()).add(node)
        now = time.monotonic()
        for volume, node in list(self.attached.items()):
            if node in users.get(volume, set()):
                self._unused_since.pop(volume, None)
                continue
            since = self._unused_since.setdefault(volume, now)
            if self._healthy(node) or self._out_of_service(node) or now - since >= self.max_wait_for_unmount:
                del self.attached[volume]
                self._unused_since.pop(volume, None)
        live: set[tuple[str, str]] = set()
        for pod, volume, node in wanted:
            holder = self.attached.setdefault(volume, node)
            key = (pod["metadata"]["uid"], volume)
            live.add(key)
            if holder != node and key not in self._reported:
                self._reported.add(key)
                self.cluster.api.record_event(
                    pod, "Warning", "FailedAttachVolume", multi_attach_message(volume), COMPONENT
                )
        self._reported &= live

    def blocked(self, pod: Obj, node: str) -> str | None:
        """The first of the pod's block disks that is attached to another node than ``node``, or None."""
        for volume in self._volumes(pod):
            if self.attached.get(volume, node) != node:
                return volume
        return None

    def _wanted(self) -> list[tuple[Obj, str, str]]:
        """(pod, disk, node) for every bound pod that has not finished and mounts a block disk."""
        wanted: list[tuple[Obj, str, str]] = []
        for pod in self.cluster.store.list("pods")[0]:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in TERMINAL:
                wanted.extend((pod, volume, node) for volume in self._volumes(pod))
        return wanted

    def _volumes(self, pod: Obj) -> list[str]:
        namespace = pod["metadata"]["namespace"]
        volumes = []
        for name in claim_names(pod):
            claim = self.cluster.store.peek("persistentvolumeclaims", namespace, name)
            annotations = (claim or {}).get("metadata", {}).get("annotations") or {}
            volume = ((claim or {}).get("spec") or {}).get("volumeName")
            if volume and annotations.get(STORAGE_PROVISIONER) == BLOCK:
                volumes.append(str(volume))
        return volumes

    def _node(self, name: str) -> Obj | None:
        return self.cluster.store.peek("nodes", "", name)

    def _healthy(self, name: str) -> bool:
        node = self._node(name)
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _out_of_service(self, name: str) -> bool:
        node = self._node(name)
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        return any(t.get("key") == OUT_OF_SERVICE and t.get("effect") == "NoExecute" for t in taints)


__all__ = ["MAX_WAIT_FOR_UNMOUNT", "AttachDetachController", "multi_attach_message"]

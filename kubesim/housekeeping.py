"""The kubelet's housekeeping of deleted pods' folders.

A pod's folder (``<state>/pods/<namespace>_<name>_<uid prefix>``) holds its container logs, its emptyDir
volumes, its pid files and its container layouts. On a real node the kubelet removes a deleted pod's log
directory (``/var/log/pods/<namespace>_<name>_<uid>``, container GC's ``evictPodLogsDirectories``) and its
``/var/lib/kubelet/pods/<uid>`` folder (housekeeping's ``cleanupOrphanedPodDirs``, every 2 s) once the pod is
gone from the API server and its containers are dead. kubesim does the same: every ``HOUSEKEEPING_SECONDS`` a
folder whose pod the store no longer holds, and that no kubelet still runs (a partitioned node's processes
live on until it comes back), is removed. A finished pod that is still stored keeps its logs, as on a
cluster (``kubectl logs`` of a Succeeded pod works until the pod is deleted).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

log = logging.getLogger("kubesim.kubelet")
HOUSEKEEPING_SECONDS = 2.0


def pod_dir_name(pod: Obj) -> str:
    """The name of a pod's folder under ``<state>/pods``."""
    meta = pod["metadata"]
    return f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"


def _writable_then_retry(function: Callable[..., Any], path: str, _exc: Any) -> None:
    """rmtree's error hook: a container may leave a folder without write or search permission (``chmod 0``);
    the kubelet removes it anyway."""
    parent = os.path.dirname(path)
    for target in (parent, path):
        try:
            if not os.path.islink(target):
                os.chmod(target, stat.S_IRWXU)
        except OSError:
            pass
    try:
        function(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("could not remove %s of a deleted pod: %s", path, exc)


def remove_pod_dir(folder: Path) -> None:
    """Remove one pod folder and everything below it (symbolic links are removed, never followed: the
    unsandboxed mode links claim folders into a pod's ``rootfs``)."""
    shutil.rmtree(folder, onerror=_writable_then_retry)


class PodDirCollector:
    """Removes the folders of pods that are gone from the store and from every kubelet."""

    def __init__(self, cluster: Cluster, interval: float = HOUSEKEEPING_SECONDS):
        self.cluster = cluster
        self.interval = interval
        self.last = 0.0

    def step(self) -> list[Path]:
        """Every ``interval`` seconds, remove the orphaned pod folders; returns those removed."""
        now = time.monotonic()
        if now - self.last < self.interval:
            return []
        self.last = now
        return self.collect()

    def collect(self) -> list[Path]:
        """Remove every pod folder whose pod is neither stored nor run by a kubelet; returns them."""
        root = self.cluster.state_dir / "pods"
        if not root.is_dir():
            return []
        live = {pod_dir_name(p) for p in self.cluster.store.list("pods")[0]}
        running = {rt.dir.name for k in self.cluster.kubelets.values() for rt in k.pods.values()}
        removed = []
        for folder in root.iterdir():
            if folder.name in live or folder.name in running or not folder.is_dir() or folder.is_symlink():
                continue
            remove_pod_dir(folder)
            removed.append(folder)
        if removed:
            log.info("removed the folders (logs, volumes) of %d deleted pod(s)", len(removed))
        return removed

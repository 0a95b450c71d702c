"""Sidecars: native ones (init containers with ``restartPolicy: Always``, Kubernetes 1.29+) and an injector
that adds a classic one, as Istio's or Linkerd's mutating webhook does.

A native sidecar starts in its place among the init containers and the next one starts as soon as it runs;
it keeps running (restarted with back-off whatever the pod's restartPolicy) beside the main containers, and
is stopped (SIGTERM, SIGKILL after the pod's grace period) once they have all ended; the pod's phase follows
the main containers alone.

The injector, off until switched on (``Cluster.sidecar_injector``, ``KubeSim.inject_sidecars``,
``POST /kubesim/sidecars``), adds a never-ending container to every pod created in a namespace labelled
``kubesim.io/inject-sidecar: "true"``: an ordinary second container (``classic``, the one that kept pods
Running after their main container ended before native sidecars) or a native one (``native``). It runs
before the apiserver's validation and Pod Security admission, like a webhook, and complies with the
restricted level as Istio's proxy does.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from kubesim.podstatus import pod_phase
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.kubelet import Kubelet, PodRuntime

INJECT_LABEL = "kubesim.io/inject-sidecar"
SIDECAR_NAME = "kubesim-proxy"
MODES = ("classic", "native")
# A proxy that serves until told to stop, then exits 0 (as istio-proxy does on SIGTERM).
_COMMAND = ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]


def is_sidecar(container: Obj) -> bool:
    """Whether an init container is a native sidecar (``restartPolicy: Always``)."""
    return container.get("restartPolicy") == "Always"


def sidecar_container(native: bool) -> Obj:
    """The injected container: small fixed resources and a restricted security context, as Istio's."""
    container: Obj = {
        "name": SIDECAR_NAME,
        "image": "kubesim/proxy:1",
        "command": list(_COMMAND),
        "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"},
            "limits": {"cpu": "100m", "memory": "64Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": 1337,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if native:
        container["restartPolicy"] = "Always"
    return container


def _mains_ended(kubelet: Kubelet, rt: PodRuntime, pod: Obj) -> bool:
    """Whether every main container has ended for good (none left to run or restart)."""
    statuses = [kubelet._container_status(rt, c) for c in pod["spec"].get("containers") or []]
    return pod_phase(statuses) in ("Succeeded", "Failed")


def sync_sidecars(kubelet: Kubelet, rt: PodRuntime, pod: Obj) -> bool:
    """Keep native sidecars running beside the main containers (restarted with back-off whatever the
    pod's restartPolicy); once the main containers have all ended, stop them: SIGTERM, then SIGKILL
    after the pod's grace period."""
    sidecars = [c for c in pod["spec"].get("initContainers") or [] if is_sidecar(c)]
    if not sidecars:
        return False
    ended = _mains_ended(kubelet, rt, pod)
    changed = False
    for container in sidecars:
        proc = rt.containers.get(container["name"])
        if proc is None:
            if not ended:
                changed = kubelet._maybe_launch(rt, pod, container) or changed
            continue
        code = kubelet._reap(rt, proc)
        if code is not None:
            changed = True
            if not ended:
                kubelet._back_off(rt, pod, proc)
    if ended:
        changed = _stop_sidecars(kubelet, rt, pod, sidecars) or changed
    return changed


def _stop_sidecars(kubelet: Kubelet, rt: PodRuntime, pod: Obj, sidecars: list[Obj]) -> bool:
    """Stop the running sidecars of a pod whose main containers ended; True once none runs."""
    running = [p for c in sidecars if (p := rt.containers.get(c["name"])) is not None and p.poll() is None]
    if not running:
        return True
    grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
    if rt.sidecars_stopping_since is None:
        rt.sidecars_stopping_since = time.monotonic()
        for proc in running:
            proc.signal_group(signal.SIGTERM)
            kubelet.cluster.api.record_event(
                pod, "Normal", "Killing", f"Stopping container {proc.name}", "kubelet"
            )
    elif time.monotonic() - rt.sidecars_stopping_since >= grace:
        for proc in running:
            proc.signal_group(signal.SIGKILL, kubelet.cluster.cgroups.pids(proc.cgroup))
    return False


class SidecarInjector:
    """Adds a sidecar to pods created in labelled namespaces while switched on (``mode``: classic or
    native; None: off)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.mode: str | None = None

    def switch(self, mode: str | None) -> None:
        """Turn the injector on in ``mode`` (classic or native), or off with None."""
        if mode is not None and mode not in MODES:
            raise ValueError(f"unknown sidecar mode {mode!r}: one of {', '.join(MODES)}")
        with self._lock:
            self.mode = mode

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the admin endpoint."""
        return {"mode": self.mode, "label": INJECT_LABEL}

    def mutate(self, pod: Obj, namespace: Obj | None) -> None:
        """Add the sidecar to ``pod`` if the injector is on and its namespace asks for it (once)."""
        with self._lock:
            mode = self.mode
        labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        if mode is None or labels.get(INJECT_LABEL) != "true":
            return
        spec = pod.setdefault("spec", {})
        names = {c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])}
        if SIDECAR_NAME in names:
            return
        if mode == "native":
            spec["initContainers"] = [sidecar_container(True), *(spec.get("initContainers") or [])]
        else:
            spec["containers"] = [*(spec.get("containers") or []), sidecar_container(False)]

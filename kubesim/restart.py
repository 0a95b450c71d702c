"""What a kubesim start finds when its state dir holds an earlier run: nodes that rebooted, pods whose
processes are gone.

kubesim's processes die with it, as containers die when a node reboots, so the stored pods are reported the
way a kubelet reports them after a reboot. containerd keeps its container records across the reboot and marks
a container that was running when its task vanished as exited with code 255, reason ``Unknown``. The kubelet
then creates a new sandbox (Event ``SandboxChanged``) and, under restartPolicy Always or OnFailure, starts the
containers again, init containers first, each with restartCount + 1 and that record as ``lastState``; a
container that succeeded under OnFailure stays completed. Under Never nothing is restarted: the pod fails,
and a container the runtime never created reads ``ContainerStatusUnknown`` (137), as the kubelet writes it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kubesim.disruption import UNREACHABLE
from kubesim.kubelet import GPU, Kubelet, PodRuntime
from kubesim.meta import now_iso
from kubesim.podstatus import set_condition
from kubesim.quantity import parse_quantity
from kubesim.runtime import ContainerProcess, now_rfc3339
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

LOST_EXIT_CODE = 255
LOST_REASON = "Unknown"
NEVER_CREATED = {
    "exitCode": 137,
    "reason": "ContainerStatusUnknown",
    "message": "The container could not be located when the pod was terminated",
}
SANDBOX_CHANGED = "Pod sandbox changed, it will be killed and re-created."


def reboot_node(cluster: Cluster, name: str, registered: Obj | None = None) -> None:
    """Bring a stored node back with a new kubelet: a new boot id (and a ``Rebooted`` Event, as the kubelet
    records it), Ready with a fresh heartbeat, no unreachable taints. ``registered`` is the Node its kubelet
    would register now (kubesim's own nodes): its capacity and labels replace the stored ones."""
    boot_id = str(uuid.uuid4())
    stamp = now_iso()
    node = cluster.store.peek("nodes", "", name)
    if node is None:
        return
    before = (node.get("status") or {}).get("nodeInfo", {}).get("bootID")

    def apply(n: Obj) -> None:
        status = n.setdefault("status", {})
        if registered is not None:
            for field in ("capacity", "allocatable"):
                status[field] = dict(registered["status"][field])
            n["metadata"]["labels"] = {**n["metadata"].get("labels", {}), **registered["metadata"]["labels"]}
        status.setdefault("nodeInfo", {})["bootID"] = boot_id
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Ready":
                if cond.get("status") != "True":
                    cond["lastTransitionTime"] = stamp
                cond.update(
                    status="True",
                    reason="KubeletReady",
                    message="kubelet is posting ready status",
                    lastHeartbeatTime=stamp,
                )
        spec = n.setdefault("spec", {})
        spec["taints"] = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE]

    updated = cluster.api.mutate("nodes", "", name, apply) or node
    gpus = int(parse_quantity(updated["status"].get("capacity", {}).get(GPU, 0)))
    cluster.kubelets[name] = Kubelet(cluster, name, gpus)
    if before:
        message = f"Node {name} has been rebooted, boot id: {boot_id}"
        cluster.api.record_event(updated, "Warning", "Rebooted", message, "kubelet")


def recover_pods(cluster: Cluster) -> None:
    """Report every pod that was running on a node before the restart (see the module docstring)."""
    for kubelet in cluster.kubelets.values():
        for pod in kubelet.bound_pods():
            status = pod.get("status") or {}
            meta = pod["metadata"]
            if status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                continue  # the kubelet finishes a pending deletion by itself
            statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
            if not any(_ran(s) for s in statuses):
                continue  # never started: the kubelet starts it as a new pod
            if pod["spec"].get("restartPolicy", "Always") == "Never":
                _fail(cluster, pod)
            else:
                _restart(kubelet, pod, statuses)


def _ran(status: Obj) -> bool:
    state = status.get("state") or {}
    return "running" in state or "terminated" in state or bool(status.get("restartCount"))


def _lost(status: Obj) -> Obj:
    """containerd's record of a container whose task vanished while it ran."""
    running = (status.get("state") or {}).get("running") or {}
    return {
        "exitCode": LOST_EXIT_CODE,
        "reason": LOST_REASON,
        "startedAt": running.get("startedAt"),
        "finishedAt": now_rfc3339(),
        "containerID": status.get("containerID", ""),
    }


def _fail(cluster: Cluster, pod: Obj) -> None:
    """restartPolicy Never: every container ends, the pod Failed."""

    def apply(p: Obj) -> None:
        st = p.setdefault("status", {})
        for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
            state = cs.get("state") or {}
            if "running" in state:
                cs["state"] = {"terminated": _lost(cs)}
            elif "terminated" not in state:
                cs["state"] = {"terminated": dict(NEVER_CREATED)}
            cs.update(ready=False, started=False)
        st["phase"] = "Failed"
        set_condition(st, "Ready", False, "PodFailed")
        set_condition(st, "ContainersReady", False, "PodFailed")
        set_condition(st, "PodReadyToStartContainers", False, "")

    cluster.api.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], apply)


def _restart(kubelet: Kubelet, pod: Obj, statuses: list[Obj]) -> None:
    """restartPolicy Always/OnFailure: a new sandbox, init containers again from the first, then the
    containers, each counting the restart; a container that succeeded under OnFailure stays done."""
    kubelet.cluster.api.record_event(pod, "Normal", "SandboxChanged", SANDBOX_CHANGED, "kubelet")
    rt: PodRuntime = kubelet._start_pod(pod)
    on_failure = pod["spec"].get("restartPolicy") == "OnFailure"
    inits = {c["name"] for c in pod["spec"].get("initContainers") or []}
    for cs in statuses:
        name, state = cs["name"], cs.get("state") or {}
        count = int(cs.get("restartCount") or 0)
        if "running" in state:
            rt.last_state[name] = {"terminated": _lost(cs)}
            count += 1
        elif "terminated" in state:
            done = state["terminated"]
            if on_failure and done.get("exitCode") == 0 and name not in inits:
                rt.containers[name] = _completed(rt, name, done)
            else:
                rt.last_state[name] = {"terminated": done}
                count += 1
        elif cs.get("lastState"):
            rt.last_state[name] = cs["lastState"]
        rt.restarts[name] = count
    kubelet.pods[rt.uid] = rt


def _completed(rt: PodRuntime, name: str, done: Obj) -> ContainerProcess:
    """A container that finished before the restart, kept as it ended."""
    proc = ContainerProcess(name, None, rt.dir / "logs" / f"{name}.0.log", done.get("startedAt") or "")
    proc.exit_code, proc.finished_at, proc.stopped = 0, done.get("finishedAt"), True
    return proc

"""Pure helpers that build the pieces of a pod's status the kubelet reports (states, phase, conditions)."""

from __future__ import annotations

from pathlib import Path

from kubesim.runtime import ContainerProcess, now_rfc3339
from kubesim.store import Obj

POD_IP = "127.0.0.1"


def terminated_state(proc: ContainerProcess, container: Obj | None = None) -> Obj:
    """The ``state.terminated`` of an ended container, with the reason a real kubelet would give.

    With `terminationMessagePolicy: FallbackToLogsOnError` a failed container's message is the end of its
    log (at most 80 lines and 2048 bytes), as the kubelet does when no termination message was written.
    """
    code = proc.exit_code if proc.exit_code is not None else 0
    if proc.start_error:
        reason, code = "StartError", 128
    elif proc.oom_killed:
        reason, code = "OOMKilled", 137
    else:
        reason = "Completed" if code == 0 else "Error"
    result = {
        "exitCode": code,
        "reason": reason,
        "startedAt": proc.started_at,
        "finishedAt": proc.finished_at or now_rfc3339(),
        "containerID": f"kubesim://{proc.pid or 0}",
    }
    if proc.start_error:
        result["message"] = proc.start_error
    elif code != 0 and (container or {}).get("terminationMessagePolicy") == "FallbackToLogsOnError":
        tail = log_tail_text(proc.log_path)
        if tail:
            result["message"] = tail
    return result


def log_tail_text(path: Path, lines: int = 80, limit: int = 2048) -> str:
    """The text of the last lines of a CRI-format container log (`<time> <stream> <P|F> <text>`)."""
    try:
        raw = path.read_bytes()[-64 * 1024 :]
    except OSError:
        return ""
    texts = [line.split(b" ", 3)[-1] for line in raw.splitlines()[-lines:] if line.count(b" ") >= 3]
    return b"\n".join(texts)[-limit:].decode("utf-8", "replace")


def pod_phase(statuses: list[Obj]) -> str:
    """The pod phase implied by its container statuses (restarting containers keep it Running)."""
    states = [s["state"] for s in statuses]
    if any("running" in s for s in states):
        return "Running"
    if all("terminated" in s for s in states):
        if all(s["terminated"]["exitCode"] == 0 for s in states):
            return "Succeeded"
        return "Failed"
    if any(s.get("restartCount") for s in statuses):
        return "Running"
    return "Pending"


def init_failure(name: str, init_statuses: list[Obj]) -> tuple[str, str, str]:
    """(phase, reason, message) of a pod whose init container ``name`` failed under restartPolicy Never.

    A real kubelet leaves ``status.reason`` empty here (kubectl derives ``Init:Error`` from the init
    container's state); kubesim names the container in reason and message so a failure is easy to report.
    """
    states: list[Obj] = [s["state"] for s in init_statuses if s["name"] == name]
    state: Obj = (states[0] if states else {}).get("terminated") or {}
    message = (
        f'Init container "{name}" failed with exit code {state.get("exitCode")} '
        f"(reason {state.get('reason', 'Error')}); the pod's containers were not started"
    )
    return "Failed", "InitContainerFailed", message


def mark_started(
    pod: Obj, init_containers: list[str] | None = None, pod_ip: str = POD_IP, host_ip: str = POD_IP
) -> None:
    """What the kubelet sets when it admits a pod: IPs (its sandbox's and the node's), start time (kept when
    a restarted kubelet admits it again), Initialized (False while init containers have yet to run)."""
    st = pod.setdefault("status", {})
    st.update(
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=pod_ip,
        podIPs=[{"ip": pod_ip}],
        startTime=st.get("startTime") or now_rfc3339(),
    )
    if init_containers:
        message = f"containers with incomplete status: [{' '.join(init_containers)}]"
        set_condition(st, "Initialized", False, "ContainersNotInitialized", message)
    else:
        set_condition(st, "Initialized", True, "")
    set_condition(st, "PodReadyToStartContainers", True, "")


def set_condition(status: Obj, type_: str, value: bool, reason: str, message: str = "") -> None:
    """Set one condition in ``status.conditions``, moving lastTransitionTime only when it changes."""
    conditions = status.setdefault("conditions", [])
    wanted = "True" if value else "False"
    for cond in conditions:
        if cond["type"] == type_:
            if cond["status"] != wanted or cond.get("reason", "") != reason:
                cond.update(status=wanted, lastTransitionTime=now_rfc3339())
                if reason:
                    cond["reason"] = reason
                else:
                    cond.pop("reason", None)
                if message:
                    cond["message"] = message
                else:
                    cond.pop("message", None)
            elif message and cond.get("message") != message:
                cond["message"] = message
            return
    new: Obj = {"type": type_, "status": wanted, "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    conditions.append(new)

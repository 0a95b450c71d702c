"""What a job's pods say about the job: a pure reading of learner pod states into one verdict.

The watch loop turns every pod event into a `LearnerView`; `judge` decides whether the job is starting,
running, finished, failed by the user's fault, or hit by an infrastructure fault that warrants a requeue.

The verdict comes from the learner container's own state, not the pod phase: a sidecar the cluster
injects (Istio, Linkerd, a Vault agent) never ends and keeps the pod Running after the learner exited, so
a learner container that has terminated decides its learner on its exit code whatever the others do.

Which faults use a retry: none of the cluster's. A requeue verdict (eviction by the API or the kubelet,
preemption by the scheduler, node loss or shutdown, pod GC, a pod deleted by someone else, a container lost
with its node's runtime, a kubelet admission rejection such as `UnexpectedAdmissionError` or
`OutOfnvidia.com/gpu`) is a disruption: the job goes back to the queue within its infrastructure budget
(INFRA_RETRY_LIMIT, then `DisruptionBudgetExhausted`), never using the user's `retries`. The user's own
failures (a bad image, a non-zero exit, OOMKilled, past max_runtime) fail the job at once.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from jobs.core.choices import Reason, VerdictState

# Waiting reasons that mean the user's image or spec is wrong: retrying will not help.
USER_WAITING_REASONS = frozenset(
    {
        "ImagePullBackOff",
        "ErrImagePull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
# Of those, the ones a registry's transient trouble also causes: the engine waits IMAGE_PULL_GRACE_SECONDS.
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull"})
# Pod reasons and conditions that mean the node or cluster took the pod away: worth another attempt.
INFRA_POD_REASONS = frozenset(
    {"NodeLost", "Evicted", "Preempted", "Preempting", "Shutdown", "Terminated", "UnexpectedAdmissionError"}
)
# A kubelet that rejects a pod at admission for want of a resource writes `OutOf<resource>` (`OutOfcpu`,
# `OutOfnvidia.com/gpu` while a device plugin restarts): the node's fault, not the job's.
OUT_OF_RESOURCE_PREFIX = "OutOf"
# The name of the container whose exit decides a learner (clusterio.builders.job.CONTAINER_NAME).
LEARNER_CONTAINER = "learner"
# Reasons of a container that did not exit but vanished with its node's runtime (a reboot): containerd's
# record of a task that disappeared (exit code 255), the kubelet's of a container it cannot find (137).
LOST_CONTAINER_REASONS = frozenset({"Unknown", "ContainerStatusUnknown"})


@dataclass(frozen=True)
class LearnerView:
    """The parts of one learner pod that matter to the job's state (None: the pod does not exist)."""

    index: int
    phase: str | None
    node: str = ""
    pod_reason: str = ""
    pod_message: str = ""
    waiting_reason: str = ""
    waiting_message: str = ""
    exit_code: int | None = None
    terminated_reason: str = ""
    unschedulable_message: str | None = None
    disrupted: bool = False
    deleted: bool = False
    init_failure: tuple[str, int, str] | None = None  # (container, exit code, last message line)
    # Running but marked not Ready: learners have no readiness probes, so the node stopped answering.
    node_unready: bool = False
    # A container (init or main) that ended because the node lost it, not by exiting: "reason (code)".
    container_lost: str = ""


@dataclass(frozen=True)
class Verdict:
    """The job state the pods imply: one of starting, running, succeeded, failed, requeue."""

    state: VerdictState
    reason: str
    message: str
    learner: int | None = None


def judge(
    learners: Sequence[LearnerView], expected: int, *, existed: Collection[int] | None = None
) -> Verdict:
    """Read `expected` learners' views into one verdict; the worst learner decides.

    Order of precedence: an infrastructure fault (requeue) beats a user error (failed), which beats
    success; a job is running only when every learner runs, succeeded only when every learner succeeded.
    `existed` names the learners whose pods are known to have been created (None: all of them): a
    missing pod outside it is still being created (a launch creates pods one by one), not lost.
    """
    by_index = {view.index: view for view in learners}
    missing = [i for i in range(expected) if by_index.get(i) is None or by_index[i].phase is None]
    lost = [i for i in missing if existed is None or i in existed]
    verdict = _infra_fault(by_index) or _user_fault(by_index)
    if verdict is not None:
        return verdict
    if missing:
        all_pods_gone = len(missing) == expected
        if all_pods_gone:
            return Verdict(
                VerdictState.STARTING, Reason.PODS_NOT_CREATED, "waiting for the learner pods to be created"
            )
        if not lost:
            return Verdict(
                VerdictState.STARTING,
                Reason.PODS_NOT_CREATED,
                f"waiting for learner pod(s) {missing} to be created",
            )
        return Verdict(VerdictState.REQUEUE, Reason.POD_LOST, f"learner pod(s) {lost} disappeared", lost[0])
    views = [by_index[i] for i in range(expected)]
    if all(v.phase == "Succeeded" for v in views):
        return Verdict(VerdictState.SUCCEEDED, Reason.COMPLETED, f"all {expected} learner(s) exited 0")
    if all(v.phase in ("Running", "Succeeded") for v in views):
        return Verdict(VerdictState.RUNNING, Reason.RUNNING, f"{expected} learner(s) running")
    for view in views:
        if view.unschedulable_message is not None:
            return Verdict(
                VerdictState.STARTING,
                Reason.UNSCHEDULABLE,
                f"learner {view.index}: {view.unschedulable_message}",
                view.index,
            )
    pending = [v.index for v in views if v.phase == "Pending"]
    return Verdict(VerdictState.STARTING, Reason.PODS_PENDING, f"learner(s) {pending} pending")


def _infra_fault(by_index: dict[int, LearnerView]) -> Verdict | None:
    """The first learner the infrastructure took away (disrupted, evicted, container lost, pod deleted by
    someone else): the job runs again without using a retry."""
    for view in sorted(by_index.values(), key=lambda v: v.index):
        if view.phase is None:
            continue
        if view.disrupted or _infra_reason(view.pod_reason):
            why = view.pod_reason or "DisruptionTarget"
            detail = view.pod_message or "the node or cluster took the pod away"
            return Verdict(VerdictState.REQUEUE, why, f"learner {view.index}: {detail}", view.index)
        if view.container_lost and view.phase == "Failed":
            detail = f"its container was lost with the node's runtime ({view.container_lost})"
            return Verdict(
                VerdictState.REQUEUE, Reason.CONTAINER_LOST, f"learner {view.index}: {detail}", view.index
            )
        if view.deleted:
            # Deleted by someone else than the platform (which ignores verdicts about jobs it tears
            # down): its container is killed, and the exit code that follows is not the user's fault.
            why, detail = Reason.POD_DELETED, "the pod was deleted before it finished"
            return Verdict(VerdictState.REQUEUE, why, f"learner {view.index}: {detail}", view.index)
    return None


def _infra_reason(reason: str) -> bool:
    """Whether a pod's reason says the node or cluster took it away or refused it."""
    return reason in INFRA_POD_REASONS or reason.startswith(OUT_OF_RESOURCE_PREFIX)


def _user_fault(by_index: dict[int, LearnerView]) -> Verdict | None:
    """The first learner that failed by the user's doing (a bad image, a non-zero exit, out of memory)."""
    for view in sorted(by_index.values(), key=lambda v: v.index):
        if view.phase is None:
            continue
        if view.waiting_reason in USER_WAITING_REASONS:
            message = f"learner {view.index}: {view.waiting_reason}: {view.waiting_message}".rstrip(": ")
            return Verdict(VerdictState.FAILED, view.waiting_reason, message, view.index)
        if view.phase == "Failed":
            return _failed(view)
    return None


def _failed(view: LearnerView) -> Verdict:
    if view.init_failure is not None:
        name, status, said = view.init_failure
        detail = f": {said}" if said else ""
        return Verdict(
            VerdictState.FAILED,
            Reason.FETCH_FAILED if name == "fetch" else Reason.INIT_CONTAINER_FAILED,
            f"learner {view.index}: init container {name} exited {status}{detail}",
            view.index,
        )
    if view.terminated_reason == "OOMKilled":
        return Verdict(
            VerdictState.FAILED,
            "OOMKilled",
            f"learner {view.index} ran out of memory (exit code {view.exit_code}); ask for more memory",
            view.index,
        )
    if view.terminated_reason == "DeadlineExceeded" or view.pod_reason == "DeadlineExceeded":
        return Verdict(
            VerdictState.FAILED,
            Reason.DEADLINE_EXCEEDED,
            f"learner {view.index} ran past max_runtime",
            view.index,
        )
    code = view.exit_code
    detail = f"exited with code {code}" if code is not None else (view.pod_message or "failed")
    reason = f"ExitCode{code}" if code is not None else "Error"
    return Verdict(VerdictState.FAILED, reason, f"learner {view.index} {detail}", view.index)


def view_from_pod(pod: dict[str, Any], index: int, container: str = LEARNER_CONTAINER) -> LearnerView:
    """Read a pod (as the API's JSON dict) into a LearnerView.

    The learner is read from its own container (`container`; any container when the pod has none of that
    name): once it has terminated, the learner is Succeeded (exit 0) or Failed whatever the pod phase, as a
    never-ending injected sidecar keeps the pod Running; an ordinary sidecar's state is not the job's.
    """
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    conditions = status.get("conditions") or []
    unschedulable = next(
        (
            c.get("message") or "no node fits"
            for c in conditions
            if c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ),
        None,
    )
    disruption = next(
        (c for c in conditions if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None
    )
    disrupted = disruption is not None
    statuses = status.get("containerStatuses") or []
    own = [cs for cs in statuses if cs.get("name") == container] or statuses
    phase = _learner_phase(status.get("phase") or "Pending", own)
    deleted = bool((pod.get("metadata") or {}).get("deletionTimestamp")) and phase != "Succeeded"
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    running = any("running" in (cs.get("state") or {}) for cs in statuses)
    node_unready = phase == "Running" and running and ready is not None and ready.get("status") == "False"
    waiting_reason = waiting_message = terminated_reason = ""
    exit_code = None
    for cs in own:
        state = cs.get("state") or {}
        if state.get("waiting"):
            waiting_reason = state["waiting"].get("reason") or ""
            waiting_message = state["waiting"].get("message") or ""
        if state.get("terminated"):
            exit_code = state["terminated"].get("exitCode")
            terminated_reason = state["terminated"].get("reason") or ""
    return LearnerView(
        index=index,
        phase=phase,
        node=spec.get("nodeName") or "",
        # A disruption's own reason (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager)
        # stands in while the pod has none of its own yet (it is still terminating).
        pod_reason=status.get("reason") or (disruption or {}).get("reason") or "",
        pod_message=status.get("message") or (disruption or {}).get("message") or "",
        waiting_reason=waiting_reason,
        waiting_message=waiting_message,
        exit_code=exit_code,
        terminated_reason=terminated_reason,
        unschedulable_message=unschedulable,
        disrupted=disrupted,
        deleted=deleted,
        init_failure=_init_failure(status, _native_sidecars(spec)),
        node_unready=node_unready and not deleted,
        container_lost=_container_lost(status),
    )


def _learner_phase(pod_phase: str, own: list[dict[str, Any]]) -> str:
    """The learner's phase: the pod's, unless the pod still runs (a sidecar) while the learner container
    has terminated: then Succeeded on exit code 0, else Failed (learner pods never restart a container)."""
    if pod_phase not in ("Running", "Pending") or len(own) != 1:
        return pod_phase
    ended = (own[0].get("state") or {}).get("terminated")
    if not ended:
        return pod_phase
    return "Succeeded" if ended.get("exitCode") == 0 else "Failed"


def _container_lost(status: dict[str, Any]) -> str:
    """How a container that vanished with its node ended ("Unknown (255)"), or "" if none did."""
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        ended = (cs.get("state") or {}).get("terminated") or {}
        if ended.get("reason") in LOST_CONTAINER_REASONS:
            return f"{ended['reason']} ({ended.get('exitCode')})"
    return ""


def _native_sidecars(spec: dict[str, Any]) -> frozenset[str]:
    """The names of the pod's native sidecars (init containers with restartPolicy Always)."""
    return frozenset(
        c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    )


def _init_failure(
    status: dict[str, Any], sidecars: frozenset[str] = frozenset()
) -> tuple[str, int, str] | None:
    """The first init container that ended non-zero: its name, exit code and last line of message (a native
    sidecar stopped after the learner, or restarting, says nothing about the job)."""
    for cs in status.get("initContainerStatuses") or []:
        if cs.get("name") in sidecars:
            continue
        ended = (cs.get("state") or {}).get("terminated") or {}
        if ended.get("exitCode"):
            lines = [line for line in str(ended.get("message") or "").splitlines() if line.strip()]
            return cs.get("name") or "init", int(ended["exitCode"]), lines[-1][:500] if lines else ""
    return None

"""Reconcile's decisions, as a pure function (like `podstate.judge`): what to do about each active job given
what the cluster holds for it. `jobs.tasks.reconcile` gathers the facts (one list of pods, the active jobs,
the node names when a decision needs them) and carries the decisions out.

For each active job (its current attempt), in this order:

* a learner has run for the job's max_runtime (from its pod's startTime, as the kubelet counts
  `activeDeadlineSeconds`) and the job is not stopping (cancelling or halting): stop it as a halt does and
  fail it once its pods are gone, DeadlineExceeded (`past_max_runtime`; the watcher's deadline clock does it
  on time, this is the net);
* its pods exist and it is stopping: tear down again (a launch may have raced the first teardown);
* starting past LAUNCH_GRACE_SECONDS with an unscheduled learner bound to a node that is gone: requeue,
  NodeGone (no retry used);
* starting past LAUNCH_GRACE_SECONDS with an unschedulable learner pinned to a node that no longer has room
  for it (another scheduler's pod, a higher-priority pod took it): requeue, NodeTaken (no retry used), so
  that the next admission places it elsewhere instead of waiting PENDING_TIMEOUT_SECONDS;
* starting past PENDING_TIMEOUT_SECONDS: requeue, PendingTimeout (no retry used; fails at the limit);
* starting past the grace with fewer pods than learners (a launch that died half-way): launch again;
* no pods and cancelling: it is cancelled; no pods and halting: it is halted; no pods and starting past the
  grace: launch again; no pods and running: requeue, PodLost.

"Launch again" is never decided while a launch chain holds the attempt (`ActiveJob.launching`): that chain
may be backing off, and a second one would only double the requests.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from jobs.core.choices import JobStatus, Reason
from jobs.core.pools import is_potential
from jobs.core.states import STOPPING

Key = tuple[str, int]  # (job id, attempt)
Room = tuple[int, int, int]  # GPUs, CPU millicores, memory MiB
Action = Literal["deadline", "teardown", "requeue", "launch", "cancelled", "halted"]


@dataclass(frozen=True)
class ActiveJob:
    """An active job as reconcile sees it: its current attempt, state and how long ago it was admitted."""

    id: str
    attempt: int
    status: str  # JobStatus.STARTING, RUNNING, CANCELLING or HALTING
    learners: int
    admitted_seconds_ago: float
    placements: Sequence[str] = ()
    launching: bool = False  # a launch chain holds the attempt now
    per_learner: Room = (0, 0, 0)

    @property
    def key(self) -> Key:
        return (self.id, self.attempt)


@dataclass(frozen=True)
class PodFacts:
    """What the cluster holds for one attempt: the learner indexes with a pod, those not yet on a node (and
    not being deleted), those the scheduler called Unschedulable, and a learner past its deadline (None if
    none)."""

    learners: frozenset[int] = frozenset()
    unbound: tuple[int, ...] = ()
    overdue: int | None = None
    unschedulable: tuple[int, ...] = ()


@dataclass(frozen=True)
class Decision:
    """One thing to do about one job."""

    job: ActiveJob
    action: Action
    reason: str = ""
    message: str = ""
    learner: int | None = None


@dataclass(frozen=True)
class Clocks:
    """LAUNCH_GRACE_SECONDS and PENDING_TIMEOUT_SECONDS."""

    launch_grace: float
    pending_timeout: float


def needs_nodes(jobs: Sequence[ActiveJob], pods: Mapping[Key, PodFacts], clocks: Clocks) -> bool:
    """Whether deciding needs the cluster's node names (a starting job past the grace has an unscheduled
    learner, which may be bound to a node that is gone)."""
    return any(
        job.status == JobStatus.STARTING
        and job.admitted_seconds_ago > clocks.launch_grace
        and job.key in pods
        and pods[job.key].unbound
        for job in jobs
    )


def needs_room(jobs: Sequence[ActiveJob], pods: Mapping[Key, PodFacts], clocks: Clocks) -> bool:
    """Whether deciding needs the nodes' free room (a starting job past the grace, placed learner by
    learner, has a learner the scheduler called Unschedulable)."""
    return any(
        job.status == JobStatus.STARTING
        and job.admitted_seconds_ago > clocks.launch_grace
        and len(job.placements) == job.learners
        and job.key in pods
        and pods[job.key].unschedulable
        for job in jobs
    )


def chosen_node_taken(job: ActiveJob, unschedulable: Sequence[int], room: Mapping[str, Room]) -> str | None:
    """Why the job cannot start where admission placed it: a node chosen for its unschedulable learners has
    no longer room for them (the pods, pinned there, would wait while other nodes may be free); None when
    every such node still has the room (they wait for something else) or is unknown (gone: NodeGone)."""
    if len(job.placements) != job.learners:
        return None
    waiting: dict[str, list[int]] = {}
    for index in sorted(unschedulable):
        if index < len(job.placements) and job.placements[index]:
            waiting.setdefault(job.placements[index], []).append(index)
    for node, learners in waiting.items():
        free = room.get(node)
        if free is None:
            continue
        if any(have < want * len(learners) for have, want in zip(free, job.per_learner, strict=True)):
            listed = ", ".join(str(i) for i in learners)
            return f"node {node} chosen for learner {listed} has no room for it any more"
    return None


def chosen_node_gone(job: ActiveJob, unbound: Sequence[int], nodes: Collection[str]) -> str | None:
    """Why the job cannot start where admission placed it: an unscheduled learner's node is gone (its pod,
    bound there by node affinity, would wait for it forever); None when every such node still exists, or
    when the pods were not bound (no full placement, or a node a pool has yet to add: `jobs.core.pools`)."""
    if len(job.placements) != job.learners:
        return None
    for index in sorted(unbound):
        node = job.placements[index] if index < len(job.placements) else ""
        if node and not is_potential(node) and node not in nodes:
            return f"node {node} chosen for learner {index} is gone"
    return None


def decide(
    jobs: Sequence[ActiveJob],
    pods: Mapping[Key, PodFacts],
    clocks: Clocks,
    nodes: Collection[str] | None = None,
    room: Mapping[str, Room] | None = None,
) -> list[Decision]:
    """What to do about each active job (see the module docstring); jobs that need nothing get nothing.
    `nodes` are the nodes' names (`needs_nodes`), `room` their free room (`needs_room`)."""
    decisions = []
    for job in jobs:
        decision = _decide_one(job, pods.get(job.key), clocks, nodes, room or {})
        if decision is not None:
            decisions.append(decision)
    return decisions


def _decide_one(
    job: ActiveJob,
    facts: PodFacts | None,
    clocks: Clocks,
    nodes: Collection[str] | None,
    room: Mapping[str, Room],
) -> Decision | None:
    starting, age = job.status == JobStatus.STARTING, job.admitted_seconds_ago
    stopping = job.status in STOPPING
    if facts is not None and facts.overdue is not None and not stopping:
        return Decision(job, "deadline", Reason.DEADLINE_EXCEEDED, learner=facts.overdue)
    if facts is not None:
        gone = taken = None
        if starting and age > clocks.launch_grace and facts.unbound:
            gone = chosen_node_gone(job, facts.unbound, nodes or ())
        if starting and age > clocks.launch_grace and facts.unschedulable:
            taken = chosen_node_taken(job, facts.unschedulable, room)
        if stopping:
            return Decision(job, "teardown")
        if gone is not None:
            return Decision(job, "requeue", Reason.NODE_GONE, gone)
        if taken is not None:
            return Decision(job, "requeue", Reason.NODE_TAKEN, taken)
        if starting and age > clocks.pending_timeout:
            return Decision(job, "requeue", Reason.PENDING_TIMEOUT)
        if (
            starting
            and age > clocks.launch_grace
            and len(facts.learners) < job.learners
            and not job.launching
        ):
            return Decision(job, "launch")
        return None
    if job.status == JobStatus.CANCELLING:
        return Decision(job, "cancelled")
    if job.status == JobStatus.HALTING:
        return Decision(job, "halted")
    if starting and age > clocks.launch_grace and not job.launching:
        return Decision(job, "launch")
    if job.status == JobStatus.RUNNING:
        return Decision(job, "requeue", Reason.POD_LOST)
    return None


def past_max_runtime(pod: dict[str, Any], runtime: int | None, now: datetime) -> bool:
    """Whether an unfinished pod has run for `runtime` seconds (its job's max_runtime) since its startTime."""
    due = max_runtime_due(pod, runtime)
    return due is not None and now >= due


def max_runtime_due(pod: dict[str, Any], runtime: int | None) -> datetime | None:
    """When an unfinished pod will have run for `runtime` seconds since its startTime (counted as the
    kubelet counts `activeDeadlineSeconds`); None without a runtime, a start time, or once it has ended."""
    status = pod.get("status") or {}
    if not runtime or not status.get("startTime") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    try:
        started = datetime.fromisoformat(status["startTime"])
    except (TypeError, ValueError):
        return None
    return started + timedelta(seconds=int(runtime))

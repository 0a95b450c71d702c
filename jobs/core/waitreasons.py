"""Why a job waits for capacity: the wording of admission's two capacity reasons, apart from its decisions.

The admission cycle (:mod:`jobs.core.admission`) decides; this module only explains, for a job that the
cluster cannot take: either it never fits (not even the empty cluster, and why: no node of its type, one
learner larger than every node, the gang larger than all of them together, or taints), or it does not fit
now (and what is missing on the free nodes). Users read these texts on the job's page and tests pin them,
so they stay byte-identical. Pure: the cycle hands itself in as a :class:`CycleView`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from jobs.core.nodepool import Key, NodePool, Shape, slots_in

if TYPE_CHECKING:
    from jobs.core.admission import QueuedJob

_SHOWN_TAINTS = 3


class CycleView(Protocol):
    """What the wording reads of an admission cycle: which nodes a job may use, and what is free now."""

    all_taints: frozenset[str]
    now_pool: NodePool

    def key(self, job: QueuedJob) -> Key: ...

    def untolerated(self, key: Key) -> list[str]: ...

    def sizes(self, key: Key) -> list[Shape]: ...

    def fits_empty_cluster(self, key: Key, job: QueuedJob) -> bool: ...


def _type_text(gpu_type: str | None) -> str:
    return f" of type {gpu_type}" if gpu_type else ""


def utc_text(seconds: float) -> str:
    """A time (seconds since the epoch) as users read it, to the minute in UTC: it goes into stored reasons,
    so it must not change from one cycle to the next while the time it names stays the same."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _amount(dim: int, value: int) -> str:
    return (f"{value} GPUs", f"{value}m CPU", f"{value} MiB memory")[dim]


def _taints_text(taints: list[str]) -> str:
    shown = ", ".join(taints[:_SHOWN_TAINTS])
    hidden = len(taints) - _SHOWN_TAINTS
    return shown + (f" and {hidden} more" if hidden > 0 else "")


def never_fit_reason(cycle: CycleView, job: QueuedJob) -> str:
    """Why ``job`` fits not even the empty cluster: no node of its type (or none whose taints it
    tolerates), one learner larger than every node (the node is the limit), or the gang larger than all
    the nodes of its type together (the total is the limit); and when taints keep it off nodes that
    would fit, which."""
    key = cycle.key(job)
    kept_off = cycle.untolerated(key)
    if kept_off and not cycle.sizes(key):
        return (
            f"can never fit: no node{_type_text(job.gpu_type)} without taints the job does not tolerate "
            f"({_taints_text(kept_off)})"
        )
    reason = _never_fit_limit(job, cycle.sizes(key))
    if kept_off and cycle.fits_empty_cluster((key[0], cycle.all_taints), job):
        reason += f"; larger nodes have taints the job does not tolerate ({_taints_text(kept_off)})"
    return reason


def _never_fit_limit(job: QueuedJob, sizes: list[Shape]) -> str:
    """Which limit the gang runs into on the nodes it may use (``sizes``: their capacities), with figures."""
    need, gpu_type, learners = (job.gpus, job.cpu_millis, job.memory_mib), job.gpu_type, job.learners
    head = (
        f"can never fit: {learners} learner(s) x {job.gpus} GPUs{_type_text(gpu_type)}, "
        f"{job.cpu_millis}m CPU, {job.memory_mib} MiB"
    )
    nodes = f"{gpu_type} nodes" if gpu_type else "nodes"
    if not sizes:
        return f"{head}; the cluster has no {nodes}"
    largest = [max(size[dim] for size in sizes) for dim in range(3)]
    if not any(slots_in(size, need, 1) for size in sizes):
        over = [dim for dim in range(3) if need[dim] > largest[dim]]
        if over:
            wants = " and ".join(_amount(dim, need[dim]) for dim in over)
            has = " and ".join(_amount(dim, largest[dim]) for dim in over)
            return f"{head}; one learner needs {wants}, the largest of the cluster's {nodes} has {has}"
        most = ", ".join(_amount(dim, largest[dim]) for dim in range(3))
        return f"{head}; one learner fits on none of the cluster's {nodes} (the largest: {most})"
    total = [sum(size[dim] for size in sizes) for dim in range(3)]
    over = [dim for dim in range(3) if need[dim] * learners > total[dim]]
    if over:
        wants = " and ".join(_amount(dim, need[dim] * learners) for dim in over)
        has = " and ".join(_amount(dim, total[dim]) for dim in over)
        return f"{head}; together they need {wants}, the cluster's {nodes} have {has} in total"
    at_once = sum(slots_in(size, need, learners) for size in sizes)
    return f"{head}; the cluster's {nodes} hold at most {at_once} of them at once"


def capacity_reason(cycle: CycleView, job: QueuedJob) -> str:
    """Why ``job`` does not fit the free nodes now: the gang as a whole, the GPUs, or CPU and memory beside
    them; and when taints keep it off free nodes that would take a learner, which."""
    gpus, cpu_millis, memory_mib = need = (job.gpus, job.cpu_millis, job.memory_mib)
    key, pool = cycle.key(job), cycle.now_pool
    if pool.slots(key, need, 1) >= 1:
        return f"gang of {job.learners} learners does not fit at once"
    largest = pool.max_free_gpus(key)
    if gpus > largest:
        reason = f"no node has {gpus} free GPUs{_type_text(job.gpu_type)} (largest free: {largest})"
    else:
        reason = (
            f"no node with {gpus} free GPUs{_type_text(job.gpu_type)} also has {cpu_millis}m CPU "
            f"and {memory_mib} MiB free"
        )
    kept_off = cycle.untolerated(key)
    if kept_off and pool.slots((key[0], cycle.all_taints), need, 1) >= 1:
        reason += (
            " among nodes without taints the job does not tolerate "
            f"({_taints_text(kept_off)} keep it off the rest)"
        )
    return reason

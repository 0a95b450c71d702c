"""Gang admission: one pure, deterministic scheduler cycle over a snapshot of queue, quotas and nodes.

It runs in the beat scheduler cycle and in the trace-driven simulator, so it takes frozen
dataclasses, does no I/O and imports nothing of Django. Policy ``trainyard`` (default):

* Fair share: the tenant with the lowest weighted dominant share ``max(used / cluster) / weight``
  (ties by name) offers its next job; shares are recomputed after each admission. Within a tenant:
  priority (high first), then ``submitted_at``, then id.
* Gangs are all-or-nothing: learners go one by one to the best-fit node (fewest free GPUs, then
  least free CPU, then name) of the demanded ``gpu_type`` (any node when None), or none is placed.
* Taints: a node is a candidate for a job only if the job tolerates every one of the node's taints
  (``Node.taints``, NoSchedule/NoExecute; ``QueuedJob.tolerated``, worked out by the caller from the
  tolerations its pods will carry). CPU-only jobs tolerate no GPU taint, so they stay off tainted GPU
  nodes; among the nodes they may use, best-fit puts them on nodes with no free GPUs first.
* Quotas (GPUs, CPU, memory, running jobs) are never exceeded. A tenant's queue is strict: once its
  next job is blocked by its own quota its later jobs wait too, but other tenants carry on. A job
  over its whole quota, or too big for the empty cluster, is reported and blocks nothing.
* Backfill (EASY, per node): the first job in turn order blocked by capacity is the *head*. Releases
  (running jobs' ``ends_at``; this cycle's admissions at ``now + expected_duration``; unknown ends
  last) are replayed in time order until the head's gang fits: that time is ``start_at`` (None if it
  fits only after jobs of unknown end) and the head's best-fit placement then is reserved, with its
  quota held in its tenant. A later job may start now only if (a) it has an ``expected_duration``
  and ends by a finite ``start_at``, or (b) on every node it uses, its use fits in ``free now +
  released by start_at - reserved``. Neither can delay the head past ``start_at``; each cycle
  recomputes the reservation, which can only move earlier while the same job is head.

Policy ``fifo`` (FfDL): one queue by ``submitted_at`` then id, no fair share, priorities or
backfill; the first job blocked by capacity or quota stops the cycle (head-of-line blocking). Jobs
that can never fit are skipped so that they do not block the queue forever.

Each job not admitted gets a 1-based ``position`` (the order the cycle considered it in; jobs of
quota-blocked tenants last) and a human reason.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Literal

from common.resources import Resources
from jobs.core.nodepool import ANY as _ANY
from jobs.core.nodepool import Key as _Key
from jobs.core.nodepool import NodePool, Shape, slots_in

Policy = Literal["trainyard", "fifo"]
_INF = float("inf")
_NO_TAINTS: frozenset[str] = frozenset()
_INVALID = "invalid job: needs at least one learner and no negative amounts"


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A queued job; ``gpus``, ``cpu_millis`` and ``memory_mib`` are per learner.

    ``tolerated``: the node taints (spelt as in ``Node.taints``) its pods tolerate.
    """

    id: str
    tenant: str
    priority: int
    submitted_at: float
    learners: int
    gpus: int
    cpu_millis: int
    memory_mib: int
    gpu_type: str | None = None
    expected_duration: float | None = None
    tolerated: frozenset[str] = _NO_TAINTS

    @property
    def per_learner(self) -> Resources:
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)


@dataclass(frozen=True, slots=True)
class TenantState:
    """A tenant's weight, quota and current usage (running jobs only)."""

    name: str
    weight: float
    quota: Resources
    max_running_jobs: int
    used: Resources
    running_jobs: int


@dataclass(frozen=True, slots=True)
class Node:
    """A node's free and total resources; ``gpu_type`` None for a node without GPUs.

    ``taints``: its NoSchedule and NoExecute taints (any spelling, e.g. ``nvidia.com/gpu=present:NoSchedule``);
    only jobs that tolerate all of them may use the node.
    """

    name: str
    free: Resources
    capacity: Resources
    gpu_type: str | None = None
    taints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job's expected end (None if unknown) and where its learners sit."""

    job_id: str
    ends_at: float | None
    placements: tuple[str, ...]
    per_learner: Resources


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle looks at; ``running`` feeds backfill reservations."""

    jobs: Sequence[QueuedJob]
    tenants: Sequence[TenantState]
    nodes: Sequence[Node]
    now: float = 0.0
    running: Sequence[RunningJob] = ()


@dataclass(frozen=True, slots=True)
class Admission:
    """Start ``job_id`` now with one node name per learner."""

    job_id: str
    placements: list[str]


@dataclass(frozen=True, slots=True)
class Pending:
    """A job left queued: its 1-based place in the queue and why it waits."""

    job_id: str
    position: int
    reason: str


@dataclass(frozen=True, slots=True)
class Reservation:
    """Resources held for the head job: earliest start (None if unknown) and its placement."""

    job_id: str
    start_at: float | None
    placements: list[str]


@dataclass(frozen=True, slots=True)
class Decision:
    """Result of one cycle: admissions in order, then every other job once."""

    admitted: list[Admission] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    reservation: Reservation | None = None


def _shape(job: QueuedJob) -> Shape:
    return (job.gpus, job.cpu_millis, job.memory_mib)


def _type_text(gpu_type: str | None) -> str:
    return f" of type {gpu_type}" if gpu_type else ""


def _amount(dim: int, value: int) -> str:
    return (f"{value} GPUs", f"{value}m CPU", f"{value} MiB memory")[dim]


def _taints_text(taints: list[str]) -> str:
    return ", ".join(taints[:3]) + (f" and {len(taints) - 3} more" if len(taints) > 3 else "")


def _invalid(job: QueuedJob) -> bool:
    return job.learners < 1 or min(job.gpus, job.cpu_millis, job.memory_mib) < 0


class _Cycle:
    """Mutable working state of one admission cycle (private to :func:`admit`)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snap = snapshot
        nodes = snapshot.nodes
        names = [n.name for n in nodes]
        if names != sorted(names):
            nodes = sorted(nodes, key=attrgetter("name"))
        self.nodes = nodes
        self.types = [n.gpu_type for n in nodes]
        self.taints = [frozenset(n.taints) if n.taints else _NO_TAINTS for n in nodes]
        self.all_taints: frozenset[str] = frozenset().union(*self.taints)
        self.caps = [n.capacity.as_shape() for n in nodes]
        free = [n.free.as_shape() for n in nodes]
        self.now_pool = NodePool(free, self.types, self.taints)
        self.long_pool: NodePool | None = None
        self.surplus: dict[int, list[int]] = {}
        self.total = tuple(map(sum, zip(*self.caps, strict=True))) if nodes else (0, 0, 0)
        self.by_size: dict[_Key, list[Shape]] = {}
        self.tenants = {t.name: t for t in snapshot.tenants}
        self.used = {t.name: list(t.used.as_shape()) for t in snapshot.tenants}
        self.running = {t.name: t.running_jobs for t in snapshot.tenants}
        self.held: dict[str, Shape] = {}
        self.admitted: list[Admission] = []
        self.admitted_ends: list[tuple[float, list[int], Shape]] = []
        self.pending: list[tuple[str, str]] = []
        self.never_fit: dict[tuple[_Key, Shape, int], bool] = {}
        self.reasons: dict[tuple[_Key, Shape, int], str] = {}
        self.failed: set[tuple[str, _Key, Shape, int]] = set()
        self.reservation: Reservation | None = None

    def key(self, job: QueuedJob) -> _Key:
        """Which nodes ``job`` may use: its gpu type and the taints present in the cluster it tolerates."""
        if not self.all_taints:
            return (job.gpu_type or _ANY, _NO_TAINTS)
        return (job.gpu_type or _ANY, job.tolerated & self.all_taints)

    def eligible(self, key: _Key) -> list[bool]:
        gpu_type, tolerated = key
        return [
            (gpu_type == _ANY or t == gpu_type) and taints <= tolerated
            for t, taints in zip(self.types, self.taints, strict=True)
        ]

    def untolerated(self, key: _Key) -> list[str]:
        """The taints that keep the job off nodes of its gpu type, sorted ([] when none does)."""
        if len(key[1]) == len(self.all_taints):
            return []
        found: set[str] = set()
        for t, taints in zip(self.types, self.taints, strict=True):
            if key[0] == _ANY or t == key[0]:
                found |= taints - key[1]
        return sorted(found)

    def share(self, tenant: str) -> float:
        used = self.used[tenant]
        dominant = max((u / c for u, c in zip(used, self.total, strict=True) if c > 0), default=0.0)
        return dominant / max(self.tenants[tenant].weight, 1e-12)

    def quota_reason(self, job: QueuedJob) -> tuple[str, bool] | None:
        """Why the tenant's quota stops ``job`` and whether it can never fit the quota, or None."""
        t = self.tenants.get(job.tenant)
        if t is None:
            return f"unknown tenant {job.tenant}", True
        held = self.held.get(job.tenant)
        running = self.running[job.tenant] + (held is not None)
        if running >= t.max_running_jobs:
            return f"tenant running-job limit {running}/{t.max_running_jobs} reached", False
        need = (job.gpus * job.learners, job.cpu_millis * job.learners, job.memory_mib * job.learners)
        quota = t.quota.as_shape()
        used = self.used[job.tenant]
        for d, (label, unit) in enumerate((("GPU", ""), ("CPU", "m"), ("memory", " MiB"))):
            n, q, u, h = need[d], quota[d], used[d], held[d] if held else 0
            if n > q:
                return f"needs {n}{unit} {label} > tenant quota {q}{unit}; can never start", True
            if u + h + n > q:
                extra = f"; {h}{unit} held for the reserved job" if h else ""
                return f"tenant {label} quota {u}{unit}/{q}{unit} in use (needs {n}{unit}{extra})", False
        return None

    def sizes(self, key: _Key) -> list[Shape]:
        if key not in self.by_size:
            match = [c for c, ok in zip(self.caps, self.eligible(key), strict=True) if ok]
            self.by_size[key] = sorted(match, reverse=True)
        return self.by_size[key]

    def _fits_empty(self, key: _Key, job: QueuedJob) -> bool:
        total = 0
        for cap in self.sizes(key):
            total += slots_in(cap, _shape(job), job.learners - total)
            if total >= job.learners:
                return True
        return False

    def can_never_fit(self, job: QueuedJob) -> bool:
        key = (self.key(job), _shape(job), job.learners)
        if key not in self.never_fit:
            self.never_fit[key] = not self._fits_empty(key[0], job)
        return self.never_fit[key]

    def never_fit_reason(self, job: QueuedJob) -> str:
        """Why ``job`` fits not even the empty cluster: no node of its type (or none whose taints it
        tolerates), one learner larger than every node (the node is the limit), or the gang larger than all
        the nodes of its type together (the total is the limit); and when taints keep it off nodes that
        would fit, which."""
        key = self.key(job)
        kept_off = self.untolerated(key)
        if kept_off and not self.sizes(key):
            return (
                f"can never fit: no node{_type_text(job.gpu_type)} without taints the job does not tolerate "
                f"({_taints_text(kept_off)})"
            )
        reason = self._never_fit_limit(job, self.sizes(key))
        if kept_off and self._fits_empty((key[0], self.all_taints), job):
            reason += f"; larger nodes have taints the job does not tolerate ({_taints_text(kept_off)})"
        return reason

    def _never_fit_limit(self, job: QueuedJob, sizes: list[Shape]) -> str:
        need, t = _shape(job), job.gpu_type
        head = (
            f"can never fit: {job.learners} learner(s) x {job.gpus} GPUs{_type_text(t)}, "
            f"{job.cpu_millis}m CPU, {job.memory_mib} MiB"
        )
        nodes = f"{t} nodes" if t else "nodes"
        if not sizes:
            return f"{head}; the cluster has no {nodes}"
        largest = [max(s[d] for s in sizes) for d in range(3)]
        if not any(slots_in(cap, need, 1) for cap in sizes):
            over = [d for d in range(3) if need[d] > largest[d]]
            if over:
                wants = " and ".join(_amount(d, need[d]) for d in over)
                has = " and ".join(_amount(d, largest[d]) for d in over)
                return f"{head}; one learner needs {wants}, the largest of the cluster's {nodes} has {has}"
            most = ", ".join(_amount(d, largest[d]) for d in range(3))
            return f"{head}; one learner fits on none of the cluster's {nodes} (the largest: {most})"
        total = [sum(s[d] for s in sizes) for d in range(3)]
        over = [d for d in range(3) if need[d] * job.learners > total[d]]
        if over:
            wants = " and ".join(_amount(d, need[d] * job.learners) for d in over)
            has = " and ".join(_amount(d, total[d]) for d in over)
            return f"{head}; together they need {wants}, the cluster's {nodes} have {has} in total"
        fit = sum(slots_in(cap, need, job.learners) for cap in sizes)
        return f"{head}; the cluster's {nodes} hold at most {fit} of them at once"

    def capacity_reason(self, job: QueuedJob) -> str:
        g, c, m = _shape(job)
        key, pool = self.key(job), self.now_pool
        if pool.slots(key, (g, c, m), 1) >= 1:
            return f"gang of {job.learners} learners does not fit at once"
        largest = pool.max_free_gpus(key)
        if g > largest:
            reason = f"no node has {g} free GPUs{_type_text(job.gpu_type)} (largest free: {largest})"
        else:
            reason = (
                f"no node with {g} free GPUs{_type_text(job.gpu_type)} also has {c}m CPU and {m} MiB free"
            )
        kept_off = self.untolerated(key)
        if kept_off and pool.slots((key[0], self.all_taints), (g, c, m), 1) >= 1:
            reason += (
                " among nodes without taints the job does not tolerate "
                f"({_taints_text(kept_off)} keep it off the rest)"
            )
        return reason

    def try_place(self, job: QueuedJob, via: str) -> list[int] | None:
        cls = self.key(job)
        key = (via, cls, _shape(job), job.learners)
        if key in self.failed:
            return None
        pool = self.long_pool if via == "long" else self.now_pool
        assert pool is not None
        placed = pool.place_gang(cls, _shape(job), job.learners)
        if placed is None:
            self.failed.add(key)
        else:
            self.commit(job, placed, via)
        return placed

    def commit(self, job: QueuedJob, placed: list[int], via: str) -> None:
        """Record an admission placed in pool ``via``: keep both pools in step and charge the tenant."""
        shape = _shape(job)
        self.reasons.clear()
        if via == "long":
            for i in placed:
                self.now_pool.shift(i, shape, -1)
                s = self.surplus.get(i)
                if s is not None:
                    s[:] = [s[d] - shape[d] for d in range(3)]
        if self.long_pool is not None:
            for i in set(placed):
                self.long_pool.set_free(i, self.now_pool.free[i], self.surplus.get(i))
        used = self.used[job.tenant]
        for d in range(3):
            used[d] += shape[d] * job.learners
        self.running[job.tenant] += 1
        ends = _INF if job.expected_duration is None else self.snap.now + job.expected_duration
        self.admitted_ends.append((ends, placed, shape))
        self.admitted.append(Admission(job.id, [self.nodes[i].name for i in placed]))

    def releases(self) -> list[tuple[float, int, Shape]]:
        index = {n.name: i for i, n in enumerate(self.nodes)}
        out: list[tuple[float, int, Shape]] = []
        for r in self.snap.running:
            shape = r.per_learner.as_shape()
            end = _INF if r.ends_at is None else r.ends_at
            out.extend((end, index[n], shape) for n in r.placements if n in index)
        for end, placed, shape in self.admitted_ends:
            out.extend((end, i, shape) for i in placed)
        out.sort(key=lambda e: (e[0], e[1]))
        return out

    def reserve(self, job: QueuedJob) -> Reservation:
        """Make ``job`` the head: replay releases to its earliest start and hold its placement then."""
        need, learners = _shape(job), job.learners
        free = list(self.now_pool.free)
        match = self.eligible(self.key(job))
        slots = [slots_in(f, need, learners) if ok else 0 for f, ok in zip(free, match, strict=True)]
        total, start, found = sum(slots), None, False
        events = self.releases()
        k = 0
        while k < len(events) and not found:
            end = events[k][0]
            while k < len(events) and events[k][0] == end:
                _, i, s = events[k]
                free[i] = (free[i][0] + s[0], free[i][1] + s[1], free[i][2] + s[2])
                if match[i]:
                    total -= slots[i]
                    slots[i] = slots_in(free[i], need, learners)
                    total += slots[i]
                k += 1
            if total >= learners:
                found, start = True, (None if end == _INF else end)
        if not found:
            free = list(self.caps)
        placed: list[int] = []
        for _ in range(learners):
            fits = [i for i, ok in enumerate(match) if ok and slots_in(free[i], need, 1)]
            i = min(fits, key=lambda i: (free[i][0], free[i][1], i))
            free[i] = (free[i][0] - need[0], free[i][1] - need[1], free[i][2] - need[2])
            placed.append(i)
        self.surplus = {i: list(free[i]) for i in set(placed)}
        self.long_pool = self.now_pool.copy()
        for i in self.surplus:
            self.long_pool.set_free(i, self.now_pool.free[i], self.surplus[i])
        self.held[job.tenant] = (need[0] * learners, need[1] * learners, need[2] * learners)
        return Reservation(job.id, start, [self.nodes[i].name for i in placed])

    def offer(self, job: QueuedJob) -> bool:
        """Consider one job under the trainyard policy; False if its tenant is now quota-blocked."""
        if _invalid(job):
            self.pending.append((job.id, _INVALID))
            return True
        quota = self.quota_reason(job)
        if quota is not None:
            self.pending.append((job.id, quota[0]))
            return quota[1]
        res = self.reservation
        short = (
            res is not None
            and res.start_at is not None
            and job.expected_duration is not None
            and self.snap.now + job.expected_duration <= res.start_at
        )
        if self.try_place(job, "now" if res is None or short else "long") is not None:
            return True
        key = (self.key(job), _shape(job), job.learners)
        reason = self.reasons.get(key)
        if reason is None:
            if self.can_never_fit(job):
                reason = self.never_fit_reason(job)
            elif res is None:
                reason = self.capacity_reason(job)
                res = self.reservation = self.reserve(job)
                when = "start time unknown" if res.start_at is None else f"from t={res.start_at:g}"
                self.pending.append((job.id, f"{reason}; resources reserved for it ({when})"))
                return True
            elif self.now_pool.slots(key[0], _shape(job), job.learners) >= job.learners:
                # The reserved job may be another tenant's: its id is not this tenant's to see.
                reason = "waiting: the free resources are reserved for a job ahead of it in the queue"
            else:
                reason = self.capacity_reason(job)
            self.reasons[key] = reason
        self.pending.append((job.id, reason))
        return True


def _run_trainyard(cycle: _Cycle, jobs: Sequence[QueuedJob]) -> None:
    queues: dict[str, list[QueuedJob]] = {}
    for job in jobs:
        queues.setdefault(job.tenant, []).append(job)
    for name in sorted(queues):
        queues[name].sort(key=lambda j: (-j.priority, j.submitted_at, j.id), reverse=True)
        if name not in cycle.tenants:
            cycle.pending.extend((j.id, f"unknown tenant {name}") for j in reversed(queues.pop(name)))
    heap = [(cycle.share(name), name) for name in queues]
    heapq.heapify(heap)
    deferred: list[tuple[str, str]] = []
    while heap:
        share, name = heapq.heappop(heap)
        queue = queues[name]
        job = queue.pop()
        before = len(cycle.admitted)
        if not cycle.offer(job):
            deferred.append(cycle.pending.pop())
            deferred.extend(
                (j.id, f"waiting behind job {job.id} of the same tenant (tenant quota)")
                for j in reversed(queue)
            )
            continue
        if queue:
            heapq.heappush(heap, (cycle.share(name) if len(cycle.admitted) > before else share, name))
    cycle.pending.extend(deferred)


def _run_fifo(cycle: _Cycle, jobs: Sequence[QueuedJob]) -> None:
    ordered = sorted(jobs, key=lambda j: (j.submitted_at, j.id))
    for k, job in enumerate(ordered):
        if _invalid(job):
            cycle.pending.append((job.id, _INVALID))
            continue
        quota = cycle.quota_reason(job)
        if quota is not None and quota[1]:
            cycle.pending.append((job.id, quota[0]))
            continue
        if quota is None and cycle.try_place(job, "now") is not None:
            continue
        if quota is None and cycle.can_never_fit(job):
            cycle.pending.append((job.id, cycle.never_fit_reason(job)))
            continue
        reason = quota[0] if quota is not None else cycle.capacity_reason(job)
        cycle.pending.append((job.id, f"{reason} (head of the FIFO queue)"))
        cycle.pending.extend(
            (j.id, "waiting behind the head of the FIFO queue (head-of-line)") for j in ordered[k + 1 :]
        )
        return


def admit(snapshot: Snapshot, *, policy: Policy = "trainyard") -> Decision:
    """Decide which queued jobs start now and why every other job waits (see the module docstring)."""
    cycle = _Cycle(snapshot)
    if policy == "fifo":
        _run_fifo(cycle, snapshot.jobs)
    elif policy == "trainyard":
        _run_trainyard(cycle, snapshot.jobs)
    else:
        raise ValueError(f"unknown policy {policy!r}")
    pending = [Pending(job_id, k, reason) for k, (job_id, reason) in enumerate(cycle.pending, start=1)]
    return Decision(admitted=cycle.admitted, pending=pending, reservation=cycle.reservation)

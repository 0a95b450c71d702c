"""Gang admission: one pure, deterministic scheduler cycle over a snapshot of queue, quotas and nodes.

It runs in the beat scheduler cycle and in the trace-driven simulator, so it takes frozen
dataclasses, does no I/O and imports nothing of Django. Policy ``trainyard`` (default):

* Fair share: the tenant with the lowest weighted dominant share ``max((used + decayed) / cluster) /
  weight`` (ties by name) offers its next job; shares are recomputed after each admission. ``used``: what
  it holds now; ``decayed``: its past usage weighted by a half-life (jobs.core.fairshare; zero when that
  is off), so a tenant that used much lately yields. Within a tenant: priority (high first), then
  ``submitted_at``, then id.
* Gangs are all-or-nothing: learners go one by one to the best-fit node (fewest free GPUs, then
  least free CPU, then name) of the demanded ``gpu_type`` (any node when None), or none is placed.
* Taints: a node is a candidate for a job only if the job tolerates every one of the node's taints
  (``Node.taints``, NoSchedule/NoExecute; ``QueuedJob.tolerated``, worked out by the caller from the
  tolerations its pods will carry). CPU-only jobs tolerate no GPU taint, so they stay off tainted GPU
  nodes; among the nodes they may use, best-fit puts them on nodes with no free GPUs first.
* Quotas (GPUs, CPU, memory, running jobs) are never exceeded; a tenant may borrow above its nominal
  GPU/CPU/memory quota what its cohort leaves unused, within its borrowing limit (jobs.core.borrowing).
  A tenant's queue is strict: once its next job is blocked by its own quota its later jobs wait too,
  but other tenants carry on. A job over its whole quota, or too big for the empty cluster, is
  reported and blocks nothing.
* Backfill (EASY, per node): the first job in turn order blocked by capacity is the *head*. Releases
  (running jobs' ``ends_at``; this cycle's admissions at ``now + expected_duration``; unknown ends
  last) are replayed in time order until the head's gang fits: that time is ``start_at`` (None if it
  fits only after jobs of unknown end) and the head's best-fit placement then is reserved, with its
  quota held in its tenant. A later job may start now only if (a) it has an ``expected_duration``
  and ends by a finite ``start_at``, or (b) on every node it uses, its use fits in ``free now +
  released by start_at - reserved``. Neither can delay the head past ``start_at``; each cycle
  recomputes the reservation, which can only move earlier while the same job is head.
* Nominal first (``nominal_first``, on while preemption is): a tenant whose next job stays within its
  nominal quota is offered before tenants whose next job would borrow, lowest share first within each
  group (Kueue's scheduler orders its heads the same way). Without it, the room a reclaim frees could go
  straight back to the victim's tenant, when taking the victim left it with the lower share, and the
  lender's job would wait for another preemption.

Policy ``fifo`` (FfDL): one queue by ``submitted_at`` then id, no fair share, priorities or
backfill; the first job blocked by capacity or quota stops the cycle (head-of-line blocking). Jobs
that can never fit are skipped so that they do not block the queue forever.

Each job not admitted gets a 1-based ``position`` (the order the cycle considered it in; jobs of
quota-blocked tenants last) and a human reason; the wording of the capacity reasons (never fits, does
not fit now) lives in :mod:`jobs.core.waitreasons`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Literal

from common.resources import Resources
from jobs.core.borrowing import NO_BORROWING, Cohorts, Limit, over_nominal
from jobs.core.claims import claim_wait
from jobs.core.nodepool import ANY as _ANY
from jobs.core.nodepool import Key as _Key
from jobs.core.nodepool import NodePool, Shape, slots_in
from jobs.core.waitreasons import capacity_reason, never_fit_reason, utc_text

Policy = Literal["trainyard", "fifo"]
_INF = float("inf")
_NO_TAINTS: frozenset[str] = frozenset()
_INVALID = "invalid job: needs at least one learner and no negative amounts"


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A queued job; ``gpus``, ``cpu_millis`` and ``memory_mib`` are per learner.

    ``tolerated``: the node taints (spelt as in ``Node.taints``) its pods tolerate. ``claims`` and
    ``storage_gib``: the checkpoint claims (count, GiB) its launch creates beyond those it already holds
    (0 for a requeued or resumed job, whose claims its tenant's usage counts already).
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
    claims: int = 0
    storage_gib: int = 0

    @property
    def per_learner(self) -> Resources:
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)


@dataclass(frozen=True, slots=True)
class TenantState:
    """A tenant's weight, nominal quota and current usage (running jobs only); what it may borrow beyond
    ``quota`` and from whom (``borrowing_limit``, ``cohort``: jobs.core.borrowing; by default nothing);
    ``decayed``: its past usage in the units of ``used`` (jobs.core.fairshare), for fair share only;
    ``max_claims``, ``storage_quota_gib``: its claim quota (None: none), never borrowed; ``claims``,
    ``storage_gib``: what its jobs' claims hold now, halted and finished jobs' included."""

    name: str
    weight: float
    quota: Resources
    max_running_jobs: int
    used: Resources
    running_jobs: int
    borrowing_limit: Limit = NO_BORROWING
    cohort: str = ""
    decayed: tuple[float, float, float] = (0.0, 0.0, 0.0)
    max_claims: int | None = None
    storage_quota_gib: int | None = None
    claims: int = 0
    storage_gib: int = 0

    @property
    def nominal(self) -> Shape:
        return self.quota.as_shape()


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
    """Start ``job_id`` now with one node name per learner; ``borrowed``: above its tenant's nominal quota."""

    job_id: str
    placements: list[str]
    borrowed: bool = False


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


def _invalid(job: QueuedJob) -> bool:
    return job.learners < 1 or min(job.gpus, job.cpu_millis, job.memory_mib) < 0


class _Cycle:
    """Mutable working state of one admission cycle (private to :func:`admit`).

    Two pools of free resources: ``now_pool`` (what is free now) and, once a head job holds a reservation,
    ``long_pool`` (free now but capped on the reserved nodes by their ``surplus``: what stays free there
    after the head starts), in which a job of unknown or long duration may still start.
    """

    def __init__(self, snapshot: Snapshot) -> None:
        self.snap = snapshot
        nodes = snapshot.nodes
        names = [node.name for node in nodes]
        if names != sorted(names):
            nodes = sorted(nodes, key=attrgetter("name"))
        self.nodes = nodes
        self.types = [node.gpu_type for node in nodes]
        self.taints = [frozenset(node.taints) if node.taints else _NO_TAINTS for node in nodes]
        self.all_taints: frozenset[str] = frozenset().union(*self.taints)
        self.caps = [node.capacity.as_shape() for node in nodes]
        self.now_pool = NodePool([node.free.as_shape() for node in nodes], self.types, self.taints)
        self.long_pool: NodePool | None = None
        self.surplus: dict[int, list[int]] = {}
        self.total = tuple(map(sum, zip(*self.caps, strict=True))) if nodes else (0, 0, 0)
        self.by_size: dict[_Key, list[Shape]] = {}
        self.tenants = {tenant.name: tenant for tenant in snapshot.tenants}
        self.nominal = {name: tenant.nominal for name, tenant in self.tenants.items()}
        self.cohorts = Cohorts(snapshot.tenants)
        self.used = {tenant.name: list(tenant.used.as_shape()) for tenant in snapshot.tenants}
        self.running = {tenant.name: tenant.running_jobs for tenant in snapshot.tenants}
        self.claims = {tenant.name: [tenant.claims, tenant.storage_gib] for tenant in snapshot.tenants}
        # The reserved job's whole demand, per tenant: charged against its quota before it starts.
        self.held: dict[str, Shape] = {}
        self.admitted: list[Admission] = []
        self.admitted_ends: list[tuple[float, list[int], Shape]] = []
        self.pending: list[tuple[str, str]] = []
        # Caches keyed by gang (nodes key, shape, learners). Reasons hold until the next admission; failed
        # placements (per pool) hold all cycle, since pools only fill up within a cycle.
        self.never_fit: dict[tuple[_Key, Shape, int], bool] = {}
        self.never_fit_texts: dict[tuple[_Key, Shape, int], str] = {}
        self.reasons: dict[tuple[_Key, Shape, int], str] = {}
        self.failed: set[tuple[str, _Key, Shape, int]] = set()
        self.reservation: Reservation | None = None

    def key(self, job: QueuedJob) -> _Key:
        """Which nodes ``job`` may use: its gpu type and the taints present in the cluster it tolerates."""
        if not self.all_taints:
            return (job.gpu_type or _ANY, _NO_TAINTS)
        return (job.gpu_type or _ANY, job.tolerated & self.all_taints)

    def eligible(self, key: _Key) -> list[bool]:
        """Per node (in name order), whether a job of ``key`` may use it."""
        gpu_type, tolerated = key
        return [
            (gpu_type == _ANY or node_type == gpu_type) and taints <= tolerated
            for node_type, taints in zip(self.types, self.taints, strict=True)
        ]

    def untolerated(self, key: _Key) -> list[str]:
        """The taints that keep the job off nodes of its gpu type, sorted ([] when none does)."""
        gpu_type, tolerated = key
        if len(tolerated) == len(self.all_taints):
            return []
        found: set[str] = set()
        for node_type, taints in zip(self.types, self.taints, strict=True):
            if gpu_type == _ANY or node_type == gpu_type:
                found |= taints - tolerated
        return sorted(found)

    def share(self, tenant: str) -> float:
        """The tenant's weighted dominant share: its largest fraction of any resource (now + decayed), per weight."""
        state = self.tenants[tenant]
        fractions = (
            (used + past) / total
            for used, past, total in zip(self.used[tenant], state.decayed, self.total, strict=True)
            if total > 0
        )
        return max(fractions, default=0.0) / max(state.weight, 1e-12)

    def quota_reason(self, job: QueuedJob) -> tuple[str, bool] | None:
        """Why the tenant's quota (nominal, or what it may borrow: jobs.core.borrowing) stops ``job`` and
        whether it can never fit the quota, or None."""
        tenant = self.tenants.get(job.tenant)
        if tenant is None:
            return f"unknown tenant {job.tenant}", True
        running = self.running[job.tenant] + (job.tenant in self.held)
        if running >= tenant.max_running_jobs:
            return f"tenant running-job limit {running}/{tenant.max_running_jobs} reached", False
        if job.claims or job.storage_gib:
            caps = (tenant.max_claims, tenant.storage_quota_gib)
            storage = claim_wait((job.claims, job.storage_gib), held=self.claims[job.tenant], caps=caps)
            if storage is not None:
                return storage
        need = (job.gpus * job.learners, job.cpu_millis * job.learners, job.memory_mib * job.learners)
        return self.cohorts.check(tenant, need, self.used, self.held)

    def borrows(self, job: QueuedJob) -> bool:
        """Whether admitting ``job`` now would put its tenant above its nominal quota."""
        nominal = self.nominal.get(job.tenant)
        if nominal is None:
            return False
        used, learners = self.used[job.tenant], job.learners
        return (
            used[0] + job.gpus * learners > nominal[0]
            or used[1] + job.cpu_millis * learners > nominal[1]
            or used[2] + job.memory_mib * learners > nominal[2]
        )

    def sizes(self, key: _Key) -> list[Shape]:
        """The capacities of the nodes a job of ``key`` may use, largest first (cached for the cycle)."""
        if key not in self.by_size:
            eligible = self.eligible(key)
            self.by_size[key] = sorted(
                (cap for cap, ok in zip(self.caps, eligible, strict=True) if ok), reverse=True
            )
        return self.by_size[key]

    def fits_empty_cluster(self, key: _Key, job: QueuedJob) -> bool:
        """Whether ``job``'s gang fits the nodes of ``key`` with nothing running on them."""
        need, fitting = _shape(job), 0
        for cap in self.sizes(key):
            fitting += slots_in(cap, need, job.learners - fitting)
            if fitting >= job.learners:
                return True
        return False

    def can_never_fit(self, job: QueuedJob) -> bool:
        """Whether ``job`` fits not even the empty cluster, so that it must not block anything."""
        gang = (self.key(job), _shape(job), job.learners)
        if gang not in self.never_fit:
            self.never_fit[gang] = not self.fits_empty_cluster(gang[0], job)
        return self.never_fit[gang]

    def never_fit_reason(self, job: QueuedJob) -> str:
        """Why ``job`` never fits (jobs.core.waitreasons), cached per gang for the cycle: the wording reads
        only the gang and the nodes' capacities and taints, which the cycle does not change."""
        gang = (self.key(job), _shape(job), job.learners)
        reason = self.never_fit_texts.get(gang)
        if reason is None:
            reason = self.never_fit_texts[gang] = never_fit_reason(self, job)
        return reason

    def try_place(self, job: QueuedJob, via: str) -> list[int] | None:
        """Place ``job``'s gang in pool ``via`` ("now" or "long") and commit it; None if it does not fit."""
        nodes_key = self.key(job)
        attempt = (via, nodes_key, _shape(job), job.learners)
        if attempt in self.failed:
            return None
        pool = self.long_pool if via == "long" else self.now_pool
        assert pool is not None
        placed = pool.place_gang(nodes_key, _shape(job), job.learners)
        if placed is None:
            self.failed.add(attempt)
        else:
            self.commit(job, placed, via)
        return placed

    def commit(self, job: QueuedJob, placed: list[int], via: str) -> None:
        """Record an admission placed in pool ``via``: keep both pools in step and charge the tenant."""
        shape = _shape(job)
        self.reasons.clear()
        if via == "long":
            for node in placed:
                self.now_pool.shift(node, shape, -1)
                surplus = self.surplus.get(node)
                if surplus is not None:
                    surplus[:] = [surplus[dim] - shape[dim] for dim in range(3)]
        if self.long_pool is not None:
            for node in set(placed):
                self.long_pool.set_free(node, self.now_pool.free[node], self.surplus.get(node))
        used = self.used[job.tenant]
        for dim in range(3):
            used[dim] += shape[dim] * job.learners
        self.running[job.tenant] += 1
        claims = self.claims[job.tenant]
        claims[0] += job.claims
        claims[1] += job.storage_gib
        ends = _INF if job.expected_duration is None else self.snap.now + job.expected_duration
        self.admitted_ends.append((ends, placed, shape))
        borrowed = over_nominal(used, self.nominal[job.tenant])
        self.admitted.append(Admission(job.id, [self.nodes[node].name for node in placed], borrowed))

    def releases(self) -> list[tuple[float, int, Shape]]:
        """What comes free, where and when: (end, node index, one learner's shape), in time then node order."""
        node_index = {node.name: index for index, node in enumerate(self.nodes)}
        out: list[tuple[float, int, Shape]] = []
        for running in self.snap.running:
            shape = running.per_learner.as_shape()
            end = _INF if running.ends_at is None else running.ends_at
            out.extend((end, node_index[name], shape) for name in running.placements if name in node_index)
        for end, placed, shape in self.admitted_ends:
            out.extend((end, node, shape) for node in placed)
        out.sort(key=lambda release: (release[0], release[1]))
        return out

    def reserve(self, job: QueuedJob) -> Reservation:
        """Make ``job`` the head: replay releases to its earliest start and hold its placement then."""
        need, learners = _shape(job), job.learners
        eligible = self.eligible(self.key(job))
        start, free = self._free_at_start(need, learners, eligible)
        placed: list[int] = []
        for _ in range(learners):
            fits = [node for node, ok in enumerate(eligible) if ok and slots_in(free[node], need, 1)]
            best = min(fits, key=lambda node: (free[node][0], free[node][1], node))
            free[best] = (free[best][0] - need[0], free[best][1] - need[1], free[best][2] - need[2])
            placed.append(best)
        self.surplus = {node: list(free[node]) for node in set(placed)}
        self.long_pool = self.now_pool.copy()
        for node, surplus in self.surplus.items():
            self.long_pool.set_free(node, self.now_pool.free[node], surplus)
        self.held[job.tenant] = (need[0] * learners, need[1] * learners, need[2] * learners)
        return Reservation(job.id, start, [self.nodes[node].name for node in placed])

    def _free_at_start(
        self, need: Shape, learners: int, eligible: list[bool]
    ) -> tuple[float | None, list[Shape]]:
        """Replay the releases, one instant at a time, until the gang fits the eligible nodes: its start
        (None when only jobs of unknown end make room) and what is free then; the empty cluster when they
        never do."""
        free = list(self.now_pool.free)
        slots = [slots_in(room, need, learners) if ok else 0 for room, ok in zip(free, eligible, strict=True)]
        fitting = sum(slots)
        events = self.releases()
        position = 0
        while position < len(events):
            end = events[position][0]
            while position < len(events) and events[position][0] == end:
                _, node, shape = events[position]
                room = free[node]
                free[node] = (room[0] + shape[0], room[1] + shape[1], room[2] + shape[2])
                if eligible[node]:
                    fitting -= slots[node]
                    slots[node] = slots_in(free[node], need, learners)
                    fitting += slots[node]
                position += 1
            if fitting >= learners:
                return (None if end == _INF else end), free
        return None, list(self.caps)

    def offer(self, job: QueuedJob) -> bool:
        """Consider one job under the trainyard policy; False if its tenant is now quota-blocked."""
        if _invalid(job):
            self.pending.append((job.id, _INVALID))
            return True
        quota = self.quota_reason(job)
        if quota is not None:
            self.pending.append((job.id, quota[0]))
            return quota[1]
        reservation = self.reservation
        ends_before_head = (
            reservation is not None
            and reservation.start_at is not None
            and job.expected_duration is not None
            and self.snap.now + job.expected_duration <= reservation.start_at
        )
        if self.try_place(job, "now" if reservation is None or ends_before_head else "long") is not None:
            return True
        gang = (self.key(job), _shape(job), job.learners)
        reason = self.reasons.get(gang)
        if reason is None:
            if self.can_never_fit(job):
                reason = self.never_fit_reason(job)
            elif reservation is None:
                reason = capacity_reason(self, job)
                reservation = self.reservation = self.reserve(job)
                when = (
                    "start time unknown"
                    if reservation.start_at is None
                    else f"from {utc_text(reservation.start_at)}"
                )
                self.pending.append((job.id, f"{reason}; resources reserved for it ({when})"))
                return True
            elif self.now_pool.slots(gang[0], _shape(job), job.learners) >= job.learners:
                # The reserved job may be another tenant's: its id is not this tenant's to see.
                reason = "waiting: the free resources are reserved for a job ahead of it in the queue"
            else:
                reason = capacity_reason(self, job)
            self.reasons[gang] = reason
        self.pending.append((job.id, reason))
        return True


def _run_trainyard(cycle: _Cycle, jobs: Sequence[QueuedJob], nominal_first: bool) -> None:
    """Offer jobs tenant by tenant, lowest weighted dominant share first, each tenant's queue in order; a
    tenant stopped by its own quota drops out of the turn with its later jobs waiting behind it. With
    ``nominal_first``, a tenant whose next job stays within its nominal quota goes before those whose next
    job would borrow."""
    queues: dict[str, list[QueuedJob]] = {}
    for job in jobs:
        queues.setdefault(job.tenant, []).append(job)
    for name in sorted(queues):
        # Last in turn first (popped from the end): priority low to high, and within a priority the latest
        # submitted (then highest id) first. Stable passes on one field each: several times cheaper than a
        # key tuple per job, since a sort on floats or strings alone compares them natively.
        for field_name, reverse in (("id", True), ("submitted_at", True), ("priority", False)):
            queues[name].sort(key=attrgetter(field_name), reverse=reverse)
        if name not in cycle.tenants:
            cycle.pending.extend((job.id, f"unknown tenant {name}") for job in reversed(queues.pop(name)))

    def borrows(name: str) -> bool:
        return nominal_first and cycle.borrows(queues[name][-1])

    heap = [(borrows(name), cycle.share(name), name) for name in queues]
    heapq.heapify(heap)
    deferred: list[tuple[str, str]] = []
    while heap:
        _, share, name = heapq.heappop(heap)
        queue = queues[name]
        job = queue.pop()
        admitted_before = len(cycle.admitted)
        if not cycle.offer(job):
            deferred.append(cycle.pending.pop())
            waiting = f"waiting behind job {job.id} of the same tenant (tenant quota)"
            deferred.extend([(behind.id, waiting) for behind in reversed(queue)])
            continue
        if queue:
            changed = len(cycle.admitted) > admitted_before
            heapq.heappush(heap, (borrows(name), cycle.share(name) if changed else share, name))
    cycle.pending.extend(deferred)


def _run_fifo(cycle: _Cycle, jobs: Sequence[QueuedJob]) -> None:
    """FfDL's order: one queue by submission; the first job that waits for capacity or quota stops it."""
    ordered = sorted(jobs, key=attrgetter("id"))
    ordered.sort(key=attrgetter("submitted_at"))  # stable: by submission, then id
    for position, job in enumerate(ordered):
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
        reason = quota[0] if quota is not None else capacity_reason(cycle, job)
        cycle.pending.append((job.id, f"{reason} (head of the FIFO queue)"))
        cycle.pending.extend(
            (behind.id, "waiting behind the head of the FIFO queue (head-of-line)")
            for behind in ordered[position + 1 :]
        )
        return


def admit(snapshot: Snapshot, *, policy: Policy = "trainyard", nominal_first: bool = False) -> Decision:
    """Decide which queued jobs start now and why every other job waits (see the module docstring).

    ``nominal_first`` (with preemption on): under ``trainyard``, jobs that stay within their tenant's
    nominal quota are offered before jobs that would borrow."""
    cycle = _Cycle(snapshot)
    if policy == "fifo":
        _run_fifo(cycle, snapshot.jobs)
    elif policy == "trainyard":
        _run_trainyard(cycle, snapshot.jobs, nominal_first)
    else:
        raise ValueError(f"unknown policy {policy!r}")
    return Decision(admitted=cycle.admitted, pending=_numbered(cycle.pending), reservation=cycle.reservation)


def _numbered(pending: list[tuple[str, str]]) -> list[Pending]:
    """``Pending`` entries, positions from 1, built without the frozen dataclass's ``__init__``: a cycle
    leaves thousands of jobs waiting, and that ``__init__`` (three ``object.__setattr__`` calls in Python)
    would take a good part of the cycle. Fills the same slots, so the objects are equal in every way."""
    new = object.__new__
    set_id, set_position, set_reason = (
        vars(Pending)[name].__set__ for name in ("job_id", "position", "reason")
    )
    out: list[Pending] = []
    for position, (job_id, reason) in enumerate(pending, start=1):
        entry = new(Pending)
        set_id(entry, job_id)
        set_position(entry, position)
        set_reason(entry, reason)
        out.append(entry)
    return out

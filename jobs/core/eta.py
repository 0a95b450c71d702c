"""An estimated start time (ETA) for every queued job, from one admission cycle's snapshot and decision.

Why: a queue position says nothing about when; users plan around a time. The estimate replays expected
ends: running jobs (and the jobs this cycle admitted) release their nodes and their tenant's quota at
their expected end; the queued jobs then start, in the order the cycle considered them, each at the
first release after which its gang fits (best-fit, as admission places it) and its tenant's quota has
room, holding its resources until its own expected end. The quota rule is admission's own
(:class:`jobs.core.borrowing.Cohorts`): a tenant may borrow above its nominal quota what its cohort leaves
unused at that moment of the replay, up to its borrowing limit; a job beyond its ceiling never starts.
Backfill as admission does it: a job may start at an earlier instant of the replay than the job ahead
of it (never at ``now``, which the cycle just decided) when its gang and quota fit there until it is
known to end (its declared ``expected_duration``, else for good), beside everything placed after it;
a tenant's queue stays strict behind a job that waited for its quota. The replay runs three times, with
every duration at its expected value, its low and its high end, for the estimate and its range (once when
every duration is exact, e.g. all from ``max_runtime``: the three would be the same).

Deliberate simplifications, so that it stays cheap (it runs every scheduling cycle): jobs are placed
one by one in the order the cycle considered them (fair share is not recomputed as the replay goes;
a placed job is never moved; the search for backfill stops after ``BACKFILL_BUDGET`` node states, after
which jobs start in order and their estimates err late), and only the first ``per_tenant`` queued jobs
of each tenant (and ``limit`` in all) are estimated; the rest are "far back in the queue". A job waits
"unknown" when it can never fit, or when it fits only after jobs whose duration nobody knows (no
``max_runtime``, no finished runs to learn from). Pure: no Django, no clock; times are seconds since the epoch.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import NamedTuple

from jobs.core.admission import Decision, QueuedJob, RunningJob, Snapshot
from jobs.core.borrowing import Cohorts
from jobs.core.claims import claim_wait
from jobs.core.durations import Duration
from jobs.core.nodepool import ANY, Key, NodePool, Shape, slots_in

PER_TENANT = 20
LIMIT = 200
BACKFILL_BUDGET = 60_000
"""Node states one replay may look at in search of backfill; past it, jobs start in order (err late)."""
_INF = float("inf")
_NO_TAINTS: frozenset[str] = frozenset()
FAR_BACK = "unknown: far back in the queue"
NEVER_FITS = "unknown: never fits (see the reason it waits)"
NO_TENANT = "unknown: not schedulable (see the reason it waits)"
NO_CLAIM_STORAGE = (
    "unknown: waits for claim storage, which deleting the tenant's finished or halted jobs frees"
)
Use = tuple[int, int, int, int]
"""A tenant's use at a moment of the replay: GPUs, CPU, memory and running jobs. Replaced, never changed
in place, so that a snapshot of every tenant's use (the replay's history) is a shallow copy."""


@dataclass(frozen=True, slots=True)
class RunningFacts:
    """What the ETA needs of a running job beyond admission's ``RunningJob``: its tenant (whose quota
    its end frees), when it started and how long it is expected to run (None: unknown)."""

    tenant: str
    started_at: float
    duration: Duration | None


@dataclass(frozen=True, slots=True)
class Eta:
    """A queued job's estimated start with its range (None when unknown) and, when unknown, why."""

    job_id: str
    start: float | None
    low: float | None
    high: float | None
    reason: str


class _Release(NamedTuple):
    """Resources coming free at ``end``: one learner's ``shape`` on each node of ``nodes``, and the
    tenant's share of quota (``tenant`` empty when not known)."""

    end: float
    nodes: tuple[int, ...]
    shape: Shape
    tenant: str
    job_id: str


def _span(duration: Duration | None, variant: int) -> float | None:
    if duration is None:
        return None
    return (duration.expected, duration.low, duration.high)[variant]


class _Cluster:
    """What the replays of one estimate share, built once (none of it depends on the durations): the
    nodes in name order with their types and taints, the empty cluster's capacity, the tenants and their
    cohorts. It caches, by job key, the nodes a job may use (``eligible``) and, by job id, whether a job
    can never start (``never_fits``): both depend on the snapshot alone."""

    def __init__(self, snap: Snapshot, decision: Decision | None = None) -> None:
        nodes = sorted(snap.nodes, key=attrgetter("name"))
        self.index = {node.name: k for k, node in enumerate(nodes)}
        self.types = [node.gpu_type for node in nodes]
        self.taints = [frozenset(node.taints) if node.taints else _NO_TAINTS for node in nodes]
        self.all_taints: frozenset[str] = frozenset().union(*self.taints)
        self.free = [node.free.as_shape() for node in nodes]
        self.capacity = NodePool([node.capacity.as_shape() for node in nodes], self.types, self.taints)
        self.tenants = {t.name: t for t in snap.tenants}
        self.cohorts = Cohorts(snap.tenants)
        self.ceilings = {t.name: self.cohorts.ceiling(t) for t in snap.tenants}
        self._eligible: dict[Key, list[int]] = {}
        self._never_fits: dict[str, bool] = {}
        # Claims only go when a person deletes a job: what the tenants hold once this cycle's admissions launch.
        self.claims = {t.name: [t.claims, t.storage_gib] for t in snap.tenants}
        queued = {job.id: job for job in snap.jobs}
        for admitted in decision.admitted if decision is not None else ():
            job = queued.get(admitted.job_id)
            if job is not None and job.tenant in self.claims:
                self.claims[job.tenant][0] += job.claims
                self.claims[job.tenant][1] += job.storage_gib

    def waits_for_storage(self, job: QueuedJob) -> bool:
        """Whether ``job``'s claims do not fit its tenant's claim quota: no release of the replay frees any."""
        if not job.claims and not job.storage_gib:
            return False
        tenant = self.tenants[job.tenant]
        caps = (tenant.max_claims, tenant.storage_quota_gib)
        return claim_wait((job.claims, job.storage_gib), held=self.claims[job.tenant], caps=caps) is not None

    def key(self, job: QueuedJob) -> Key:
        return (job.gpu_type or ANY, job.tolerated & self.all_taints if self.all_taints else _NO_TAINTS)

    def eligible(self, key: Key) -> list[int]:
        """The nodes a job of ``key`` may use (its GPU type, only taints it tolerates), in index order."""
        nodes = self._eligible.get(key)
        if nodes is None:
            gpu_type, tolerated = key
            nodes = [
                k
                for k, (node_type, taints) in enumerate(zip(self.types, self.taints, strict=True))
                if (gpu_type == ANY or node_type == gpu_type) and taints <= tolerated
            ]
            self._eligible[key] = nodes
        return nodes

    def never_fits(self, job: QueuedJob) -> bool:
        """Whether ``job`` exceeds its tenant's ceiling (nominal plus what it may ever borrow) or the
        empty cluster: then it never starts."""
        found = self._never_fits.get(job.id)
        if found is None:
            tenant = self.tenants[job.tenant]
            over_quota = tenant.max_running_jobs < 1 or any(
                n > top for n, top in zip(_total(job), self.ceilings[job.tenant], strict=True)
            )
            slots = self.capacity.slots(self.key(job), _shape(job), job.learners)
            found = self._never_fits[job.id] = over_quota or slots < job.learners
        return found


class _Replay:
    """One replay of the queue under one variant of the durations (0 expected, 1 low, 2 high)."""

    def __init__(
        self, snap: Snapshot, decision: Decision, facts: _Facts, cluster: _Cluster, variant: int
    ) -> None:
        self.now, self.facts, self.variant, self.cluster = snap.now, facts, variant, cluster
        self.index, self.types, self.taints = cluster.index, cluster.types, cluster.taints
        self.tenants, self.cohorts = cluster.tenants, cluster.cohorts
        self.used: dict[str, Use] = {t.name: (*t.used.as_shape(), t.running_jobs) for t in snap.tenants}
        self.heap: list[tuple[float, int, _Release]] = []
        self.order = itertools.count()
        self.unknown_ends: list[_Release] = []
        for running in snap.running:
            self._add(self._running_release(running))
        free = list(cluster.free)
        for admitted in decision.admitted:
            job = facts.queued[admitted.job_id]
            nodes = tuple(self.index[name] for name in admitted.placements)
            _shift(free, nodes, _shape(job), -1)
            self._charge(job, +1)
            self._add(self._release(job, self.now, nodes))
        self.pool = NodePool(free, self.types, self.taints)
        # What is free once every release of known time has happened: whether a job can start at all.
        final = list(free)
        self.final_used = dict(self.used)
        for _, _, release in self.heap:
            _shift(final, release.nodes, release.shape, +1)
            _give_back(release, self.final_used)
        self.final = NodePool(final, self.types, self.taints)
        self.clock = self.now
        # The replay's past: (instant, free per node, use per tenant) for each instant the clock moved on
        # from after ``now``, kept up to date as backfilled jobs take resources in it; ``times``: its instants.
        self.history: list[tuple[float, list[Shape], dict[str, Use]]] = []
        self.times: list[float] = []
        # Per tenant, the start of its latest job that waited for its quota: its queue is strict, so no
        # later job of the tenant backfills before it (as admission holds a quota-blocked tenant's queue).
        self.blocked_until: dict[str, float] = {}
        self.budget = BACKFILL_BUDGET

    def _running_release(self, running: RunningJob) -> _Release:
        """A running job's end: started + its learned or declared duration (not before now), else its
        ``ends_at``; it frees its nodes (those still open) and its tenant's quota."""
        facts = self.facts.running.get(running.job_id)
        span = _span(facts.duration, self.variant) if facts is not None else None
        end = running.ends_at
        if facts is not None and span is not None:
            end = max(self.now, facts.started_at + span)
        nodes = tuple(self.index[name] for name in running.placements if name in self.index)
        tenant = facts.tenant if facts is not None else ""
        return _Release(
            _INF if end is None else end, nodes, running.per_learner.as_shape(), tenant, running.job_id
        )

    def _release(self, job: QueuedJob, start: float, nodes: tuple[int, ...]) -> _Release:
        span = self.facts.span(job, self.variant)
        end = _INF if span is None else start + span
        return _Release(end, nodes, _shape(job), job.tenant, job.id)

    def _add(self, release: _Release) -> None:
        if release.end == _INF:
            self.unknown_ends.append(release)
        else:
            heapq.heappush(self.heap, (release.end, next(self.order), release))

    def _charge(self, job: QueuedJob, sign: int) -> None:
        used = self.used.get(job.tenant)
        if used is not None:
            gpus, cpu, memory = _total(job)
            self.used[job.tenant] = _plus(used, (sign * gpus, sign * cpu, sign * memory), sign)

    @staticmethod
    def _free(release: _Release, pool: NodePool, used: dict[str, Use]) -> None:
        for node in release.nodes:
            pool.shift(node, release.shape, +1)
        _give_back(release, used)

    def quota_room(self, job: QueuedJob, used: Mapping[str, Use]) -> bool:
        """Whether the tenant's quota lets ``job`` start on top of ``used``: its running-job limit and
        admission's rule for nominal quota and borrowing (jobs.core.borrowing)."""
        tenant = self.tenants[job.tenant]
        held = used[job.tenant]
        if held[3] >= tenant.max_running_jobs:
            return False
        need, nominal, ceiling = _total(job), tenant.nominal, self.cluster.ceilings[job.tenant]
        within = zip(need, held, nominal, ceiling, strict=False)  # held[3], the running jobs, left out
        if all(n <= top and h + n <= allowed for n, h, allowed, top in within):
            return True  # within nominal quota: what Cohorts.check finds too, without the cohort's use
        return self.cohorts.check(tenant, need, used, {}) is None

    def place(self, job: QueuedJob) -> float | str:
        """Start ``job`` at the first release after which it fits: its start, or why it has none."""
        if job.tenant not in self.tenants or job.learners < 1:
            return NO_TENANT
        if self.cluster.never_fits(job):
            return NEVER_FITS
        if self.cluster.waits_for_storage(job):
            return NO_CLAIM_STORAGE
        key, need = self.cluster.key(job), _shape(job)
        if (
            not self.quota_room(job, self.final_used)
            or self.final.slots(key, need, job.learners) < job.learners
        ):
            return self._unknown_reason(job)
        early = self._backfill(job, key, need)
        if early is not None:
            return early
        quota_ok = self.quota_room(job, self.used)
        waited_for_quota = not quota_ok
        placed = self.pool.place_gang(key, need, job.learners) if quota_ok else None
        while placed is None:
            if not self.heap:
                return self._unknown_reason(job)
            end = self.heap[0][0]
            if end > self.clock:
                self.history.append((self.clock, list(self.pool.free), dict(self.used)))
                self.times.append(self.clock)
            while self.heap and self.heap[0][0] == end:
                self._free(heapq.heappop(self.heap)[2], self.pool, self.used)
            self.clock = max(self.clock, end)
            quota_ok = self.quota_room(job, self.used)
            waited_for_quota = waited_for_quota or not quota_ok
            if quota_ok:
                placed = self.pool.place_gang(key, need, job.learners)
        if waited_for_quota:
            self.blocked_until[job.tenant] = self.clock
        self._charge(job, +1)
        release = self._release(job, self.clock, tuple(placed))
        self._add(release)
        if release.end == _INF:
            for node in placed:
                self.final.shift(node, need, -1)
            self.final_used[job.tenant] = _plus(self.final_used[job.tenant], _total(job), 1)
        return self.clock

    def _backfill(self, job: QueuedJob, key: Key, need: Shape) -> float | None:
        """Start ``job`` at an earlier instant of the replay's past, as admission's backfill would: the
        first after ``now`` at which its gang fits and its quota has room until it is known to end (its
        declared ``expected_duration``; without one, it must fit beside every job placed after it, as in
        admission's surplus rule). Takes the resources and returns that instant, or None."""
        span = self.facts.span(job, self.variant)
        # Once the budget is spent the search would stop at its first candidate instant: skip it.
        if span is None or not self.history or self.budget < 0:
            return None
        horizon = _INF if job.expected_duration is None else job.expected_duration
        floor = self.blocked_until.get(job.tenant, self.now)
        eligible = self.cluster.eligible(key)
        times = self.times
        for first, (at, free_at, used_at) in enumerate(self.history):
            if at <= self.now or at < floor or not self.quota_room(job, used_at):
                continue
            self.budget -= len(eligible)
            if self.budget < 0:
                return None
            if not self._room_at(free_at, eligible, need, job.learners):
                continue
            past = self.history[first : bisect.bisect_left(times, at + horizon)]
            self.budget -= (len(past) + 1) * len(free_at)
            if self.budget < 0:
                return None
            states = [(free, used) for _, free, used in past]
            if at + horizon > self.clock:
                states.append((self.pool.free, self.used))
            placed = self._fit_through(job, key, need, states, eligible)
            if placed is not None:
                self._take(job, at + span, placed, past)
                return at
        return None

    @staticmethod
    def _room_at(free: list[Shape], eligible: list[int], need: Shape, learners: int) -> bool:
        """Whether ``learners`` of ``need`` fit in ``free`` on the ``eligible`` nodes (counting stops once
        they do)."""
        room = 0
        for node in eligible:
            room += slots_in(free[node], need, learners)
            if room >= learners:
                return True
        return False

    def _fit_through(
        self,
        job: QueuedJob,
        key: Key,
        need: Shape,
        states: list[tuple[list[Shape], dict[str, Use]]],
        eligible: list[int],
    ) -> list[int] | None:
        """Best-fit placement of ``job`` in what stays free through every state of ``states``, or None.

        Only nodes that can hold a learner matter to the placement: those ``key`` may use (``eligible``)
        where one fits in the first state (what stays free through all states is no more than that).
        Those are reduced to their least free through the states; the others keep the first state's,
        where no learner fits or which the placement does not look at."""
        if not all(self.quota_room(job, used) for _, used in states):
            return None
        frees = [free for free, _ in states]
        lowest = list(frees[0])
        gpus, cpu, memory = need
        fits = [k for k in eligible if (f := lowest[k])[0] >= gpus and f[1] >= cpu and f[2] >= memory]
        if len(frees) > 1 and fits:  # per resource, the least free through all states (in C)
            columns = [list(zip(*map(free.__getitem__, fits), strict=True)) for free in frees]
            least = (map(min, *(column[dim] for column in columns)) for dim in range(3))
            for node, shape in zip(fits, zip(*least, strict=True), strict=True):
                lowest[node] = shape
        return NodePool(lowest, self.types, self.taints).place_gang(key, need, job.learners)

    def _take(
        self,
        job: QueuedJob,
        end: float,
        placed: list[int],
        past: list[tuple[float, list[Shape], dict[str, Use]]],
    ) -> None:
        """Hold a backfilled job's resources in the past instants it runs through (and from the clock on
        when it runs past it, with its release queued at its end)."""
        need = _shape(job)
        for at, free, used in past:
            if at >= end:
                break
            for node in placed:
                free[node] = (free[node][0] - need[0], free[node][1] - need[1], free[node][2] - need[2])
            used[job.tenant] = _plus(used[job.tenant], _total(job), 1)
        if end > self.clock:
            for node in placed:
                self.pool.shift(node, need, -1)
            self._charge(job, +1)
            self._add(_Release(end, tuple(placed), need, job.tenant, job.id))

    def _unknown_reason(self, job: QueuedJob) -> str:
        """Why ``job`` fits only after jobs of unknown end; names one only when it is the job's tenant's."""
        own = next((r.job_id for r in self.unknown_ends if r.tenant == job.tenant), None)
        if own is not None:
            return f"unknown: waits on job {own}, whose duration is not known"
        return "unknown: waits on other jobs whose duration is not known"


@dataclass(frozen=True, slots=True)
class _Facts:
    queued: Mapping[str, QueuedJob]
    durations: Mapping[str, Duration | None]
    running: Mapping[str, RunningFacts]

    def ranged(self) -> bool:
        """Whether any duration the replays use has a range (else the three replays are one)."""
        known = [*self.durations.values(), *(f.duration for f in self.running.values())]
        return any(d is not None and not d.low == d.expected == d.high for d in known)

    def span(self, job: QueuedJob, variant: int) -> float | None:
        """How long ``job`` runs in the replay of ``variant``: its duration's, else (exact, whatever the
        variant) its ``expected_duration``; None: not known."""
        if job.id in self.durations:
            return _span(self.durations[job.id], variant)
        return job.expected_duration


def _shift(free: list[Shape], nodes: tuple[int, ...], shape: Shape, sign: int) -> None:
    """Take (``sign`` -1) or give back (+1) one ``shape`` on each of ``nodes`` of ``free``: NodePool.shift
    for a free list before its pool is built (no index to keep up to date)."""
    for node in nodes:
        f = free[node]
        free[node] = (f[0] + sign * shape[0], f[1] + sign * shape[1], f[2] + sign * shape[2])


def _give_back(release: _Release, used: dict[str, Use]) -> None:
    """Return a release's quota to its tenant (when known) in ``used``."""
    held = used.get(release.tenant)
    if held is not None:
        gpus, cpu, memory = release.shape
        n = len(release.nodes)
        used[release.tenant] = _plus(held, (-gpus * n, -cpu * n, -memory * n), -1)


def _plus(use: Use, amounts: Shape, jobs: int) -> Use:
    return (use[0] + amounts[0], use[1] + amounts[1], use[2] + amounts[2], use[3] + jobs)


def _far_back(job_ids: list[str]) -> dict[str, Eta]:
    """A "far back in the queue" ``Eta`` for each of ``job_ids`` (most of a deep queue: 10,000 jobs).
    Each field is written through its slot's descriptor: ``Eta(...)``, frozen, writes them through
    ``object.__setattr__``, which takes twice as long; the objects are the same."""
    set_id, set_start, set_low, set_high, set_reason = (vars(Eta)[f.name].__set__ for f in fields(Eta))
    new = object.__new__
    out: dict[str, Eta] = {}
    for job_id in job_ids:
        eta = out[job_id] = new(Eta)
        set_id(eta, job_id)
        set_start(eta, None)
        set_low(eta, None)
        set_high(eta, None)
        set_reason(eta, FAR_BACK)
    return out


def _shape(job: QueuedJob) -> Shape:
    return (job.gpus, job.cpu_millis, job.memory_mib)


def _total(job: QueuedJob) -> Shape:
    return (job.gpus * job.learners, job.cpu_millis * job.learners, job.memory_mib * job.learners)


def estimated_ids(
    snapshot: Snapshot, decision: Decision, *, per_tenant: int = PER_TENANT, limit: int = LIMIT
) -> list[str]:
    """The pending jobs the replay estimates, in the cycle's order (the first ``per_tenant`` of each
    tenant, ``limit`` in all): the caller needs durations for these (and the admitted ones) only."""
    return _chosen(decision, per_tenant, limit, {job.id: job for job in snapshot.jobs})


def _chosen(decision: Decision, per_tenant: int, limit: int, queued: Mapping[str, QueuedJob]) -> list[str]:
    counts: dict[str, int] = {}
    chosen: list[str] = []
    for pending in decision.pending:
        if len(chosen) >= limit:
            break
        job = queued.get(pending.job_id)
        if job is None:
            continue
        counts[job.tenant] = counts.get(job.tenant, 0) + 1
        if counts[job.tenant] <= per_tenant:
            chosen.append(job.id)
    return chosen


def estimate(
    snapshot: Snapshot,
    decision: Decision,
    *,
    durations: Mapping[str, Duration | None],
    running: Mapping[str, RunningFacts],
    per_tenant: int = PER_TENANT,
    limit: int = LIMIT,
) -> dict[str, Eta]:
    """An ETA for every job ``decision`` left pending (see the module docstring).

    ``durations``: queued jobs' expected run times by id (a job missing falls back on its
    ``expected_duration``); ``running``: running jobs' facts by id (one missing ends at its ``ends_at``).
    """
    queued = {job.id: job for job in snapshot.jobs}
    facts = _Facts(queued, durations, running)
    chosen = _chosen(decision, per_tenant, limit, queued)
    results: list[dict[str, float | str]] = []
    cluster = _Cluster(snapshot, decision)
    for variant in range(3) if facts.ranged() else range(1):
        replay = _Replay(snapshot, decision, facts, cluster, variant)
        results.append({job_id: replay.place(queued[job_id]) for job_id in chosen})
    while len(results) < 3:  # every duration is exact (max_runtime): the low and high replays are the same
        results.append(results[0])
    out = _far_back([p.job_id for p in decision.pending])
    for job_id in chosen:
        middle, low, high = (result[job_id] for result in results)
        if isinstance(middle, str):
            out[job_id] = Eta(job_id, None, None, None, middle)
            continue
        bounds = [t for t in (low, high) if not isinstance(t, str)]
        out[job_id] = Eta(job_id, middle, min([middle, *bounds]), max([middle, *bounds]), "")
    return out

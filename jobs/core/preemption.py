"""Preemption: which running jobs to stop so that a waiting job may start, losing the least work.

Pure and Django-free, like :mod:`jobs.core.admission`, whose snapshot and decision it reads: the scheduler
cycle (``jobs.preemption``) and the simulator plan with the same code. Two kinds:

* **reclaim**: a tenant whose next job would keep it within its nominal quota (all resources, and its
  running-job limit) but does not fit the free nodes takes back what its cohort lent: the victims are
  *borrowed* capacity, running jobs of other tenants of its cohort that are above their own nominal quota.
  A victim's tenant stops being a candidate once taking its jobs would bring it back to its nominal quota.
* **priority**: where a tenant's policy allows it (``priority_tenants``), its next job may stop the
  tenant's own jobs of lower priority, when they are what keeps it out (capacity or the tenant's quota).

Only the first job of each tenant's queue that waits (in the admission's order) may preempt: a tenant's
queue is strict. A job that can never start (over what its tenant may ever hold, or too big for the nodes
it may use) blocks nothing in admission, so it is passed over here too and the next job may preempt.
Jobs inside their protection (``Victim.protected``) are never victims: the minimum runtime after their
latest admission, doubled for each time the job was preempted before (:func:`protection_seconds`), an
anti-thrash back-off. Without it checkpoint-aware keeps picking the same jobs: a long-running borrowed job
that checkpoints often is always cheap to stop, and as the oldest job of its tenant it is the first to be
admitted again (as borrowed) when room frees, to be stopped again by the next reclaim (in the bench's
replay one job was preempted 8 times, each time losing a little, together more than Kueue's order lost).
Jobs already stopping
(``releasing``: cancelling, halting, being preempted) count as gone, so a cycle does not stop more jobs
while earlier victims are still saving their work.

The victims are chosen in ``order``, adding one at a time until the waiting job's gang fits the free
nodes plus what they release, then dropping any that turned out not to be needed (latest-added first).
Either order tries first the jobs whose admission borrowed (``Victim.borrowed``), then:

* ``checkpoint-aware`` (Trainyard's): least work lost first, i.e. the fewest GPU-seconds since the
  candidate's last checkpoint (learner-seconds for CPU-only jobs), then the latest admitted;
* ``youngest`` (Kueue's default): lowest priority first, then the most recently admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from common.resources import Resources, Shape
from jobs.core.admission import Decision, Node, QueuedJob, Snapshot, TenantState
from jobs.core.borrowing import Cohorts, over_nominal
from jobs.core.claims import claim_wait
from jobs.core.nodepool import slots_in

Order = Literal["checkpoint-aware", "youngest"]
ORDERS: tuple[Order, ...] = ("checkpoint-aware", "youngest")
Kind = Literal["reclaim", "priority"]


@dataclass(frozen=True, slots=True)
class Victim:
    """A running (or starting) job that could be stopped.

    ``since_checkpoint``: seconds it has computed since its last checkpoint (since it started when it has
    none): what stopping it now would throw away. ``protected``: still inside its protection
    (:func:`protection_seconds` since its latest admission). ``borrowed``: its admission put its tenant
    above its nominal quota.
    """

    job_id: str
    tenant: str
    priority: int
    admitted_at: float
    placements: tuple[str, ...]
    per_learner: Resources
    since_checkpoint: float
    protected: bool = False
    borrowed: bool = False

    @property
    def total(self) -> Shape:
        n = len(self.placements)
        return (self.per_learner.gpus * n, self.per_learner.cpu_millis * n, self.per_learner.memory_mib * n)

    @property
    def lost_gpu_seconds(self) -> float:
        return self.per_learner.gpus * len(self.placements) * self.since_checkpoint


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victim`` so that ``preemptor`` can start; ``lost_gpu_seconds``: the work it throws away."""

    victim: str
    victim_tenant: str
    preemptor: str
    preemptor_tenant: str
    kind: Kind
    lost_gpu_seconds: float


SortKey = Callable[["Victim"], Any]


def protection_seconds(min_runtime: float, preemptions: int) -> float:
    """How long after its latest admission a job may not be preempted: the minimum runtime, doubled for
    each earlier preemption of the job (300 s, then 600 s, 1200 s, ...)."""
    return min_runtime * 2.0 ** max(0, preemptions)


def sort_key(order: Order) -> SortKey:
    """The order victims are tried in (see the module docstring)."""
    if order == "checkpoint-aware":
        return lambda v: (
            not v.borrowed,
            v.lost_gpu_seconds,
            len(v.placements) * v.since_checkpoint,
            -v.admitted_at,
            v.job_id,
        )
    if order == "youngest":
        return lambda v: (not v.borrowed, v.priority, -v.admitted_at, v.job_id)
    raise ValueError(f"unknown preemption order {order!r}")


def _add(a: Sequence[int], b: Sequence[int], sign: int = 1) -> list[int]:
    return [x + sign * y for x, y in zip(a, b, strict=True)]


def _within(used: Sequence[int], limit: Sequence[int]) -> bool:
    return all(x <= y for x, y in zip(used, limit, strict=True))


class _Plan:
    """Free resources per node and usage per tenant as they will be once this cycle's admissions start and
    the jobs already stopping are gone; updated as victims are chosen."""

    def __init__(
        self,
        snapshot: Snapshot,
        decision: Decision,
        victims: Sequence[Victim],
        releasing: Sequence[Victim],
    ) -> None:
        self.nodes: list[Node] = sorted(snapshot.nodes, key=lambda n: n.name)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.free: list[list[int]] = [list(node.free.as_shape()) for node in self.nodes]
        self.capacity = [node.capacity.as_shape() for node in self.nodes]
        self.tenants: dict[str, TenantState] = {t.name: t for t in snapshot.tenants}
        self.cohorts = Cohorts(snapshot.tenants)
        self.used = {t.name: list(t.used.as_shape()) for t in snapshot.tenants}
        self.running = {t.name: t.running_jobs for t in snapshot.tenants}
        self.claims = {t.name: [t.claims, t.storage_gib] for t in snapshot.tenants}
        self.jobs = {job.id: job for job in snapshot.jobs}
        # Caches for the plan, all of what stays the same while victims are chosen: the nodes' taints, the
        # nodes a kind of job may use (per gpu type and tolerations), whether a gang fits the empty nodes.
        self.taints = [frozenset(node.taints) for node in self.nodes]
        self.eligible_for: dict[tuple[str | None, frozenset[str]], list[bool]] = {}
        self.fits_empty: dict[tuple[tuple[str | None, frozenset[str]], Shape, int], bool] = {}
        jobs = self.jobs
        for admitted in decision.admitted:
            job = jobs[admitted.job_id]
            self._take(job.tenant, admitted.placements, job.per_learner.as_shape())
            if job.tenant in self.claims:
                self.claims[job.tenant][0] += job.claims
                self.claims[job.tenant][1] += job.storage_gib
        for gone in releasing:
            self._give(gone)
        self.victims = [v for v in victims if not v.protected]
        self.taken: set[str] = set()

    def _take(self, tenant: str, placements: Iterable[str], shape: Shape) -> None:
        count = 0
        for name in placements:
            count += 1
            if name in self.index:
                node = self.index[name]
                self.free[node] = _add(self.free[node], shape, -1)
        if tenant in self.used:
            self.used[tenant] = _add(self.used[tenant], [amount * count for amount in shape])
            self.running[tenant] += 1

    def _give(self, victim: Victim) -> None:
        shape = victim.per_learner.as_shape()
        for name in victim.placements:
            if name in self.index:
                node = self.index[name]
                self.free[node] = _add(self.free[node], shape)
        if victim.tenant in self.used:
            self.used[victim.tenant] = _add(self.used[victim.tenant], victim.total, -1)
            self.running[victim.tenant] -= 1

    def eligible(self, job: QueuedJob) -> list[bool]:
        """Per node, whether ``job`` may use it (cached per gpu type and tolerations; not to be changed)."""
        key = (job.gpu_type, job.tolerated)
        eligible = self.eligible_for.get(key)
        if eligible is None:
            eligible = self.eligible_for[key] = [
                (job.gpu_type is None or node.gpu_type == job.gpu_type) and taints <= job.tolerated
                for node, taints in zip(self.nodes, self.taints, strict=True)
            ]
        return eligible

    def slots(self, job: QueuedJob, free: Sequence[Sequence[int]], eligible: Sequence[bool]) -> int:
        """How many of ``job``'s learners fit ``free`` on the nodes it may use (counting stops at all)."""
        need, want, total = job.per_learner.as_shape(), job.learners, 0
        gpus, cpu, memory = need
        for room, ok in zip(free, eligible, strict=True):
            if ok and room[0] >= gpus and room[1] >= cpu and room[2] >= memory:
                total += slots_in(_shape(room), need, want - total)
                if total >= want:
                    break
        return total

    def freed(self, chosen: Sequence[Victim]) -> list[list[int]]:
        """The free resources per node with ``chosen`` gone (entries are replaced, never changed in place)."""
        free = list(self.free)
        for victim in chosen:
            shape = victim.per_learner.as_shape()
            for name in victim.placements:
                if name in self.index:
                    node = self.index[name]
                    free[node] = _add(free[node], shape)
        return free

    def start(self, job: QueuedJob, eligible: Sequence[bool]) -> None:
        """Count ``job`` as started (its gang on the fullest nodes it fits, its tenant charged), so that
        later preemptors in the cycle do not count on what its victims free."""
        need = job.per_learner.as_shape()
        for _ in range(job.learners):
            node = min(
                (i for i, ok in enumerate(eligible) if ok and slots_in(_shape(self.free[i]), need, 1)),
                key=lambda i: (self.free[i][0], self.free[i][1], i),
            )
            self.free[node] = _add(self.free[node], need, -1)
        self.used[job.tenant] = _add(self.used[job.tenant], _need(job))
        self.running[job.tenant] += 1

    def helps(self, victim: Victim, eligible: Sequence[bool]) -> bool:
        """Whether ``victim`` runs on a node ``job`` may use (else stopping it cannot make room)."""
        return any(name in self.index and eligible[self.index[name]] for name in victim.placements)


def _shape(amounts: Sequence[int]) -> Shape:
    return (amounts[0], amounts[1], amounts[2])


def _need(job: QueuedJob) -> list[int]:
    return [amount * job.learners for amount in job.per_learner.as_shape()]


def plan(
    snapshot: Snapshot,
    decision: Decision,
    victims: Sequence[Victim],
    *,
    releasing: Sequence[Victim] = (),
    order: Order = "checkpoint-aware",
    priority_tenants: Collection[str] = frozenset(),
) -> list[Preemption]:
    """The preemptions that let waiting jobs start (see the module docstring); [] when none is needed or
    none would help. ``victims``: the running jobs; ``releasing``: those already stopping."""
    key = sort_key(order)
    state = _Plan(snapshot, decision, victims, releasing)
    jobs = state.jobs
    seen: set[str] = set()
    out: list[Preemption] = []
    for pending in sorted(decision.pending, key=attrgetter("position")):
        if len(seen) == len(state.tenants):
            break  # every tenant's first waiting job has been considered: the rest would be passed over
        job = jobs.get(pending.job_id)
        if job is None or job.tenant in seen or job.tenant not in state.tenants:
            continue
        if job.learners < 1 or min(job.per_learner.as_shape()) < 0:
            continue
        eligible = state.eligible(job)
        if _never(state, job, eligible):
            continue
        seen.add(job.tenant)
        if _storage_blocked(state, job):
            continue  # a stopped job keeps its checkpoint claims: preempting frees no claim storage
        if state.slots(job, state.free, eligible) >= job.learners and _quota_ok(state, job, ()):
            continue  # it will start once what is stopping is gone, or waits behind a reservation
        chosen, kind = _reclaim(state, job, eligible, key)
        if not chosen and job.tenant in priority_tenants:
            chosen, kind = _by_priority(state, job, eligible, key)
        if not chosen:
            continue
        for victim in chosen:
            state.taken.add(victim.job_id)
            state._give(victim)
            out.append(
                Preemption(
                    victim.job_id, victim.tenant, job.id, job.tenant, kind, round(victim.lost_gpu_seconds, 1)
                )
            )
        state.start(job, eligible)
    return out


def _never(state: _Plan, job: QueuedJob, eligible: Sequence[bool]) -> bool:
    """Whether ``job`` can never start: it needs more than its tenant may ever hold, or its gang does not
    fit the empty nodes it may use."""
    ceiling = state.cohorts.ceiling(state.tenants[job.tenant])
    if not _within(_need(job), ceiling):
        return True
    gang = ((job.gpu_type, job.tolerated), job.per_learner.as_shape(), job.learners)
    fits = state.fits_empty.get(gang)
    if fits is None:
        fits = state.fits_empty[gang] = state.slots(job, state.capacity, eligible) >= job.learners
    return not fits


def _storage_blocked(state: _Plan, job: QueuedJob) -> bool:
    """Whether the claims ``job``'s launch creates do not fit its tenant's claim quota now (jobs.core.claims)."""
    if not job.claims and not job.storage_gib:
        return False
    tenant = state.tenants[job.tenant]
    caps = (tenant.max_claims, tenant.storage_quota_gib)
    return claim_wait((job.claims, job.storage_gib), held=state.claims[job.tenant], caps=caps) is not None


def _quota_ok(state: _Plan, job: QueuedJob, chosen: Sequence[Victim]) -> bool:
    """Whether the tenant's quota lets ``job`` start once ``chosen`` (its own jobs, if any) are gone."""
    tenant = state.tenants[job.tenant]
    own = [v for v in chosen if v.tenant == job.tenant]
    if state.running[job.tenant] - len(own) >= tenant.max_running_jobs:
        return False
    used = {name: list(amounts) for name, amounts in state.used.items()}
    for victim in chosen:
        used[victim.tenant] = _add(used[victim.tenant], victim.total, -1)
    return state.cohorts.check(tenant, _shape(_need(job)), used, {}) is None


def _reclaim(state: _Plan, job: QueuedJob, eligible: list[bool], key: SortKey) -> tuple[list[Victim], Kind]:
    """Borrowed capacity to take back for ``job`` of a tenant that stays within its nominal quota."""
    tenant = state.tenants[job.tenant]
    if state.running[job.tenant] >= tenant.max_running_jobs:
        return [], "reclaim"
    if not _within(_add(state.used[job.tenant], _need(job)), tenant.nominal):
        return [], "reclaim"
    used = {name: list(amounts) for name, amounts in state.used.items()}
    candidates = sorted(
        (
            v
            for v in state.victims
            if v.job_id not in state.taken
            and v.tenant != job.tenant
            and v.tenant in state.tenants
            and state.tenants[v.tenant].cohort == tenant.cohort
            and state.helps(v, eligible)
        ),
        key=key,
    )
    chosen: list[Victim] = []
    room = _Room(state, job, eligible)
    for victim in candidates:
        if not over_nominal(used[victim.tenant], state.tenants[victim.tenant].nominal):
            continue
        chosen.append(victim)
        used[victim.tenant] = _add(used[victim.tenant], victim.total, -1)
        if room.add(victim):
            return _minimal(state, job, eligible, chosen, quota=False), "reclaim"
    return [], "reclaim"


def _by_priority(
    state: _Plan, job: QueuedJob, eligible: list[bool], key: SortKey
) -> tuple[list[Victim], Kind]:
    """The tenant's own jobs of lower priority to stop for ``job``."""
    candidates = sorted(
        (
            v
            for v in state.victims
            if v.job_id not in state.taken and v.tenant == job.tenant and v.priority < job.priority
        ),
        key=key,
    )
    chosen: list[Victim] = []
    room = _Room(state, job, eligible)
    for victim in candidates:
        chosen.append(victim)
        fits = room.add(victim)
        if fits and _quota_ok(state, job, chosen):
            return _minimal(state, job, eligible, chosen, quota=True), "priority"
    return [], "priority"


class _Room:
    """What would be free per node for ``job`` as victims are added one at a time, with the number of its
    learners that fit kept up to date node by node (so that trying many candidates stays cheap)."""

    def __init__(self, state: _Plan, job: QueuedJob, eligible: list[bool]) -> None:
        self.index, self.eligible = state.index, eligible
        self.need, self.learners = job.per_learner.as_shape(), job.learners
        self.free = list(state.free)  # entries are replaced, never changed in place
        self.per_node = [
            slots_in(_shape(room), self.need, job.learners) if ok else 0
            for room, ok in zip(self.free, eligible, strict=True)
        ]
        self.slots = sum(self.per_node)

    def add(self, victim: Victim) -> bool:
        """Count ``victim``'s resources as free; whether the job's gang fits now."""
        shape = victim.per_learner.as_shape()
        for name in victim.placements:
            node = self.index.get(name)
            if node is None:
                continue
            self.free[node] = _add(self.free[node], shape)
            if self.eligible[node]:
                fit = slots_in(_shape(self.free[node]), self.need, self.learners)
                self.slots += fit - self.per_node[node]
                self.per_node[node] = fit
        return self.slots >= self.learners


def _minimal(
    state: _Plan, job: QueuedJob, eligible: list[bool], chosen: list[Victim], *, quota: bool
) -> list[Victim]:
    """``chosen`` without the victims the job turns out not to need (tried latest-added first)."""
    kept = list(chosen)
    for victim in reversed(chosen):
        trial = [v for v in kept if v is not victim]
        fits = state.slots(job, state.freed(trial), eligible) >= job.learners
        if fits and (not quota or _quota_ok(state, job, trial)):
            kept = trial
    return kept

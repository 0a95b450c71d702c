"""Preemption in the trace simulator: the platform's own planner (:func:`jobs.core.preemption.plan`) after
each simulated admission cycle, with a stated model of checkpoints and of stopping a job.

Why a model: the trace says how long each task ran, not how often it saved its work. The rules (also in
the command's output, :meth:`PreemptionModel.describe`):

* Each job checkpoints every ``interval`` seconds of run time, counted from each (re)start: a fixed
  ``checkpoint_interval``, or (None) an interval drawn once per job, uniform in ``interval_range``, from a
  generator seeded by the CRC-32 of the job id (the same on every run and machine). ``since_checkpoint``
  is the run time since the last multiple of it.
* After each cycle the running jobs are the victims (protected for ``min_runtime_seconds`` after their
  latest start, doubled for each earlier preemption of the job, as
  :func:`~jobs.core.preemption.protection_seconds` says; those already stopping are ``releasing``) and
  :func:`~jobs.core.preemption.plan` chooses, in ``order``. A chosen job keeps running, and holding its
  resources, for ``grace_seconds`` (SIGTERM to exit), then stops: the work since its last checkpoint at
  that moment is lost (the worst case: a learner that saves on SIGTERM, as halting asks, and finishes
  within the grace loses nothing), and it is queued again with its original submit time (it keeps its
  place) and ``total - saved`` work left. One that finishes inside its grace simply finishes.
* The replay runs a cycle at events only (arrivals, completions, ends of graces); with preemption a cycle
  also runs when the first protected job's protection ends while jobs wait, as the platform's periodic
  cycle would. Admission offers jobs within their tenant's nominal quota before borrowing ones, as the
  platform does with preemption on.
* Only reclaim is modelled (the trace has no priorities): without borrowing nobody is above its nominal
  quota and nothing is ever preempted.
"""

from __future__ import annotations

import heapq
import math
import random
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from jobs.core.admission import Decision, RunningJob, Snapshot
from jobs.core.preemption import Order, Preemption, Victim, plan, protection_seconds


@dataclass(frozen=True, slots=True)
class PreemptionModel:
    """How preemption is simulated: the victim order, the grace, the minimum runtime and the checkpoints."""

    order: Order = "checkpoint-aware"
    grace_seconds: float = 30.0
    min_runtime_seconds: float = 300.0
    checkpoint_interval: float | None = None
    """Seconds between a job's checkpoints; None: per job, uniform in ``interval_range``."""
    interval_range: tuple[float, float] = (600.0, 3600.0)

    def interval(self, job_id: str) -> float:
        """The job's checkpoint interval (deterministic: seeded by the CRC-32 of its id)."""
        if self.checkpoint_interval is not None:
            return self.checkpoint_interval
        low, high = self.interval_range
        return random.Random(zlib.crc32(job_id.encode())).uniform(low, high)

    def describe(self) -> str:
        """The checkpoint model in words, for the output."""
        if self.checkpoint_interval is not None:
            every = f"every {self.checkpoint_interval:g} s of run time"
        else:
            low, high = self.interval_range
            every = (
                f"every interval ~ uniform({low:g}, {high:g}) s of run time, drawn per job from a generator "
                "seeded by the CRC-32 of the job id"
            )
        return (
            f"a model: each job checkpoints {every}, counted from each (re)start; a victim holds its "
            f"resources for a {self.grace_seconds:g} s grace, then loses the work since its last checkpoint "
            f"and is requeued with its submit time; jobs within {self.min_runtime_seconds:g} s of their "
            "latest start, doubled for each earlier preemption of the job, are not preempted; victims in "
            f"{self.order} order"
        )


@dataclass(slots=True)
class PreemptionStats:
    """What preemption did in one replay, with the model it ran under.

    ``gpu_hours_run`` (GPU time the jobs held) = ``gpu_hours_work`` (their trace run times) +
    ``gpu_hours_lost`` (work thrown away, grace included): the work is conserved. ``min_node_free_gpus``
    and ``peak_cohort_gpus`` (the most GPUs the tenants held together) check capacity and quotas.
    """

    order: str
    grace_seconds: float
    min_runtime_seconds: float
    checkpoint_interval: float | None
    interval_range: tuple[float, float]
    model: str
    planned: int = 0
    preemptions: int = 0
    finished_in_grace: int = 0
    jobs_preempted: int = 0
    max_preemptions_of_a_job: int = 0
    gpu_hours_lost: float = 0.0
    gpu_hours_run: float = 0.0
    gpu_hours_work: float = 0.0
    min_node_free_gpus: int = 0
    peak_cohort_gpus: int = 0
    preemptions_by_tenant: dict[str, int] = field(default_factory=dict)


_Kill = tuple[float, str, int]
"""A pending stop: when the grace ends, which job, and the run of the job it was planned for."""


class Preempter:
    """The preemption side of one replay (private to :mod:`jobs.core.simulator`): each job's runs, saved
    work and stops, and the call to the planner."""

    def __init__(self, model: PreemptionModel, min_node_free_gpus: int) -> None:
        self.model = model
        self.stats = PreemptionStats(
            model.order,
            model.grace_seconds,
            model.min_runtime_seconds,
            model.checkpoint_interval,
            model.interval_range,
            model.describe(),
            min_node_free_gpus=min_node_free_gpus,
        )
        self.run_start: dict[str, float] = {}
        self.runs: dict[str, int] = {}
        """Each job's run number (0 for the first): a completion or stop of an earlier run is stale."""
        self.saved: dict[str, float] = {}
        self.held: dict[str, float] = {}
        """Seconds each job has held its resources, all runs together."""
        self.requeued_at: dict[str, float] = {}
        self.extra_wait: dict[str, float] = {}
        """Seconds each job waited in the queue again after being preempted."""
        self.stopping: set[str] = set()
        self.kills: list[_Kill] = []
        self.wakes: list[float] = []
        """Times a minimum runtime ends while jobs wait: a cycle then, as the platform's periodic one."""
        self.count: dict[str, int] = {}

    def protection(self, jid: str) -> float:
        """How long after its latest start ``jid`` may not be preempted (longer for each earlier stop)."""
        return protection_seconds(self.model.min_runtime_seconds, self.count.get(jid, 0))

    def remaining(self, jid: str, duration: float) -> float:
        """Run time the job still needs: its total less what it saved at checkpoints."""
        return duration - self.saved.get(jid, 0.0)

    def started(self, jid: str, now: float) -> None:
        """A run of ``jid`` starts at ``now``: count the wait since it was requeued."""
        self.run_start[jid] = now
        if jid in self.requeued_at:
            self.extra_wait[jid] = self.extra_wait.get(jid, 0.0) + now - self.requeued_at.pop(jid)

    def ended(self, jid: str, now: float) -> None:
        """A run of ``jid`` finished its work at ``now`` (perhaps inside a grace)."""
        self.held[jid] = self.held.get(jid, 0.0) + now - self.run_start[jid]
        if jid in self.stopping:
            self.stopping.discard(jid)
            self.stats.finished_in_grace += 1

    def victims(
        self, running: Mapping[str, RunningJob], tenant: Callable[[str], str], now: float
    ) -> tuple[list[Victim], list[Victim]]:
        """The running jobs as victims (protected inside their protection), and those stopping."""
        victims: list[Victim] = []
        releasing: list[Victim] = []
        for jid, r in running.items():
            ran = now - self.run_start[jid]
            victim = Victim(
                jid,
                tenant(jid),
                0,
                self.run_start[jid],
                r.placements,
                r.per_learner,
                ran % self.model.interval(jid),
                ran < self.protection(jid),
            )
            (releasing if jid in self.stopping else victims).append(victim)
        return victims, releasing

    def plan(
        self,
        snapshot: Snapshot,
        decision: Decision,
        running: Mapping[str, RunningJob],
        tenant: Callable[[str], str],
    ) -> list[Preemption]:
        """Plan this cycle's preemptions and start their graces."""
        if not decision.pending:
            return []
        now = snapshot.now
        victims, releasing = self.victims(running, tenant, now)
        chosen = plan(snapshot, decision, victims, releasing=releasing, order=self.model.order)
        ends = [v.admitted_at + self.protection(v.job_id) for v in victims if v.protected]
        if ends and (not self.wakes or min(ends) < self.wakes[0]):
            heapq.heappush(self.wakes, min(ends))
        for p in chosen:
            self.stopping.add(p.victim)
            heapq.heappush(self.kills, (now + self.model.grace_seconds, p.victim, self.runs.get(p.victim, 0)))
        self.stats.planned += len(chosen)
        return chosen

    def _current(self, kill: _Kill) -> bool:
        return kill[1] in self.stopping and self.runs.get(kill[1], 0) == kill[2]

    def next_kill(self) -> float:
        """When the next grace ends (dropping stale ones), or infinity."""
        while self.kills and not self._current(self.kills[0]):
            heapq.heappop(self.kills)
        return self.kills[0][0] if self.kills else math.inf

    def next_event(self) -> float:
        """When the next grace ends or the next wake is due, or infinity."""
        return min(self.next_kill(), self.wakes[0] if self.wakes else math.inf)

    def due(self, now: float) -> list[str]:
        """The jobs whose grace ends at ``now`` (wakes due by then are done too)."""
        while self.wakes and self.wakes[0] <= now:
            heapq.heappop(self.wakes)
        out = []
        while self.kills and self.kills[0][0] == now:
            kill = heapq.heappop(self.kills)
            if self._current(kill):
                out.append(kill[1])
        return out

    def stop(self, jid: str, tenant: str, gpus: int, now: float) -> None:
        """``jid`` (holding ``gpus`` in all) stops at ``now``: keep its checkpointed work, count the rest as
        lost, and mark it requeued."""
        ran = now - self.run_start[jid]
        interval = self.model.interval(jid)
        kept = math.floor(ran / interval) * interval
        self.saved[jid] = self.saved.get(jid, 0.0) + kept
        self.held[jid] = self.held.get(jid, 0.0) + ran
        self.stats.gpu_hours_lost += gpus * (ran - kept) / 3600
        self.stats.preemptions += 1
        self.stats.preemptions_by_tenant[tenant] = self.stats.preemptions_by_tenant.get(tenant, 0) + 1
        self.count[jid] = self.count.get(jid, 0) + 1
        self.runs[jid] = self.runs.get(jid, 0) + 1
        self.stopping.discard(jid)
        self.requeued_at[jid] = now

    def check(self, min_free_gpus: int, cohort_gpus: int) -> None:
        """Record the capacity and quota figures after a start."""
        self.stats.min_node_free_gpus = min(self.stats.min_node_free_gpus, min_free_gpus)
        self.stats.peak_cohort_gpus = max(self.stats.peak_cohort_gpus, cohort_gpus)

    def finish(self, work_gpu_seconds: float, run_gpu_seconds: float) -> PreemptionStats:
        """The stats once the replay is over: the completed jobs' GPU time in the trace and as run."""
        stats = self.stats
        stats.jobs_preempted = len(self.count)
        stats.max_preemptions_of_a_job = max(self.count.values(), default=0)
        stats.gpu_hours_work = work_gpu_seconds / 3600
        stats.gpu_hours_run = run_gpu_seconds / 3600
        return stats

"""Trace-driven simulator: replays a GPU-cluster trace through :func:`jobs.core.admission.admit`.

Why: to measure what the admission policy buys (queueing delay, completion time, GPU allocation,
fairness) against FfDL's FIFO on a real workload, with the very function the platform runs.
Pure apart from reading the CSV files; no Django.

Trace conventions (Alibaba GPU trace v2023, ``openb_pod_list_*.csv``):

* arrival = ``creation_time``; run time = ``deletion_time - scheduled_time``. Rows without a
  ``scheduled_time`` (pods the real cluster never ran) have no run time and are skipped.
* Each pod is a one-learner job. A fractional GPU (``gpu_milli < 1000``) is rounded up to one whole
  GPU: Trainyard allocates ``nvidia.com/gpu`` limits, which are integers.
* ``gpu_spec`` (empty in the default trace) becomes the job's ``gpu_type`` when it names a single
  model; a list of alternatives (``A|B``) is treated as any type.
* Tasks go to ``tenant-0 .. tenant-N-1`` by CRC-32 of the task name; equal weights; each quota is
  ``quota_share`` of the cluster (1.0: never binds) with no running-job limit. With ``borrowing`` that
  quota is nominal and every tenant may borrow, without a limit of its own, what the others leave
  unused (one cluster-wide cohort, jobs.core.borrowing); without it the quota is a hard cap.
* A job that cannot fit the empty cluster is dropped before the replay and counted (under FIFO it
  would block the queue forever).
* A file without the columns that give a run time (the fill-only pod lists of the same trace, e.g.
  ``openb_pod_list_multigpu50.csv``: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli``) is refused with a
  :class:`TraceError` naming the file and the missing columns.
* ``time_scale`` multiplies arrival times (0.01 replays the trace 100x denser) to study load;
  ``estimates`` gives the trainyard policy the true run times as expected durations (the usual
  backfill-simulation oracle); without them reservations have no start time.
* ``fair_share_half_life`` (seconds, 0: off) gives each tenant its decayed usage of the finished and
  running jobs (jobs.core.fairshare), as the platform does with ``FAIR_SHARE_HALF_LIFE_SECONDS``.
* With ``preemption`` (jobs/core/simulator_preemption.py, a stated checkpoint model) each cycle is followed
  by the platform's preemption planner, and admission offers jobs within their tenant's nominal quota
  before borrowing ones, as the platform does with preemption on; a job's queueing delay is then all the
  time it spent queued, before its first start and again after each preemption.

The virtual clock jumps from event to event (arrivals and completions); at each event time all
completions are applied, then the ends of preemption graces, then all arrivals, then one admission cycle
runs if anything is queued.
"""

from __future__ import annotations

import csv
import heapq
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from jobs.core.admission import (
    Node,
    Policy,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    TenantState,
    admit,
)
from jobs.core.borrowing import NO_BORROWING, Limit
from jobs.core.eta import RunningFacts, estimate
from jobs.core.fairshare import NONE, History, Run
from jobs.core.simulator_preemption import Preempter, PreemptionModel, PreemptionStats
from jobs.core.simulator_tuning import SpeedModel, TunedJob, TuningStats, next_look, record, tuner_look


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One task of the trace, in Trainyard's terms (whole GPUs, one learner)."""

    id: str
    tenant: str
    arrival: float
    duration: float
    gpus: int
    cpu_millis: int
    memory_mib: int
    gpu_type: str | None = None


@dataclass(frozen=True, slots=True)
class SimResult:
    """Figures of one replay under one policy."""

    policy: str
    jobs: int
    completed: int
    dropped_never_fit: int
    cycles: int
    mean_queue_delay: float
    p50_queue_delay: float
    p95_queue_delay: float
    mean_jct: float
    gpu_allocation: float
    makespan: float
    tenant_gpu_share: dict[str, float] = field(default_factory=dict)
    tenant_mean_delay: dict[str, float] = field(default_factory=dict)
    tuning: TuningStats | None = None
    """What the tuner did (None: a replay without tuning)."""
    eta: EtaAccuracy | None = None
    """How close the first ETA each waiting job got came to its actual start (None: not measured)."""
    borrowing: bool = False
    """Whether tenants could borrow above their (nominal) quota."""
    fair_share_half_life: float = 0.0
    """The half-life of past usage in fair share (0: only what tenants hold now counts)."""
    tenant_p95_delay: dict[str, float] = field(default_factory=dict)
    preemption: PreemptionStats | None = None
    """What preemption did, and the model it ran under (None: a replay without preemption)."""


@dataclass(frozen=True, slots=True)
class EtaAccuracy:
    """The first ETA of each job that waited, against its actual start: how many got one, how many were
    told "unknown", the median and p90 absolute error in seconds (the same as the wait's error), and the
    median actual wait of the jobs that got one, to read the errors against."""

    estimated: int
    unknown: int
    p50_abs_error: float
    p90_abs_error: float
    p50_wait: float


class TraceError(ValueError):
    """A trace file the simulator cannot replay (say, one without run times)."""


RUN_TIME_COLUMNS = ("creation_time", "scheduled_time", "deletion_time")
TRACE_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", *RUN_TIME_COLUMNS)


def tenant_of(name: str, tenants: int) -> str:
    """Deterministic tenant of a trace task (CRC-32 of its name, stable across runs and machines)."""
    return f"tenant-{zlib.crc32(name.encode()) % tenants}"


def load_trace(
    path: str | Path, *, tenants: int = 4, limit: int | None = None, time_scale: float = 1.0
) -> list[TraceJob]:
    """Read a pod list CSV into jobs ordered by arrival, skipping rows without a run time."""
    jobs: list[TraceJob] = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [name for name in TRACE_COLUMNS if name not in (reader.fieldnames or ())]
        if missing:
            why = " (no run times: a fill-only pod list?)" if set(missing) & set(RUN_TIME_COLUMNS) else ""
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}{why}; cannot replay it")
        for row in reader:
            if limit is not None and len(jobs) >= limit:
                break
            if not row["scheduled_time"] or not row["deletion_time"]:
                continue
            duration = float(row["deletion_time"]) - float(row["scheduled_time"])
            if duration <= 0:
                continue
            gpus = int(row["num_gpu"])
            if gpus == 0 and int(row["gpu_milli"] or 0) > 0:
                gpus = 1
            spec = (row.get("gpu_spec") or "").strip()
            jobs.append(
                TraceJob(
                    id=row["name"],
                    tenant=tenant_of(row["name"], tenants),
                    arrival=float(row["creation_time"]) * time_scale,
                    duration=duration,
                    gpus=gpus,
                    cpu_millis=int(row["cpu_milli"]),
                    memory_mib=int(row["memory_mib"]),
                    gpu_type=spec if spec and "|" not in spec else None,
                )
            )
    jobs.sort(key=lambda j: (j.arrival, j.id))
    return jobs


def load_nodes(path: str | Path) -> list[Node]:
    """Read a node list CSV (sn, cpu_milli, memory_mib, gpu, model) into empty nodes."""
    nodes: list[Node] = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            cap = Resources(int(row["gpu"]), int(row["cpu_milli"]), int(row["memory_mib"]))
            nodes.append(Node(row["sn"], cap, cap, (row.get("model") or "").strip() or None))
    return nodes


def _percentile(sorted_values: Sequence[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[max(0, math.ceil(p * len(sorted_values)) - 1)]


def _fits_empty(jobs: Sequence[TraceJob], nodes: Sequence[Node]) -> list[TraceJob]:
    """Jobs that fit the empty cluster, asked of the admission function once per distinct shape."""
    total = Resources.total(n.capacity for n in nodes)
    probe = TenantState("probe", 1.0, total, 1, Resources.ZERO, 0)
    verdict: dict[tuple[int, int, int, str | None], bool] = {}
    for j in jobs:
        key = (j.gpus, j.cpu_millis, j.memory_mib, j.gpu_type)
        if key not in verdict:
            q = QueuedJob("probe", "probe", 0, 0.0, 1, j.gpus, j.cpu_millis, j.memory_mib, j.gpu_type)
            verdict[key] = bool(admit(Snapshot([q], [probe], nodes)).admitted)
    return [j for j in jobs if verdict[(j.gpus, j.cpu_millis, j.memory_mib, j.gpu_type)]]


def simulate(
    jobs: Sequence[TraceJob],
    nodes: Sequence[Node],
    *,
    policy: Policy,
    tenants: int = 4,
    quota_share: float = 1.0,
    estimates: bool = True,
    tuning: SpeedModel | None = None,
    eta: bool = False,
    borrowing: bool = False,
    fair_share_half_life: float = 0.0,
    preemption: PreemptionModel | None = None,
) -> SimResult:
    """Replay ``jobs`` on ``nodes`` under ``policy`` on a virtual clock and summarise the outcome; with
    ``tuning``, running GPU jobs are tuned under that speed model (jobs/core/simulator_tuning.py); with
    ``eta``, each waiting job's first ETA (jobs/core/eta.py) is kept and scored against its start; with
    ``borrowing``, tenants may borrow above their quota what the others leave unused; with
    ``fair_share_half_life``, their past usage decayed by it counts in fair share; with ``preemption``,
    each cycle is followed by the preemption planner (jobs/core/simulator_preemption.py)."""
    if preemption is not None and tuning is not None:
        raise ValueError("preemption and tuning are not simulated together")
    runnable = _fits_empty(jobs, nodes)
    names = [f"tenant-{k}" for k in range(tenants)]
    names += sorted({j.tenant for j in runnable} - set(names))
    replay = _Replay(
        runnable, nodes, names, policy=policy, quota_share=quota_share, estimates=estimates, tuning=tuning
    )
    replay.first_eta = {} if eta else None
    replay.limit = (None, None, None) if borrowing else NO_BORROWING
    replay.history = History(fair_share_half_life)
    if preemption is not None:
        replay.preempter = Preempter(preemption, min((n.free.gpus for n in nodes), default=0))
    replay.run()
    stats = replay.stats
    if stats is not None:
        starts, finals = replay.start_speeds, replay.final_speeds
        stats.mean_start_speed = sum(starts) / len(starts) if starts else 0.0
        stats.mean_final_speed = sum(finals) / len(finals) if finals else 0.0
    started, ended = replay.started, replay.ended
    run_time = {jid: ended[jid] - started[jid] for jid in ended} if tuning else None
    cap_g = sum(n.capacity.gpus for n in nodes)
    preempter = replay.preempter
    if preempter is not None:
        run_time = preempter.held
    result = _summarise(
        policy, jobs, runnable, started, ended, replay.cycles, cap_g, names, run_time, stats,
        preempter.extra_wait if preempter is not None else None,
    )  # fmt: skip
    result = replace(result, borrowing=borrowing, fair_share_half_life=fair_share_half_life)
    if preempter is not None:
        done = [j for j in runnable if j.id in ended]
        work = sum(j.gpus * j.duration for j in done)
        held = sum(j.gpus * preempter.held[j.id] for j in done)
        result = replace(result, preemption=preempter.finish(work, held))
    if replay.first_eta is None:
        return result
    arrival = {j.id: j.arrival for j in runnable}
    return replace(result, eta=_eta_accuracy(replay.first_eta, started, arrival))


def _eta_accuracy(
    first: dict[str, float | None], started: dict[str, float], arrival: dict[str, float]
) -> EtaAccuracy:
    known = [jid for jid, at in first.items() if at is not None and jid in started]
    errors = sorted(abs(started[jid] - (first[jid] or 0.0)) for jid in known)
    waits = sorted(started[jid] - arrival[jid] for jid in known)
    unknown = sum(1 for at in first.values() if at is None)
    p50, p90 = _percentile(errors, 0.5), _percentile(errors, 0.9)
    return EtaAccuracy(len(errors), unknown, p50, p90, _percentile(waits, 0.5))


_Entry = tuple[float, str, int]
"""A heap entry: when, which job, and the version of the job's allocation it was pushed for."""


class _Replay:
    """The virtual cluster of one replay (private to :func:`simulate`): nodes' free resources, tenants'
    usage, the queue, running jobs and the heaps of completions and tuner looks, advanced event by event."""

    def __init__(
        self,
        runnable: Sequence[TraceJob],
        nodes: Sequence[Node],
        names: list[str],
        *,
        policy: Policy,
        quota_share: float,
        estimates: bool,
        tuning: SpeedModel | None,
    ) -> None:
        self.runnable, self.names, self.policy, self.estimates = runnable, names, policy, estimates
        total = Resources.total(n.capacity for n in nodes)
        self.quota = Resources(
            int(total.gpus * quota_share),
            int(total.cpu_millis * quota_share),
            int(total.memory_mib * quota_share),
        )
        self.max_node_cpu = max((n.capacity.cpu_millis for n in nodes), default=0)
        self.nodes = list(nodes)
        self.where = {n.name: k for k, n in enumerate(self.nodes)}
        self.used = dict.fromkeys(names, Resources.ZERO)
        self.running_count = dict.fromkeys(names, 0)
        self.by_id = {j.id: j for j in runnable}
        self.queue: dict[str, QueuedJob] = {}
        self.running: dict[str, RunningJob] = {}
        self.started: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        self.completions: list[_Entry] = []
        self.looks: list[_Entry] = []
        self.tuned: dict[str, TunedJob] = {}
        self.tuning = tuning
        self.stats = TuningStats(min_node_free_cpu_millis=self.max_node_cpu) if tuning else None
        self.start_speeds: list[float] = []
        self.final_speeds: list[float] = []
        self.cycles = 0
        self.arrived = 0
        self.first_eta: dict[str, float | None] | None = None
        self.limit: Limit = NO_BORROWING
        self.history = History(0.0)
        self.preempter: Preempter | None = None

    def run(self) -> None:
        """Advance the clock from event to event: completions, then tuner looks, then arrivals, then one
        admission cycle if anything is queued; until every job has arrived and completed."""
        runnable = self.runnable
        preempter = self.preempter
        while self.arrived < len(runnable) or self.completions or (preempter and preempter.kills):
            now = min(
                runnable[self.arrived].arrival if self.arrived < len(runnable) else math.inf,
                self.live(self.completions, look=False),
                self.live(self.looks, look=True),
                preempter.next_event() if preempter is not None else math.inf,
            )
            if now == math.inf:
                break
            self.complete(now)
            while self.looks and self.looks[0][0] == now:
                entry = heapq.heappop(self.looks)
                if self.current(entry, look=True):
                    self.look(entry[1], now)
            for jid in preempter.due(now) if preempter is not None else ():
                self.preempt(jid, now)
            self.arrive(now)
            if self.queue:
                self.cycle(now)

    def change(self, name: str, delta: Resources) -> None:
        """Add ``delta`` (negative to take) to node ``name``'s free resources."""
        k = self.where[name]
        n = self.nodes[k]
        self.nodes[k] = Node(n.name, n.free + delta, n.capacity, n.gpu_type)

    def charge(self, tenant: str, delta: Resources, count: int) -> None:
        """Add ``delta`` to what ``tenant`` holds and ``count`` to its running jobs."""
        self.used[tenant] += delta
        self.running_count[tenant] += count

    def current(self, entry: _Entry, *, look: bool) -> bool:
        """Whether a heap entry still stands (not superseded by a later change of its job's allocation)."""
        t = self.tuned.get(entry[1])
        if t is None and not look and self.preempter is not None:
            return self.preempter.runs.get(entry[1], 0) == entry[2]
        return t.version == entry[2] if t is not None else not look

    def live(self, heap: list[_Entry], *, look: bool) -> float:
        """The time of the first standing entry of ``heap`` (dropping stale ones), or infinity."""
        while heap and not self.current(heap[0], look=look):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def complete(self, now: float) -> None:
        """Release the jobs that end at ``now``."""
        while self.completions and self.completions[0][0] == now:
            entry = heapq.heappop(self.completions)
            if not self.current(entry, look=False):
                continue
            jid = entry[1]
            r = self.running.pop(jid)
            for name in r.placements:
                self.change(name, r.per_learner)
            self.charge(self.by_id[jid].tenant, -r.per_learner, -1)
            self.ended[jid] = now
            self.history.finish(
                Run(self.by_id[jid].tenant, self.run_start(jid), now, r.per_learner.as_shape())
            )
            if self.preempter is not None:
                self.preempter.ended(jid, now)
            if jid in self.tuned and self.tuning is not None:
                self.final_speeds.append(self.tuned[jid].speed(self.tuning))
                self.tuned[jid].version = -1  # done: its remaining heap entries are stale

    def arrive(self, now: float) -> None:
        """Queue the jobs that arrive at ``now``."""
        runnable = self.runnable
        while self.arrived < len(runnable) and runnable[self.arrived].arrival == now:
            j = runnable[self.arrived]
            self.queue[j.id] = QueuedJob(
                j.id, j.tenant, 0, j.arrival, 1, j.gpus, j.cpu_millis, j.memory_mib, j.gpu_type,
                j.duration if self.estimates else None,
            )  # fmt: skip
            self.arrived += 1

    def cycle(self, now: float) -> None:
        """One admission cycle over the queue; start what it admits."""
        runs = (
            Run(self.by_id[jid].tenant, self.run_start(jid), None, r.per_learner.as_shape())
            for jid, r in self.running.items()
        )
        decayed = self.history.at(now, runs)
        tenant_states = [
            TenantState(
                t, 1.0, self.quota, 10**9, self.used[t], self.running_count[t], self.limit,
                decayed=decayed.get(t, NONE),
            )
            for t in self.names
        ]  # fmt: skip
        snap = Snapshot(
            list(self.queue.values()), tenant_states, self.nodes, now, list(self.running.values())
        )
        self.cycles += 1
        decision = admit(snap, policy=self.policy, nominal_first=self.preempter is not None)
        first = self.first_eta
        if first is not None and any(p.job_id not in first for p in decision.pending):
            since = self.preempter.run_start if self.preempter is not None else self.started
            running = {jid: RunningFacts(self.by_id[jid].tenant, since[jid], None) for jid in self.running}
            for jid, found in estimate(snap, decision, durations={}, running=running).items():
                first.setdefault(jid, found.start)
        if self.preempter is not None:  # before the starts below change the nodes the snapshot holds
            self.preempter.plan(snap, decision, self.running, lambda jid: self.by_id[jid].tenant)
        for adm in decision.admitted:
            self.start(adm.job_id, tuple(adm.placements), now)

    def start(self, jid: str, placements: tuple[str, ...], now: float) -> None:
        """Start an admitted job on ``placements``: take its resources, schedule its end (and, when tuning
        and the job is tunable, the tuner's first look)."""
        j, per = self.by_id[jid], self.queue.pop(jid).per_learner
        for name in placements:
            self.change(name, -per)
        self.charge(j.tenant, per, 1)
        end = now + j.duration
        preempter, run = self.preempter, 0
        if preempter is not None:
            end = now + preempter.remaining(jid, j.duration)
            preempter.started(jid, now)
            run = preempter.runs.get(jid, 0)
            free = min(self.nodes[self.where[name]].free.gpus for name in placements)
            preempter.check(free, sum(used.gpus for used in self.used.values()))
        tuning, stats = self.tuning, self.stats
        span = tuning.cpu_range(j.gpus, j.cpu_millis, self.max_node_cpu) if tuning else None
        if tuning is not None and stats is not None and span is not None:
            t = TunedJob(j.gpus, j.memory_mib, span, j.cpu_millis, 0.0, now)
            t.work_left = j.duration * t.speed(tuning)
            self.tuned[jid] = t
            stats.tunable_jobs += 1
            self.start_speeds.append(t.speed(tuning))
            heapq.heappush(self.looks, (now + tuning.window_seconds, jid, 0))
        self.running[jid] = RunningJob(jid, end if self.estimates else None, placements, per)
        self.started.setdefault(jid, now)
        heapq.heappush(self.completions, (end, jid, run))

    def run_start(self, jid: str) -> float:
        """When the running job's current run began (its first start, unless it was preempted since)."""
        return self.preempter.run_start[jid] if self.preempter is not None else self.started[jid]

    def preempt(self, jid: str, now: float) -> None:
        """A preempted job's grace is over: free its resources and queue it again, with its submit time and
        the work it has left after its last checkpoint."""
        assert self.preempter is not None
        j, r = self.by_id[jid], self.running.pop(jid)
        for name in r.placements:
            self.change(name, r.per_learner)
        self.charge(j.tenant, -r.per_learner, -1)
        self.history.finish(Run(j.tenant, self.run_start(jid), now, r.per_learner.as_shape()))
        self.preempter.stop(jid, j.tenant, r.per_learner.gpus * len(r.placements), now)
        left = self.preempter.remaining(jid, j.duration)
        self.queue[jid] = QueuedJob(
            j.id, j.tenant, 0, j.arrival, 1, j.gpus, j.cpu_millis, j.memory_mib, j.gpu_type,
            left if self.estimates else None,
        )  # fmt: skip

    def look(self, jid: str, now: float) -> None:
        """The tuner looks at a running job: record its decision, apply a change of CPU, plan the next look."""
        tuning, stats = self.tuning, self.stats
        assert tuning is not None and stats is not None
        t, r, j = self.tuned[jid], self.running[jid], self.by_id[jid]
        stats.looks += 1
        node_free = min(self.nodes[self.where[name]].free.cpu_millis for name in r.placements)
        free = min(self.quota.cpu_millis - self.used[j.tenant].cpu_millis, node_free)
        diagnosis, decision = tuner_look(tuning, t, now=now, free_cpu_millis=free)
        target = decision.target.cpu_millis if decision.target is not None else t.cpu_millis
        if decision.action in ("scale", "revert") and target - t.cpu_millis > free:
            decision = replace(
                decision, action="hold", code="no_room"
            )  # a revert upwards that no longer fits
        record(t, diagnosis, decision, now=now)
        stats.scales += decision.action == "scale"
        stats.reverts += decision.action == "revert"
        stats.keeps += decision.action == "keep"
        stats.holds += decision.action == "hold"
        if decision.action in ("scale", "revert"):
            stats.jobs_scaled += decision.action == "scale" and t.history.changes == 1
            self.resize(jid, target, now)
        when = next_look(tuning, t, decision, now=now)
        if when is not None:
            heapq.heappush(self.looks, (when, jid, t.version))

    def resize(self, jid: str, target: int, now: float) -> None:
        """Restart a tuned job with ``target`` CPU per learner: move the difference on its nodes and its
        tenant, reschedule its end, and check the bounds the tuner must stay within."""
        tuning, stats = self.tuning, self.stats
        assert tuning is not None and stats is not None
        t, r, tenant = self.tuned[jid], self.running[jid], self.by_id[jid].tenant
        t.advance(tuning, now)
        delta = Resources(0, target - t.cpu_millis, 0)
        for name in r.placements:
            self.change(name, -delta)
        self.charge(tenant, delta, 0)
        t.cpu_millis, t.since, t.version = target, now + tuning.restart_seconds, t.version + 1
        per = replace(r.per_learner, cpu_millis=target)
        end = t.end(tuning)
        self.running[jid] = RunningJob(jid, end if self.estimates else None, r.placements, per)
        heapq.heappush(self.completions, (end, jid, t.version))
        quota_cpu = self.quota.cpu_millis
        stats.peak_tenant_cpu_over_quota = max(
            stats.peak_tenant_cpu_over_quota, self.used[tenant].cpu_millis / quota_cpu if quota_cpu else 0
        )
        stats.min_node_free_cpu_millis = min(
            stats.min_node_free_cpu_millis, *(self.nodes[self.where[n]].free.cpu_millis for n in r.placements)
        )
        stats.max_cpu_over_range_top = max(stats.max_cpu_over_range_top, target / t.cpu_range[1])


def _summarise(
    policy: str,
    jobs: Sequence[TraceJob],
    runnable: Sequence[TraceJob],
    started: dict[str, float],
    ended: dict[str, float],
    cycles: int,
    cap_g: int,
    names: list[str],
    run_time: dict[str, float] | None = None,
    tuning: TuningStats | None = None,
    extra_wait: dict[str, float] | None = None,
) -> SimResult:
    done = [j for j in runnable if j.id in ended]
    wait = {j.id: started[j.id] - j.arrival for j in done}
    for jid, extra in (extra_wait or {}).items():
        if jid in wait:
            wait[jid] += extra
    delays = sorted(wait.values())
    makespan = (max(ended.values()) - min(j.arrival for j in done)) if done else 0.0
    gpu_time = {t: 0.0 for t in names}
    tenant_delays: dict[str, list[float]] = {t: [] for t in names}
    for j in done:
        gpu_time[j.tenant] += j.gpus * (run_time[j.id] if run_time is not None else j.duration)
        tenant_delays[j.tenant].append(wait[j.id])
    allocated = sum(gpu_time.values())
    return SimResult(
        policy=policy,
        jobs=len(jobs),
        completed=len(done),
        dropped_never_fit=len(jobs) - len(runnable),
        cycles=cycles,
        mean_queue_delay=sum(delays) / len(delays) if delays else 0.0,
        p50_queue_delay=_percentile(delays, 0.50),
        p95_queue_delay=_percentile(delays, 0.95),
        mean_jct=sum(ended[j.id] - j.arrival for j in done) / len(done) if done else 0.0,
        gpu_allocation=allocated / (cap_g * makespan) if cap_g and makespan else 0.0,
        makespan=makespan,
        tenant_gpu_share={t: (v / allocated if allocated else 0.0) for t, v in gpu_time.items()},
        tenant_mean_delay={t: (sum(v) / len(v) if v else 0.0) for t, v in tenant_delays.items()},
        tuning=tuning,
        tenant_p95_delay={t: _percentile(sorted(v), 0.95) for t, v in tenant_delays.items()},
    )


RATIO_FIELDS = ("mean_queue_delay", "p95_queue_delay", "mean_jct", "gpu_allocation")


TUNING_RATIO_FIELDS = ("mean_jct", "mean_queue_delay", "p95_queue_delay", "makespan", "gpu_allocation")


def ratios(
    trainyard: SimResult, fifo: SimResult, fields: Sequence[str] = RATIO_FIELDS
) -> dict[str, float | None]:
    """trainyard / fifo for the headline figures (1.0 when both are zero, None when only fifo is); with
    ``fields=TUNING_RATIO_FIELDS`` also tuned / untuned."""
    out: dict[str, float | None] = {}
    for name in fields:
        num, den = getattr(trainyard, name), getattr(fifo, name)
        out[name] = num / den if den else (1.0 if num == 0 else None)
    return out

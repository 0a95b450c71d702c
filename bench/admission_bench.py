"""Admission benchmark: cycle time (and the ETA pass after it) at 10,000 queued jobs x 500 nodes,
trace-replay ratios vs FIFO, quota borrowing on vs hard quotas on a contended cluster, and reclaim by
preemption (checkpoint-aware vs Kueue's youngest order; borrowing + preemption vs borrowing vs hard quotas).

Run: ``.venv/bin/python bench/admission_bench.py`` (prints one JSON line per figure); ``--only
preemption`` prints the preemption figure alone (``--preemption-limit``: how many trace jobs it replays).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.core.admission import Node, Policy, QueuedJob, Resources, RunningJob, Snapshot, TenantState, admit
from jobs.core.eta import estimate
from jobs.core.simulator import SimResult, load_nodes, load_trace, ratios, simulate
from jobs.core.simulator_preemption import PreemptionModel

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "traces"
NODE_KINDS = [("a100", 8, 128_000, 1_048_576), ("v100", 8, 96_000, 786_432), ("t4", 4, 64_000, 262_144)]


def big_snapshot(jobs: int = 10_000, nodes: int = 500, tenants: int = 20, seed: int = 7) -> Snapshot:
    """A busy cluster: nodes about half used by running jobs with known ends, a deep mixed queue."""
    rng = random.Random(seed)
    node_list: list[Node] = []
    running: list[RunningJob] = []
    for k in range(nodes):
        gpu_type, gpus, cpu, mem = NODE_KINDS[k % 3] if k % 10 else (None, 0, 64_000, 262_144)
        used_gpus = rng.randint(0, gpus)
        used = Resources(used_gpus, min(cpu, used_gpus * 8000 + 2000), min(mem, used_gpus * 65_536 + 4096))
        name = f"node-{k:04d}"
        free = Resources(gpus - used.gpus, cpu - used.cpu_millis, mem - used.memory_mib)
        node_list.append(Node(name, free, Resources(gpus, cpu, mem), gpu_type))
        running.append(RunningJob(f"run-{k}", rng.uniform(60, 36_000), (name,), used))
    tenant_list = [
        TenantState(
            f"team-{t:02d}",
            rng.choice([1.0, 1.0, 2.0, 0.5]),
            Resources(rng.choice([64, 128, 512]), 4_000_000, 40_000_000),
            rng.choice([20, 50, 1000]),
            Resources(rng.randint(0, 48), rng.randint(0, 400_000), rng.randint(0, 4_000_000)),
            rng.randint(0, 15),
        )
        for t in range(tenants)
    ]
    queue = [
        QueuedJob(
            id=f"job-{k:05d}",
            tenant=f"team-{rng.randrange(tenants):02d}",
            priority=rng.choice([0, 0, 0, 1, 2]),
            submitted_at=rng.uniform(0, 86_400),
            learners=rng.choice([1, 1, 1, 2, 4, 8]),
            gpus=rng.choice([0, 1, 1, 2, 4, 8]),
            cpu_millis=rng.choice([1000, 4000, 8000]),
            memory_mib=rng.choice([4096, 16_384, 65_536]),
            gpu_type=rng.choice([None, None, None, "a100", "v100", "t4"]),
            expected_duration=rng.choice([None, rng.uniform(60, 7200)]),
        )
        for k in range(jobs)
    ]
    return Snapshot(queue, tenant_list, node_list, now=86_400.0, running=running)


def cycle_times(snapshot: Snapshot, policy: Policy, runs: int = 5) -> dict[str, object]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        decision = admit(snapshot, policy=policy)
        times.append(time.perf_counter() - start)
    return {
        "bench": "admission_cycle",
        "policy": policy,
        "queued": len(snapshot.jobs),
        "nodes": len(snapshot.nodes),
        "tenants": len(snapshot.tenants),
        "admitted": len(decision.admitted),
        "median_s": round(statistics.median(times), 4),
        "max_s": round(max(times), 4),
    }


def eta_times(snapshot: Snapshot, runs: int = 5) -> dict[str, object]:
    """The ETA pass that follows each cycle (three replays of the first queued jobs per tenant), timed
    beside the cycle it follows so that the two can be compared in one run."""
    decision = admit(snapshot)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        etas = estimate(snapshot, decision, durations={}, running={})
        times.append(time.perf_counter() - start)
    return {
        "bench": "eta_pass",
        "queued": len(snapshot.jobs),
        "nodes": len(snapshot.nodes),
        "estimated": sum(1 for eta in etas.values() if eta.start is not None),
        "median_s": round(statistics.median(times), 4),
        "max_s": round(max(times), 4),
    }


def replay(label: str, node_file: str, node_sample: int) -> None:
    jobs = load_trace(TRACES / "openb_pod_list_default.csv")
    nodes = load_nodes(TRACES / node_file)[::node_sample]
    results = {}
    for policy in ("trainyard", "fifo"):
        start = time.perf_counter()
        results[policy] = simulate(jobs, nodes, policy=policy)
        wall = round(time.perf_counter() - start, 1)
        figures = {k: v for k, v in asdict(results[policy]).items() if not k.startswith("tenant_")}
        print(json.dumps({"bench": "trace_replay", "cluster": label, "wall_s": wall, **figures}))
    r = {
        k: None if v is None else round(v, 4)
        for k, v in ratios(results["trainyard"], results["fifo"]).items()
    }
    print(json.dumps({"bench": "trace_ratio", "cluster": label, "ratio": "trainyard/fifo", **r}))


def contended_nodes() -> list[Node]:
    """Four 8-GPU nodes of one type (the first 8-GPU node's) from the trace's GPU nodes."""
    nodes = [n for n in load_nodes(TRACES / "openb_node_list_gpu_node.csv") if n.capacity.gpus == 8]
    return [n for n in nodes if n.gpu_type == nodes[0].gpu_type][:4]


def borrowing_replay() -> None:
    """Four tenants, each with a nominal quota of a quarter of four 8-GPU nodes: borrowing on vs hard quotas."""
    jobs = load_trace(TRACES / "openb_pod_list_default.csv", tenants=4)
    nodes = contended_nodes()
    label = f"4 x 8-GPU {nodes[0].gpu_type} nodes, 4 tenants, nominal quota 1/4 each"
    results = {}
    for borrowing in (True, False):
        start = time.perf_counter()
        result = simulate(jobs, nodes, policy="trainyard", tenants=4, quota_share=0.25, borrowing=borrowing)
        wall = round(time.perf_counter() - start, 1)
        figures = {k: v for k, v in asdict(result).items() if not k.startswith("tenant_") and k != "tuning"}
        print(json.dumps({"bench": "borrowing_replay", "cluster": label, "wall_s": wall, **figures}))
        results[borrowing] = result
    on, off = results[True], results[False]
    line = {
        "bench": "borrowing_ratio",
        "cluster": label,
        "ratio": "borrowing on / hard quotas",
        "gpu_allocation": round(on.gpu_allocation / off.gpu_allocation, 4) if off.gpu_allocation else None,
        "mean_queue_delay": round(on.mean_queue_delay / off.mean_queue_delay, 4)
        if off.mean_queue_delay
        else None,
    }
    print(json.dumps(line))


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 4) if den else None


def preemption_replay(limit: int) -> None:
    """The borrowing figure's cluster and tenants (four 8-GPU nodes, four tenants of nominal quota a quarter
    each) on the first ``limit`` jobs of the trace: hard quotas, borrowing alone, and borrowing with reclaim
    by preemption in Kueue's youngest order and in Trainyard's checkpoint-aware order (the simulator's
    stated checkpoint model, jobs/core/simulator_preemption.py)."""
    jobs = load_trace(TRACES / "openb_pod_list_default.csv", tenants=4, limit=limit)
    nodes = contended_nodes()
    cluster = f"4 x 8-GPU {nodes[0].gpu_type} nodes, 4 tenants, nominal quota 1/4 each, first {limit} jobs"
    demand: dict[str, float] = {}
    for j in jobs:
        demand[j.tenant] = demand.get(j.tenant, 0.0) + j.gpus * j.duration
    lightest = min(demand, key=lambda t: (demand[t], t))
    span = max(j.arrival + j.duration for j in jobs) - min(j.arrival for j in jobs)
    nominal = int(sum(n.capacity.gpus for n in nodes) * 0.25)
    load = {t: round(v / (nominal * span), 3) for t, v in sorted(demand.items())}
    runs: dict[str, tuple[bool, PreemptionModel | None]] = {
        "hard quotas": (False, None),
        "borrowing": (True, None),
        "borrowing+preemption youngest": (True, PreemptionModel(order="youngest")),
        "borrowing+preemption checkpoint-aware": (True, PreemptionModel(order="checkpoint-aware")),
    }
    results: dict[str, SimResult] = {}
    for label, (borrowing, model) in runs.items():
        start = time.perf_counter()
        r = simulate(
            jobs,
            nodes,
            policy="trainyard",
            tenants=4,
            quota_share=0.25,
            borrowing=borrowing,
            preemption=model,
        )
        wall = round(time.perf_counter() - start, 1)
        p = r.preemption
        line: dict[str, object] = {
            "bench": "preemption_replay",
            "cluster": cluster,
            "run": label,
            "wall_s": wall,
            "completed": r.completed,
            "gpu_allocation": round(r.gpu_allocation, 4),
            "mean_queue_delay": round(r.mean_queue_delay),
            "p95_queue_delay": round(r.p95_queue_delay),
            "tenant_mean_delay": {t: round(v) for t, v in r.tenant_mean_delay.items()},
            "tenant_p95_delay": {t: round(v) for t, v in r.tenant_p95_delay.items()},
            "lightest_tenant": lightest,
            "tenant_demand_over_nominal": load,
        }
        if p is not None:
            line |= {
                "preemptions": p.preemptions,
                "jobs_preempted": p.jobs_preempted,
                "gpu_hours_lost": round(p.gpu_hours_lost, 2),
                "gpu_hours_run": round(p.gpu_hours_run, 1),
                "model": p.model,
            }
        print(json.dumps(line))
        results[label] = r
    ckpt = results["borrowing+preemption checkpoint-aware"]
    kueue = results["borrowing+preemption youngest"]
    assert ckpt.preemption is not None and kueue.preemption is not None
    lost = (ckpt.preemption.gpu_hours_lost, kueue.preemption.gpu_hours_lost)
    count = (ckpt.preemption.preemptions, kueue.preemption.preemptions)
    print(
        json.dumps(
            {
                "bench": "preemption_ratio",
                "cluster": cluster,
                "ratio": "checkpoint-aware / youngest",
                "gpu_hours_lost": _ratio(*lost),
                "preemptions": _ratio(*count),
                "gpu_hours_lost_per_preemption": _ratio(
                    lost[0] / count[0] if count[0] else 0.0, lost[1] / count[1] if count[1] else 0.0
                ),
                "gpu_allocation": _ratio(ckpt.gpu_allocation, kueue.gpu_allocation),
                "mean_queue_delay": _ratio(ckpt.mean_queue_delay, kueue.mean_queue_delay),
                "tenant_mean_delay": {
                    t: _ratio(v, kueue.tenant_mean_delay[t]) for t, v in ckpt.tenant_mean_delay.items()
                },
            }
        )
    )
    for base in ("borrowing", "hard quotas"):
        other = results[base]
        for label in ("borrowing+preemption checkpoint-aware", "borrowing+preemption youngest"):
            r = results[label]
            print(
                json.dumps(
                    {
                        "bench": "reclaim_ratio",
                        "cluster": cluster,
                        "ratio": f"{label} / {base}",
                        "lightest_tenant": lightest,
                        "lightest_tenant_mean_delay": _ratio(
                            r.tenant_mean_delay[lightest], other.tenant_mean_delay[lightest]
                        ),
                        "lightest_tenant_p95_delay": _ratio(
                            r.tenant_p95_delay[lightest], other.tenant_p95_delay[lightest]
                        ),
                        "mean_queue_delay": _ratio(r.mean_queue_delay, other.mean_queue_delay),
                        "gpu_allocation": _ratio(r.gpu_allocation, other.gpu_allocation),
                        "tenant_mean_delay": {
                            t: _ratio(v, other.tenant_mean_delay[t]) for t, v in r.tenant_mean_delay.items()
                        },
                    }
                )
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", choices=("preemption",), help="Print only this figure.")
    parser.add_argument(
        "--preemption-limit", type=int, default=3000, help="Trace jobs the preemption figure replays."
    )
    args = parser.parse_args()
    if args.only == "preemption":
        preemption_replay(args.preemption_limit)
        return
    snapshot = big_snapshot()
    policies: tuple[Policy, ...] = ("trainyard", "fifo")
    for policy in policies:
        print(json.dumps(cycle_times(snapshot, policy)))
    print(json.dumps(eta_times(snapshot)))
    empty = Snapshot(
        snapshot.jobs,
        snapshot.tenants,
        [Node(n.name, n.capacity, n.capacity, n.gpu_type) for n in snapshot.nodes],
    )
    print(json.dumps({**cycle_times(empty, "trainyard"), "bench": "admission_cycle_empty_cluster"}))
    if (TRACES / "openb_pod_list_default.csv").exists():
        replay("gpu nodes, all 1213 (uncontended)", "openb_node_list_gpu_node.csv", 1)
        replay("gpu nodes, every 100th: 13 nodes, 56 GPUs (contended)", "openb_node_list_gpu_node.csv", 100)
        borrowing_replay()
        preemption_replay(args.preemption_limit)


if __name__ == "__main__":
    main()

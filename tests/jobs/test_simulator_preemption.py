"""Preemption in the trace simulator (jobs/core/simulator_preemption.py): the platform's planner after each
simulated cycle, under a stated checkpoint model."""

from __future__ import annotations

import json
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from jobs.core.simulator import load_nodes, load_trace, simulate
from jobs.core.simulator_preemption import PreemptionModel
from tests.conftest import SHARED_DATA
from tests.jobs.test_simulator import crafted

TRACES = SHARED_DATA / "traces"
POD_LIST = TRACES / "openb_pod_list_default.csv"
GPU_NODES = TRACES / "openb_node_list_gpu_node.csv"
needs_trace = pytest.mark.skipif(not POD_LIST.exists(), reason="shared trace data not present")


def two_tenants(tmp_path: Path, pods, tenants: dict[str, str]):
    """``crafted`` pods on one 8-GPU node, each pod given to the tenant ``tenants`` names."""
    jobs, nodes = crafted(tmp_path, pods, (64_000, 8))
    return [replace(j, tenant=tenants[j.id]) for j in jobs], nodes


def reclaimed(tmp_path: Path, model: PreemptionModel):
    # tenant-1 borrows the whole node (nominal: half each) from t=0; tenant-0 wants its half at t=1000
    jobs, nodes = two_tenants(
        tmp_path,
        [("big", 1000, 8, 0.0, 10_000.0), ("lender", 1000, 4, 1000.0, 500.0)],
        {"big": "tenant-1", "lender": "tenant-0"},
    )
    return simulate(
        jobs, nodes, policy="trainyard", tenants=2, quota_share=0.5, borrowing=True, preemption=model
    )


def test_a_preempted_job_stops_after_its_grace_loses_the_work_since_its_checkpoint_and_finishes_later(
    tmp_path: Path,
):
    result = reclaimed(tmp_path, PreemptionModel(checkpoint_interval=600.0))
    p = result.preemption
    assert p is not None and (p.preemptions, p.jobs_preempted, p.preemptions_by_tenant) == (
        1,
        1,
        {"tenant-1": 1},
    )
    # big stops at 1030 (1000 + 30 s grace): 1030 s run, checkpoint at 600, 430 s x 8 GPUs lost; it
    # restarts when the lender's job ends (1030 + 500) with 10,000 - 600 s left and ends at 10,930
    assert p.gpu_hours_lost == pytest.approx(8 * 430 / 3600)
    assert p.gpu_hours_work == pytest.approx((8 * 10_000 + 4 * 500) / 3600)
    assert p.gpu_hours_run == pytest.approx(p.gpu_hours_work + p.gpu_hours_lost)
    assert result.completed == 2
    assert result.tenant_mean_delay == {"tenant-0": 30.0, "tenant-1": 500.0}
    assert result.makespan == 10_930.0
    assert result.mean_jct == pytest.approx(((10_930 - 0) + (1530 - 1000)) / 2)


def test_without_preemption_the_lender_waits_for_the_borrower_to_finish(tmp_path: Path):
    jobs, nodes = two_tenants(
        tmp_path,
        [("big", 1000, 8, 0.0, 10_000.0), ("lender", 1000, 4, 1000.0, 500.0)],
        {"big": "tenant-1", "lender": "tenant-0"},
    )
    alone = simulate(jobs, nodes, policy="trainyard", tenants=2, quota_share=0.5, borrowing=True)
    assert alone.preemption is None
    assert alone.tenant_mean_delay == {"tenant-0": 9000.0, "tenant-1": 0.0}


def test_a_job_inside_its_minimum_runtime_is_preempted_only_once_it_is_over(tmp_path: Path):
    result = reclaimed(tmp_path, PreemptionModel(checkpoint_interval=600.0, min_runtime_seconds=2000.0))
    p = result.preemption
    assert p is not None and p.preemptions == 1
    # a cycle runs when big's 2000 s are over; the lender's job then waits out the 30 s grace
    assert result.tenant_mean_delay["tenant-0"] == 1030.0
    assert p.gpu_hours_lost == pytest.approx(8 * (2030 - 1800) / 3600)


def test_a_job_preempted_before_is_protected_twice_as_long_after_its_restart(tmp_path: Path):
    # as in `reclaimed`, big restarts at 1530 once the lender's first job is done; a second lender job
    # arrives 400 s into big's new run: past the 300 s minimum, but big was preempted once, so it is
    # protected for 600 s; a cycle runs when that ends (2130) and the job starts after the grace (2160)
    jobs, nodes = two_tenants(
        tmp_path,
        [
            ("big", 1000, 8, 0.0, 10_000.0),
            ("lender", 1000, 4, 1000.0, 500.0),
            ("again", 1000, 4, 1930.0, 100.0),
        ],
        {"big": "tenant-1", "lender": "tenant-0", "again": "tenant-0"},
    )
    model = PreemptionModel(checkpoint_interval=600.0)
    result = simulate(
        jobs, nodes, policy="trainyard", tenants=2, quota_share=0.5, borrowing=True, preemption=model
    )
    p = result.preemption
    assert p is not None and (p.preemptions, p.max_preemptions_of_a_job) == (2, 2)
    assert result.tenant_mean_delay["tenant-0"] == (30.0 + 230.0) / 2
    # the second stop comes 630 s into the new run: the checkpoint at 600 s keeps all but 30 s
    assert p.gpu_hours_lost == pytest.approx(8 * (430 + 30) / 3600)
    assert "doubled for each earlier preemption" in p.model


def test_checkpoint_aware_loses_less_than_youngest_on_a_small_trace(tmp_path: Path):
    # tenant-1 runs two 4-GPU jobs (its nominal half, then 4 borrowed); at t=1000 tenant-0 wants its
    # half back. With checkpoints every 600 s, "old" (started at 0) is 400 s past its checkpoint and
    # "young" (started at 550) 450 s: Kueue's order stops the youngest, Trainyard's the one losing less.
    jobs, nodes = two_tenants(
        tmp_path,
        [
            ("old", 1000, 4, 0.0, 5000.0),
            ("young", 1000, 4, 550.0, 5000.0),
            ("lender", 1000, 4, 1000.0, 500.0),
        ],
        {"old": "tenant-1", "young": "tenant-1", "lender": "tenant-0"},
    )
    lost = {}
    for order in ("checkpoint-aware", "youngest"):
        model = PreemptionModel(order=order, checkpoint_interval=600.0)
        result = simulate(
            jobs, nodes, policy="trainyard", tenants=2, quota_share=0.5, borrowing=True, preemption=model
        )
        assert result.preemption is not None and result.preemption.preemptions == 1
        assert result.completed == 3
        lost[order] = result.preemption.gpu_hours_lost
    # stopped 30 s later: old at 1030 s of run (430 s past 600), young at 480 s (no checkpoint yet)
    assert lost == pytest.approx({"checkpoint-aware": 4 * 430 / 3600, "youngest": 4 * 480 / 3600})
    assert lost["checkpoint-aware"] <= lost["youngest"]


def test_checkpoint_intervals_are_drawn_per_job_deterministically_within_the_stated_range():
    model = PreemptionModel()
    intervals = [model.interval(f"openb-pod-{k:04d}") for k in range(200)]
    assert intervals == [PreemptionModel().interval(f"openb-pod-{k:04d}") for k in range(200)]
    assert all(600 <= i <= 3600 for i in intervals) and len(set(intervals)) == 200
    assert PreemptionModel(checkpoint_interval=900).interval("any") == 900
    assert "uniform(600, 3600)" in model.describe() and "30 s grace" in model.describe()


@needs_trace
@pytest.mark.parametrize("order", ["checkpoint-aware", "youngest"])
def test_reclaim_on_a_contended_trace_slice_stays_within_capacity_and_quotas_and_conserves_work(order):
    jobs = load_trace(POD_LIST, limit=300, time_scale=0.1)
    nodes = load_nodes(GPU_NODES)[::100]
    result = simulate(
        jobs,
        nodes,
        policy="trainyard",
        quota_share=0.25,
        borrowing=True,
        preemption=PreemptionModel(order=order),
    )
    p = result.preemption
    assert p is not None and p.preemptions > 0
    assert result.completed == 300
    assert p.min_node_free_gpus >= 0
    # four tenants of nominal a quarter each: together never more than the cohort's nominal (the cluster)
    assert p.peak_cohort_gpus <= 4 * int(sum(n.capacity.gpus for n in nodes) * 0.25)
    assert p.gpu_hours_run == pytest.approx(p.gpu_hours_work + p.gpu_hours_lost)
    assert p.gpu_hours_lost > 0
    assert set(result.tenant_p95_delay) == set(result.tenant_mean_delay)


@needs_trace
def test_preemption_off_replays_exactly_as_before_preemption_existed():
    jobs = load_trace(POD_LIST, limit=300, time_scale=0.1)
    nodes = load_nodes(GPU_NODES)[::100]
    result = simulate(jobs, nodes, policy="trainyard", quota_share=0.25, borrowing=True, preemption=None)
    assert result.preemption is None
    # figures of this slice recorded from the simulator before preemption was added
    assert (result.mean_queue_delay, result.mean_jct, result.cycles, result.p95_queue_delay) == (
        7451.974666666671,
        528217.3880000006,
        539,
        30780.900000000023,
    )
    assert result.gpu_allocation == 0.21614395444558582
    assert result.tenant_mean_delay["tenant-3"] == 18506.58846153847


def simulate_json(*args: str, **options) -> list[dict]:
    out = StringIO()
    call_command(
        "simulate", "--json", *args, trace=str(POD_LIST), nodes=str(GPU_NODES), limit=300, node_sample=100,
        time_scale=0.1, quota_share=0.25, policy="trainyard", stdout=out, **options,
    )  # fmt: skip
    return [json.loads(line) for line in out.getvalue().splitlines()]


@needs_trace
def test_simulate_command_with_preemption_off_prints_what_it_printed_before():
    assert simulate_json("--borrowing=on", "--preemption=off") == simulate_json("--borrowing=on")
    (line,) = simulate_json("--borrowing=on")
    assert line["preemption"] is None and line["mean_queue_delay"] == 7451.974666666671


@needs_trace
def test_simulate_command_with_preemption_states_the_model_and_the_losses():
    (line,) = simulate_json("--borrowing=on", "--preemption=youngest", "--grace=60", "--eta")
    p = line["preemption"]
    assert (p["order"], p["grace_seconds"], p["min_runtime_seconds"]) == ("youngest", 60.0, 300.0)
    assert p["checkpoint_interval"] is None and p["interval_range"] == [600.0, 3600.0]
    assert "60 s grace" in p["model"] and "uniform(600, 3600)" in p["model"]
    assert p["preemptions"] > 0 and p["gpu_hours_lost"] > 0
    assert set(line["tenant_p95_delay"]) == set(line["tenant_mean_delay"])
    assert line["eta"] is not None


@needs_trace
@pytest.mark.parametrize(
    ("args", "policy", "message"),
    [
        (["--preemption=youngest"], "trainyard", "needs --borrowing on"),
        (["--preemption=youngest", "--borrowing=on"], "both", "needs --policy trainyard"),
        (["--preemption=youngest", "--borrowing=on", "--tuning=on"], "trainyard", "not simulated together"),
    ],
)
def test_simulate_command_refuses_preemption_it_does_not_model(args, policy, message):
    with pytest.raises(CommandError, match=message):
        call_command(
            "simulate", *args, trace=str(POD_LIST), nodes=str(GPU_NODES), limit=10, policy=policy,
            stdout=StringIO(),
        )  # fmt: skip

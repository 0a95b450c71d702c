"""The trace-driven simulator and the ``simulate`` management command, on slices of the real trace."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from jobs.simulator import load_nodes, load_trace, ratios, simulate, tenant_of
from tests.conftest import SHARED_DATA

TRACES = SHARED_DATA / "traces"
POD_LIST = TRACES / "openb_pod_list_default.csv"
GPU_NODES = TRACES / "openb_node_list_gpu_node.csv"

pytestmark = pytest.mark.skipif(not POD_LIST.exists(), reason="shared trace data not present")


def test_trace_loading_rounds_fractional_gpus_up_and_skips_rows_without_run_time():
    jobs = load_trace(POD_LIST, limit=2000)
    assert len(jobs) == 2000
    assert all(j.duration > 0 for j in jobs)
    assert {j.gpus for j in jobs} <= {0, 1, 2, 4, 8}
    pod_0001 = next(j for j in jobs if j.id == "openb-pod-0001")
    assert pod_0001.gpus == 1
    assert pod_0001.duration == 12902960 - 427061
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)


def test_tenants_are_assigned_deterministically_from_the_task_name():
    assert tenant_of("openb-pod-0001", 4) == tenant_of("openb-pod-0001", 4)
    assert {tenant_of(f"openb-pod-{k:04d}", 4) for k in range(100)} == {f"tenant-{k}" for k in range(4)}


def test_both_policies_complete_every_job_of_a_trace_slice_on_the_full_gpu_cluster():
    jobs, nodes = load_trace(POD_LIST, limit=300), load_nodes(GPU_NODES)
    for policy in ("trainyard", "fifo"):
        result = simulate(jobs, nodes, policy=policy)
        assert result.completed == len(jobs) == 300
        assert result.dropped_never_fit == 0


def test_trainyard_queues_less_than_fifo_on_a_contended_trace_slice():
    jobs = load_trace(POD_LIST, limit=300, time_scale=0.1)
    nodes = load_nodes(GPU_NODES)[::100]
    ty = simulate(jobs, nodes, policy="trainyard")
    fifo = simulate(jobs, nodes, policy="fifo")
    assert ty.completed == fifo.completed == 300
    assert fifo.mean_queue_delay > 0
    assert ty.mean_queue_delay <= fifo.mean_queue_delay
    assert ty.mean_jct <= fifo.mean_jct
    assert sum(ty.tenant_gpu_share.values()) == pytest.approx(1.0)
    assert ratios(ty, fifo)["mean_queue_delay"] == pytest.approx(ty.mean_queue_delay / fifo.mean_queue_delay)


def test_simulate_command_prints_both_policies_side_by_side():
    out = StringIO()
    call_command(
        "simulate", trace=str(POD_LIST), nodes=str(GPU_NODES), limit=200, node_sample=100, stdout=out
    )
    text = out.getvalue()
    assert "trainyard" in text and "fifo" in text
    assert "mean queueing delay (s)" in text and "ratio mean_queue_delay" in text


def test_simulate_command_json_prints_one_line_per_policy_and_the_ratios():
    out = StringIO()
    call_command("simulate", "--json", trace=str(POD_LIST), nodes=str(GPU_NODES), limit=200, stdout=out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line.get("policy") for line in lines[:2]] == ["trainyard", "fifo"]
    assert lines[2]["ratio"] == "trainyard/fifo"
    assert set(lines[2]) >= {"mean_queue_delay", "p95_queue_delay", "mean_jct", "gpu_allocation"}

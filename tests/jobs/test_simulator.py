"""The trace-driven simulator and the ``simulate`` management command, on slices of the real trace."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from jobs.core.admission import Node
from jobs.core.simulator import TraceJob, load_nodes, load_trace, ratios, simulate, tenant_of
from jobs.core.simulator_tuning import SpeedModel
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


# --- the tuner in the replay (jobs/core/simulator_tuning.py: a stated speed model, the platform's policy) ---

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def crafted(
    tmp_path: Path, pods: Sequence[tuple[str, int, int, float, float]], node: tuple[int, int]
) -> tuple[list[TraceJob], list[Node]]:
    """A pod list (name, cpu_milli, gpus, arrival, run time) and a one-node list (cpu_milli, gpus)."""
    pod_csv, node_csv = tmp_path / "pods.csv", tmp_path / "nodes.csv"
    rows = [f"{n},{cpu},4096,{g},{1000 * g},,LS,Succeeded,{t},{t + d},{t}" for n, cpu, g, t, d in pods]
    pod_csv.write_text("\n".join([POD_HEADER, *rows]) + "\n")
    node_csv.write_text(f"sn,cpu_milli,memory_mib,gpu,model\nnode-0,{node[0]},262144,{node[1]},G2\n")
    return load_trace(pod_csv, tenants=1), load_nodes(node_csv)


def test_tuning_off_replays_exactly_as_before_the_tuner_existed():
    jobs = load_trace(POD_LIST, limit=300, time_scale=0.1)
    nodes = load_nodes(GPU_NODES)[::100]
    ty = simulate(jobs, nodes, policy="trainyard", quota_share=0.5)
    fifo = simulate(jobs, nodes, policy="fifo", quota_share=0.5)
    assert ty.tuning is None and fifo.tuning is None
    # figures of this slice recorded from the simulator before tuning was added
    assert (ty.mean_queue_delay, ty.mean_jct, ty.cycles) == pytest.approx(
        (4616.394666666668, 525381.808, 534)
    )
    assert (fifo.mean_queue_delay, fifo.mean_jct, fifo.cycles) == pytest.approx(
        (38928.103333333325, 559693.5166666671, 536)
    )
    assert ty.gpu_allocation == pytest.approx(0.21614395444558582)


def test_tuning_doubles_a_cpu_starved_jobs_cpu_and_its_jct_follows_the_model(tmp_path: Path):
    # 1 GPU with 2000m of the 8000m it can use: speed 0.25, work 10000 x 0.25 = 2500 full-speed seconds.
    # Look at 120 s (30 s of work done), cpu_up to 4000m (the range's top), 60 s restart, then speed 0.5:
    # 120 + 60 + (2500 - 30) / 0.5 = 5120 s.
    jobs, nodes = crafted(tmp_path, [("p0", 2000, 1, 0, 10000)], node=(64000, 8))
    off = simulate(jobs, nodes, policy="trainyard")
    on = simulate(jobs, nodes, policy="trainyard", tuning=SpeedModel())
    assert off.mean_jct == pytest.approx(10000)
    assert on.mean_jct == pytest.approx(5120)
    assert on.tuning is not None
    assert (on.tuning.scales, on.tuning.keeps, on.tuning.reverts) == (1, 1, 0)
    assert on.tuning.mean_start_speed == pytest.approx(0.25)
    assert on.tuning.mean_final_speed == pytest.approx(0.5)
    assert on.tuning.max_cpu_over_range_top == pytest.approx(1.0)


def test_tuning_takes_no_cpu_the_tenants_quota_does_not_leave_free(tmp_path: Path):
    pods = [(f"p{k}", 2000, 1, 0, 10000) for k in range(4)]
    jobs, nodes = crafted(tmp_path, pods, node=(16000, 8))
    on = simulate(jobs, nodes, policy="trainyard", tenants=1, quota_share=0.5, tuning=SpeedModel())
    assert on.tuning is not None and on.tuning.tunable_jobs == 4
    assert on.tuning.scales == 0 and on.tuning.holds > 0  # the 4 jobs hold the whole 8000m quota
    assert on.mean_jct == pytest.approx(10000)
    assert on.tuning.peak_tenant_cpu_over_quota <= 1.0


def test_tuning_takes_no_cpu_the_node_does_not_have(tmp_path: Path):
    jobs, nodes = crafted(tmp_path, [("a", 2000, 1, 0, 10000), ("b", 2000, 1, 0, 10000)], node=(5000, 8))
    on = simulate(jobs, nodes, policy="trainyard", tenants=1, tuning=SpeedModel())
    assert on.tuning is not None
    assert on.tuning.scales == 1  # the first takes the node's last 1000m (2000 -> 3000), the other holds
    assert on.tuning.min_node_free_cpu_millis == 0


def test_tuning_on_a_contended_trace_slice_stays_within_quota_nodes_and_ranges_and_cuts_jct():
    jobs = load_trace(POD_LIST, limit=300, time_scale=0.1)
    nodes = load_nodes(GPU_NODES)[::100]
    for policy in ("trainyard", "fifo"):
        off = simulate(jobs, nodes, policy=policy, quota_share=0.5)
        on = simulate(jobs, nodes, policy=policy, quota_share=0.5, tuning=SpeedModel())
        assert on.tuning is not None and on.tuning.scales > 0 and on.tuning.reverts == 0
        assert on.completed == off.completed == 300
        assert on.tuning.peak_tenant_cpu_over_quota <= 1.0
        assert on.tuning.min_node_free_cpu_millis >= 0
        assert on.tuning.max_cpu_over_range_top <= 1.0
        assert on.tuning.mean_final_speed > on.tuning.mean_start_speed
        assert on.mean_jct < off.mean_jct


def test_a_model_where_every_gpu_is_fed_changes_nothing():
    jobs = load_trace(POD_LIST, limit=300, time_scale=0.1)
    nodes = load_nodes(GPU_NODES)[::100]
    off = simulate(jobs, nodes, policy="trainyard")
    on = simulate(jobs, nodes, policy="trainyard", tuning=SpeedModel(cpu_per_gpu_millis=100))
    assert on.tuning is not None and on.tuning.scales == 0
    assert (on.mean_jct, on.mean_queue_delay) == (off.mean_jct, off.mean_queue_delay)


def test_simulate_command_with_tuning_states_the_model_and_prints_on_off_ratios():
    out = StringIO()
    call_command(
        "simulate",
        trace=str(POD_LIST),
        nodes=str(GPU_NODES),
        limit=200,
        node_sample=100,
        policy="trainyard",
        tuning="on",
        stdout=out,
    )
    text = out.getvalue()
    assert "speed model (a model, not a measurement" in text
    assert "trainyard+tuning" in text and "tuning on/off trainyard mean_jct" in text
    assert "tuning on/off trainyard mean_queue_delay" in text


def test_simulate_command_json_with_tuning_adds_the_model_the_tuned_runs_and_their_ratios():
    out = StringIO()
    call_command(
        "simulate", "--json", "--tuning=on", trace=str(POD_LIST), nodes=str(GPU_NODES), limit=200, stdout=out
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[0]["speed_model"]["cpu_per_gpu_millis"] == 8000
    assert [(line["policy"], line["tuning"] is not None) for line in lines[1:5]] == [
        ("trainyard", False),
        ("fifo", False),
        ("trainyard", True),
        ("fifo", True),
    ]
    assert lines[5]["ratio"] == "trainyard/fifo"
    tuned = [line for line in lines if line.get("ratio") == "tuning on/off"]
    assert [line["policy"] for line in tuned] == ["trainyard", "fifo"]
    assert set(tuned[0]) >= {"mean_jct", "mean_queue_delay", "p95_queue_delay"}


def test_simulate_command_scores_the_etas_waiting_jobs_were_given():
    out = StringIO()
    call_command(
        "simulate", "--eta", trace=str(POD_LIST), nodes=str(GPU_NODES), limit=300, node_sample=100,
        time_scale=0.1, policy="trainyard", stdout=out,
    )  # fmt: skip
    text = out.getvalue()
    assert "ETA: p50 abs error (s)" in text and "ETA: p90 abs error (s)" in text


def test_etas_are_exact_when_one_job_waits_for_another_of_known_length(tmp_path: Path):
    jobs, nodes = crafted(
        tmp_path, [("first", 1000, 8, 0.0, 100.0), ("second", 1000, 8, 10.0, 50.0)], (8000, 8)
    )
    result = simulate(jobs, nodes, policy="trainyard", eta=True)
    assert result.eta is not None
    assert (result.eta.estimated, result.eta.unknown, result.eta.p50_abs_error) == (1, 0, 0.0)
    assert result.eta.p50_wait == 90.0
    blind = simulate(jobs, nodes, policy="trainyard", eta=True, estimates=False).eta
    assert blind is not None and (blind.estimated, blind.unknown) == (0, 1)


# --- quota borrowing in the replay ----------------------------------------------------------------------------


def test_borrowing_lets_a_lone_tenant_use_the_idle_cluster_that_a_hard_quota_leaves_empty(tmp_path: Path):
    # Two 4-GPU jobs of tenant-0 on one 8-GPU node; each of the two tenants' nominal quota is half the node,
    # and tenant-1 submits nothing, so with borrowing it lends tenant-0 its 4 GPUs.
    jobs, nodes = crafted(tmp_path, [("a", 1000, 4, 0.0, 100.0), ("b", 1000, 4, 0.0, 100.0)], (64_000, 8))
    jobs = [replace(j, tenant="tenant-0") for j in jobs]
    hard = simulate(jobs, nodes, policy="trainyard", tenants=2, quota_share=0.5)
    lent = simulate(jobs, nodes, policy="trainyard", tenants=2, quota_share=0.5, borrowing=True)
    assert (hard.borrowing, lent.borrowing) == (False, True)
    assert hard.mean_queue_delay == 50.0 and hard.makespan == 200.0
    assert lent.mean_queue_delay == 0.0 and lent.makespan == 100.0
    assert lent.gpu_allocation == 2 * hard.gpu_allocation


def test_simulate_command_with_borrowing_on_labels_its_runs():
    out = StringIO()
    call_command(
        "simulate", "--json", "--borrowing", "on", trace=str(POD_LIST), nodes=str(GPU_NODES), limit=100,
        node_sample=100, quota_share=0.25, policy="trainyard", stdout=out,
    )  # fmt: skip
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(line["policy"], line["borrowing"]) for line in lines] == [("trainyard", True)]


def test_simulate_command_with_a_fair_share_half_life_labels_its_runs_and_refuses_a_negative_one():
    out = StringIO()
    call_command(
        "simulate", "--json", "--fair-share-half-life", "3600", trace=str(POD_LIST), nodes=str(GPU_NODES),
        limit=100, node_sample=100, policy="trainyard", stdout=out,
    )  # fmt: skip
    (line,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert (line["policy"], line["fair_share_half_life"]) == ("trainyard", 3600.0)
    assert set(line["tenant_mean_delay"]) == {f"tenant-{k}" for k in range(4)}
    table = StringIO()
    call_command(
        "simulate", "--fair-share-half-life", "3600", trace=str(POD_LIST), nodes=str(GPU_NODES), limit=50,
        node_sample=100, stdout=table,
    )  # fmt: skip
    assert "trainyard+fs3600" in table.getvalue() and "fifo+fs" not in table.getvalue()  # FIFO has no shares
    with pytest.raises(CommandError, match="must not be negative"):
        call_command("simulate", "--fair-share-half-life", "-1", trace=str(POD_LIST), nodes=str(GPU_NODES))

"""The admission cycle: gang placement, quotas, DRF, priority, backfill, reasons and safety properties."""

from __future__ import annotations

import heapq
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.core.admission import (
    Decision,
    Node,
    QueuedJob,
    Resources,
    RunningJob,
    Snapshot,
    TenantState,
    admit,
)

BIG = Resources(10_000, 10**9, 10**9)


GKE_GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"


def node(
    name: str,
    gpus: int,
    *,
    free_gpus: int | None = None,
    gpu_type: str | None = None,
    taints: tuple[str, ...] = (),
    cpu: int = 64_000,
) -> Node:
    cap = Resources(gpus, cpu, 262_144)
    free = cap if free_gpus is None else Resources(free_gpus, cpu, 262_144)
    return Node(name, free, cap, gpu_type, taints)


def tenant(
    name: str, *, weight: float = 1.0, quota: Resources = BIG, max_running: int = 100, **kw
) -> TenantState:
    return TenantState(name, weight, quota, max_running, kw.get("used", Resources()), kw.get("running", 0))


def job(jid: str, tenant: str = "a", *, gpus: int = 1, learners: int = 1, **kw) -> QueuedJob:
    return QueuedJob(
        id=jid,
        tenant=tenant,
        priority=kw.get("priority", 0),
        submitted_at=kw.get("at", 0.0),
        learners=learners,
        gpus=gpus,
        cpu_millis=kw.get("cpu", 1000),
        memory_mib=kw.get("mem", 1024),
        gpu_type=kw.get("gpu_type"),
        expected_duration=kw.get("duration"),
        tolerated=frozenset(kw.get("tolerated", ())),
    )


def reasons(decision: Decision) -> dict[str, str]:
    return {p.job_id: p.reason for p in decision.pending}


def admitted(decision: Decision) -> dict[str, list[str]]:
    return {a.job_id: a.placements for a in decision.admitted}


def test_gang_of_three_is_not_placed_when_only_two_learners_fit():
    snap = Snapshot(
        [job("g", gpus=4, learners=3)],
        [tenant("a")],
        [node("n1", 8, free_gpus=4), node("n2", 8, free_gpus=4)],
    )
    d = admit(snap)
    assert d.admitted == []
    assert reasons(d)["g"].startswith("gang of 3 learners does not fit at once")


def test_gang_learners_may_share_a_node_and_all_start_together():
    d = admit(Snapshot([job("g", gpus=2, learners=3)], [tenant("a")], [node("n1", 8), node("n2", 2)]))
    assert sorted(admitted(d)["g"]) == ["n1", "n1", "n2"] or admitted(d)["g"] == ["n1", "n1", "n1"]
    assert len(admitted(d)["g"]) == 3


def test_best_fit_prefers_the_node_with_fewest_free_gpus():
    d = admit(Snapshot([job("j", gpus=2)], [tenant("a")], [node("big", 8), node("small", 2)]))
    assert admitted(d) == {"j": ["small"]}


def test_tenant_gpu_quota_is_never_exceeded():
    a = tenant("a", quota=Resources(8, 10**6, 10**7), used=Resources(6, 0, 0), running=1)
    d = admit(Snapshot([job("j", gpus=4)], [a], [node("n1", 8)]))
    assert d.admitted == []
    assert reasons(d)["j"] == "tenant GPU quota 6/8 in use (needs 4)"


def test_running_job_limit_stops_the_tenant():
    a = tenant("a", max_running=3, running=3)
    d = admit(Snapshot([job("j")], [a], [node("n1", 8)]))
    assert reasons(d)["j"] == "tenant running-job limit 3/3 reached"


def test_running_job_limit_counts_admissions_of_this_cycle():
    a = tenant("a", max_running=2, running=1)
    d = admit(Snapshot([job("j1", at=1), job("j2", at=2)], [a], [node("n1", 8)]))
    assert list(admitted(d)) == ["j1"]
    assert reasons(d)["j2"] == "tenant running-job limit 2/2 reached"


def test_job_larger_than_its_whole_quota_says_it_can_never_start_and_does_not_block_its_tenant():
    a = tenant("a", quota=Resources(4, 10**6, 10**7))
    d = admit(Snapshot([job("huge", gpus=8, at=1), job("ok", gpus=1, at=2)], [a], [node("n1", 8)]))
    assert "can never start" in reasons(d)["huge"]
    assert "ok" in admitted(d)


def test_drf_admits_the_tenant_with_the_lower_dominant_share_first():
    cluster = [node("n1", 8, free_gpus=4), node("n2", 8, free_gpus=0)]
    a = tenant("a", used=Resources(4, 0, 0), running=1)
    b = tenant("b", used=Resources(8, 0, 0), running=1)
    jobs = [job("b1", "b", gpus=4, at=1), job("a1", "a", gpus=4, at=5)]
    d = admit(Snapshot(jobs, [a, b], cluster))
    assert list(admitted(d)) == ["a1"]


def test_dominant_share_uses_the_scarcest_resource():
    cluster = [node("n1", 8, free_gpus=4), node("n2", 8, free_gpus=0)]
    a = tenant("a", used=Resources(4, 0, 0), running=1)
    b = tenant("b", used=Resources(0, 128_000 * 3 // 4, 0), running=1)
    d = admit(Snapshot([job("a1", "a", gpus=4, at=1), job("b1", "b", gpus=4, at=5)], [a, b], cluster))
    assert list(admitted(d)) == ["a1"]


def test_weights_let_a_heavier_tenant_go_first():
    cluster = [node("n1", 8, free_gpus=4), node("n2", 8, free_gpus=0)]
    a = tenant("a", used=Resources(4, 0, 0), running=1)
    b = tenant("b", weight=4.0, used=Resources(8, 0, 0), running=1)
    d = admit(Snapshot([job("a1", "a", gpus=4, at=1), job("b1", "b", gpus=4, at=5)], [a, b], cluster))
    assert list(admitted(d)) == ["b1"]


def test_drf_recomputes_shares_after_each_admission():
    jobs = [job(f"a{k}", "a", at=k) for k in range(4)] + [job(f"b{k}", "b", at=10 + k) for k in range(4)]
    d = admit(Snapshot(jobs, [tenant("a"), tenant("b")], [node("n1", 4)]))
    assert sorted(admitted(d)) == ["a0", "a1", "b0", "b1"]


def test_priority_then_age_then_id_within_a_tenant():
    jobs = [
        job("old-low", priority=0, at=1),
        job("new-high", priority=5, at=9),
        job("mid-b", priority=1, at=3),
        job("mid-a", priority=1, at=3),
    ]
    d = admit(Snapshot(jobs, [tenant("a")], [node("n1", 2)]))
    assert list(admitted(d)) == ["new-high", "mid-a"]
    assert [p.job_id for p in d.pending] == ["mid-b", "old-low"]


def _backfill_cluster(extra: list[QueuedJob]) -> Snapshot:
    """n1 has 4 of 8 GPUs free until job r ends at t=100; the head needs the whole of n1."""
    running = [RunningJob("r", 100.0, ("n1",), Resources(4, 0, 0))]
    jobs = [job("head", gpus=8, at=1), *extra]
    nodes = [node("n1", 8, free_gpus=4), node("n2", 2)]
    return Snapshot(jobs, [tenant("a"), tenant("b")], nodes, now=0.0, running=running)


def test_backfill_lets_a_short_job_through_without_delaying_the_head():
    alone = admit(_backfill_cluster([]))
    d = admit(_backfill_cluster([job("short", "b", gpus=4, at=2, duration=50)]))
    assert admitted(d) == {"short": ["n1"]}
    assert alone.reservation is not None and alone.reservation.start_at == 100.0
    assert d.reservation == alone.reservation
    assert "resources reserved for it (from 1970-01-01 00:01 UTC)" in reasons(d)["head"]


def test_backfill_lets_a_long_job_use_resources_the_reservation_does_not_need():
    d = admit(_backfill_cluster([job("elsewhere", "b", gpus=2, at=2)]))
    assert admitted(d) == {"elsewhere": ["n2"]}


def test_backfill_refuses_a_job_that_would_take_the_reserved_resources():
    too_long = job("too-long", "b", gpus=4, at=2, duration=500)
    unknown = job("unknown", "b", gpus=4, at=3)
    d = admit(_backfill_cluster([too_long, unknown]))
    assert d.admitted == []
    reserved = "waiting: the free resources are reserved for a job ahead of it in the queue"
    assert reasons(d)["too-long"] == reserved and reasons(d)["unknown"] == reserved
    assert all(" head" not in reasons(d)[j] for j in ("too-long", "unknown")), "another tenant's job id"


def test_reservation_without_end_times_holds_the_head_nodes():
    snap = replace(_backfill_cluster([job("small", "b", gpus=4, at=2, duration=1)]), running=())
    d = admit(snap)
    assert d.admitted == []
    assert d.reservation is not None and d.reservation.start_at is None
    assert "start time unknown" in reasons(d)["head"]


def test_quota_blocked_job_of_one_tenant_does_not_block_another_tenant():
    a = tenant("a", quota=Resources(8, 10**6, 10**7), used=Resources(8, 0, 0), running=1)
    jobs = [
        job("a1", "a", gpus=2, priority=9, at=0),
        job("a2", "a", gpus=1, at=1),
        job("b1", "b", gpus=2, at=5),
    ]
    d = admit(Snapshot(jobs, [a, tenant("b")], [node("n1", 8)]))
    assert list(admitted(d)) == ["b1"]
    assert reasons(d)["a1"] == "tenant GPU quota 8/8 in use (needs 2)"
    assert reasons(d)["a2"] == "waiting behind job a1 of the same tenant (tenant quota)"


def test_gpu_type_demand_only_matches_nodes_of_that_type():
    nodes = [node("t4-1", 4, gpu_type="t4"), node("a100-1", 4, free_gpus=2, gpu_type="a100")]
    jobs = [
        job("want-a100", gpus=2, gpu_type="a100", at=1),
        job("want-a100-again", gpus=2, gpu_type="a100", at=2),
        job("want-v100", gpus=1, gpu_type="v100", at=3),
        job("any", gpus=4, at=4),
    ]
    d = admit(Snapshot(jobs, [tenant("a")], nodes))
    assert admitted(d) == {"want-a100": ["a100-1"], "any": ["t4-1"]}
    r = reasons(d)
    assert r["want-a100-again"].startswith("no node has 2 free GPUs of type a100 (largest free: 0)")
    assert r["want-v100"].startswith("can never fit")


def test_job_larger_than_the_cluster_gets_a_clear_reason_and_blocks_nobody():
    jobs = [job("huge", gpus=16, at=0), job("small", gpus=1, at=1)]
    for policy in ("trainyard", "fifo"):
        d = admit(Snapshot(jobs, [tenant("a")], [node("n1", 8)]), policy=policy)
        assert reasons(d)["huge"].startswith("can never fit: 1 learner(s) x 16 GPUs")
        assert (
            "one learner needs 16 GPUs, the largest of the cluster's nodes has 8 GPUs" in reasons(d)["huge"]
        )
        assert "small" in admitted(d)


def test_never_fit_says_the_node_is_the_limit_when_one_learner_is_larger_than_every_node():
    nodes = [
        node("a100-1", 4, gpu_type="A100"),
        node("a100-2", 4, gpu_type="A100"),
        node("t4", 8, gpu_type="T4"),
    ]
    d = admit(Snapshot([job("wide", gpus=8, learners=2, gpu_type="A100")], [tenant("a")], nodes))
    assert reasons(d)["wide"] == (
        "can never fit: 2 learner(s) x 8 GPUs of type A100, 1000m CPU, 1024 MiB; "
        "one learner needs 8 GPUs, the largest of the cluster's A100 nodes has 4 GPUs"
    )


def test_never_fit_says_the_total_is_the_limit_when_each_learner_fits_but_the_gang_does_not():
    nodes = [
        node("a100-1", 8, gpu_type="A100"),
        node("a100-2", 8, gpu_type="A100"),
        node("t4", 64, gpu_type="T4"),
    ]
    d = admit(Snapshot([job("gang", gpus=8, learners=4, gpu_type="A100")], [tenant("a")], nodes))
    assert reasons(d)["gang"] == (
        "can never fit: 4 learner(s) x 8 GPUs of type A100, 1000m CPU, 1024 MiB; "
        "together they need 32 GPUs, the cluster's A100 nodes have 16 GPUs in total"
    )


def test_never_fit_counts_learners_per_node_when_the_total_would_hold_the_gang():
    nodes = [node(f"n{k}", 12) for k in range(3)]
    d = admit(Snapshot([job("gang", gpus=8, learners=4)], [tenant("a")], nodes))
    assert reasons(d)["gang"].endswith("; the cluster's nodes hold at most 3 of them at once")


def test_never_fit_names_a_type_no_node_has():
    d = admit(Snapshot([job("v", gpus=1, gpu_type="V100")], [tenant("a")], [node("n", 8, gpu_type="A100")]))
    assert reasons(d)["v"].endswith("; the cluster has no V100 nodes")


def test_pending_positions_run_from_one_to_n_in_queue_order():
    jobs = [job(f"j{k}", gpus=8, at=k) for k in range(5)]
    d = admit(Snapshot(jobs, [tenant("a")], [node("n1", 8)]))
    assert [p.position for p in d.pending] == [1, 2, 3, 4]
    assert [p.job_id for p in d.pending] == ["j1", "j2", "j3", "j4"]


def test_same_snapshot_gives_the_same_decision_whatever_the_input_order():
    jobs = [job(f"j{k}", "ab"[k % 2], gpus=1 + k % 3, at=k % 4) for k in range(12)]
    nodes = [node(f"n{k}", 4, free_gpus=k % 5) for k in range(5)]
    snap = Snapshot(jobs, [tenant("a"), tenant("b")], nodes)
    first = admit(snap)
    assert admit(snap) == first
    assert admit(Snapshot(jobs[::-1], [tenant("b"), tenant("a")], nodes[::-1])) == first


def test_fifo_blocks_everything_behind_a_blocked_head():
    jobs = [job("head", gpus=8, at=0), job("small", "b", gpus=1, at=1)]
    d = admit(Snapshot(jobs, [tenant("a"), tenant("b")], [node("n1", 8, free_gpus=4)]), policy="fifo")
    assert d.admitted == []
    assert reasons(d)["small"] == "waiting behind the head of the FIFO queue (head-of-line)"


# ---- taints ----


def test_a_node_with_a_taint_the_job_does_not_tolerate_is_no_candidate():
    nodes = [node("gpu-0", 4, taints=(GKE_GPU_TAINT,)), node("cpu-0", 0, cpu=4000)]
    jobs = [job("cpu", gpus=0, cpu=2000, at=1), job("too-big", gpus=0, cpu=8000, at=2)]
    d = admit(Snapshot(jobs, [tenant("a")], nodes))
    assert admitted(d) == {"cpu": ["cpu-0"]}
    assert reasons(d)["too-big"] == (
        "can never fit: 1 learner(s) x 0 GPUs, 8000m CPU, 1024 MiB; one learner needs 8000m CPU, "
        "the largest of the cluster's nodes has 4000m CPU; "
        f"larger nodes have taints the job does not tolerate ({GKE_GPU_TAINT})"
    )


def test_a_gpu_job_that_tolerates_the_gpu_taint_is_placed_on_the_tainted_node():
    nodes = [node("gpu-0", 4, taints=(GKE_GPU_TAINT,)), node("cpu-0", 0)]
    jobs = [job("gpu", gpus=2, learners=2, tolerated={GKE_GPU_TAINT})]
    d = admit(Snapshot(jobs, [tenant("a")], nodes))
    assert admitted(d) == {"gpu": ["gpu-0", "gpu-0"]}


def test_a_cpu_job_goes_to_an_untainted_node_even_when_a_tainted_one_has_more_room():
    nodes = [
        node("big-gpu", 8, taints=(GKE_GPU_TAINT,), cpu=256_000),
        node("small-cpu", 0, cpu=4000),
    ]
    d = admit(Snapshot([job("cpu", gpus=0, cpu=1000, learners=3)], [tenant("a")], nodes))
    assert admitted(d) == {"cpu": ["small-cpu"] * 3}


def test_a_cpu_job_prefers_a_cpu_node_to_an_untainted_gpu_node_with_free_gpus():
    nodes = [node("gpu-0", 4, cpu=256_000), node("cpu-0", 0, cpu=8000)]
    d = admit(Snapshot([job("cpu", gpus=0, cpu=4000)], [tenant("a")], nodes))
    assert admitted(d) == {"cpu": ["cpu-0"]}


def test_a_job_kept_off_every_node_by_taints_says_so_and_blocks_nobody():
    nodes = [node("gpu-0", 4, taints=(GKE_GPU_TAINT, "dedicated=ml:NoExecute"))]
    jobs = [
        job("cpu", gpus=0, at=1),
        job("half", gpus=1, at=2, tolerated={GKE_GPU_TAINT}),
        job("full", gpus=1, at=3, tolerated={GKE_GPU_TAINT, "dedicated=ml:NoExecute"}),
    ]
    for policy in ("trainyard", "fifo"):
        d = admit(Snapshot(jobs, [tenant("a")], nodes), policy=policy)
        assert admitted(d) == {"full": ["gpu-0"]}
        r = reasons(d)
        assert r["cpu"] == (
            "can never fit: no node without taints the job does not tolerate "
            f"(dedicated=ml:NoExecute, {GKE_GPU_TAINT})"
        )
        assert r["half"] == (
            "can never fit: no node without taints the job does not tolerate (dedicated=ml:NoExecute)"
        )


def test_a_job_waiting_for_room_says_when_tainted_nodes_have_room_it_cannot_use():
    busy_cpu_node = replace(node("cpu-0", 0, cpu=4000), free=Resources(0, 1000, 262_144))
    nodes = [node("gpu-0", 4, taints=(GKE_GPU_TAINT,)), busy_cpu_node]
    d = admit(Snapshot([job("cpu", gpus=0, cpu=2000)], [tenant("a")], nodes))
    assert d.admitted == []
    assert reasons(d)["cpu"].startswith(
        "no node with 0 free GPUs also has 2000m CPU and 1024 MiB free among nodes without taints the job "
        f"does not tolerate ({GKE_GPU_TAINT} keep it off the rest); resources reserved for it"
    )
    assert d.reservation is not None and d.reservation.placements == ["cpu-0"]


def test_toleration_of_taints_no_node_has_changes_nothing():
    nodes = [node("gpu-0", 4, taints=(GKE_GPU_TAINT,)), node("gpu-1", 4)]
    plain = admit(Snapshot([job("j", gpus=4)], [tenant("a")], nodes))
    extra = admit(Snapshot([job("j", gpus=4, tolerated={"other=x:NoSchedule"})], [tenant("a")], nodes))
    assert admitted(plain) == admitted(extra) == {"j": ["gpu-1"]}


# ---- properties on random snapshots ----

GPU_TYPES = st.sampled_from([None, "a", "b"])
TAINTS = st.sampled_from([GKE_GPU_TAINT, "dedicated=ml:NoSchedule"])


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    nodes = []
    for k in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        cap = Resources(
            gpus, draw(st.sampled_from([4000, 16000, 64000])), draw(st.sampled_from([8192, 65536]))
        )
        free = Resources(*(draw(st.integers(0, c)) for c in (cap.gpus, cap.cpu_millis, cap.memory_mib)))
        taints = tuple(draw(st.lists(TAINTS, max_size=2, unique=True)))
        nodes.append(Node(f"n{k}", free, cap, draw(GPU_TYPES) if gpus else None, taints))
    tenants = []
    for k in range(draw(st.integers(1, 4))):
        quota = Resources(
            draw(st.integers(0, 16)), draw(st.integers(0, 100_000)), draw(st.integers(0, 200_000))
        )
        used = Resources(*(draw(st.integers(0, q)) for q in (quota.gpus, quota.cpu_millis, quota.memory_mib)))
        limit = draw(st.integers(1, 6))
        tenants.append(
            TenantState(
                f"t{k}",
                draw(st.sampled_from([0.5, 1.0, 2.0])),
                quota,
                limit,
                used,
                draw(st.integers(0, limit)),
            )
        )
    jobs = [
        QueuedJob(
            f"j{k}",
            f"t{draw(st.integers(0, len(tenants) - 1))}",
            draw(st.integers(0, 2)),
            float(draw(st.integers(0, 10))),
            draw(st.integers(1, 4)),
            draw(st.sampled_from([0, 1, 2, 4, 8])),
            draw(st.sampled_from([500, 2000, 8000])),
            draw(st.sampled_from([512, 4096, 16384])),
            draw(GPU_TYPES),
            draw(st.one_of(st.none(), st.floats(1, 100))),
            frozenset(draw(st.lists(TAINTS, max_size=2))),
        )
        for k in range(draw(st.integers(0, 25)))
    ]
    running = [
        RunningJob(f"r{k}", draw(st.one_of(st.none(), st.floats(1, 200))),
                   (f"n{draw(st.integers(0, len(nodes) - 1))}",),
                   Resources(draw(st.integers(0, 2)), 1000, 1024))
        for k in range(draw(st.integers(0, 4)))
    ]  # fmt: skip
    return Snapshot(jobs, tenants, nodes, now=0.0, running=running)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.sampled_from(["trainyard", "fifo"]))
def test_decisions_respect_quotas_capacity_and_gangs(snap, policy):
    d = admit(snap, policy=policy)
    jobs = {j.id: j for j in snap.jobs}
    nodes = {n.name: n for n in snap.nodes}
    ids = [a.job_id for a in d.admitted] + [p.job_id for p in d.pending]
    assert sorted(ids) == sorted(jobs)
    assert [p.position for p in d.pending] == list(range(1, len(d.pending) + 1))
    node_use = {n: [0, 0, 0] for n in nodes}
    tenant_use = {t.name: [0, 0, 0, 0] for t in snap.tenants}
    for a in d.admitted:
        j = jobs[a.job_id]
        assert len(a.placements) == j.learners
        for name in a.placements:
            assert j.gpu_type is None or nodes[name].gpu_type == j.gpu_type
            assert set(nodes[name].taints) <= j.tolerated
            use = node_use[name]
            use[0], use[1], use[2] = use[0] + j.gpus, use[1] + j.cpu_millis, use[2] + j.memory_mib
        tu = tenant_use[j.tenant]
        tu[0], tu[1], tu[2] = (
            tu[0] + j.gpus * j.learners,
            tu[1] + j.cpu_millis * j.learners,
            tu[2] + j.memory_mib * j.learners,
        )
        tu[3] += 1
    for name, use in node_use.items():
        free = nodes[name].free
        assert use[0] <= free.gpus and use[1] <= free.cpu_millis and use[2] <= free.memory_mib
    for t in snap.tenants:
        tu = tenant_use[t.name]
        if tu[3]:
            assert t.used.gpus + tu[0] <= t.quota.gpus
            assert t.used.cpu_millis + tu[1] <= t.quota.cpu_millis
            assert t.used.memory_mib + tu[2] <= t.quota.memory_mib
            assert t.running_jobs + tu[3] <= t.max_running_jobs
    if d.reservation is not None:
        head = jobs[d.reservation.job_id]
        assert all(set(nodes[n].taints) <= head.tolerated for n in d.reservation.placements)
    assert admit(snap, policy=policy) == d


def _fits_empty(j: QueuedJob, nodes: list[Node]) -> bool:
    empty = [replace(n, free=n.capacity) for n in nodes]
    return bool(
        admit(
            Snapshot([replace(j, tenant="x")], [TenantState("x", 1, BIG, 10, Resources(), 0)], empty)
        ).admitted
    )


@st.composite
def workloads(draw: st.DrawFn, tenants: int, priorities: int) -> tuple[list[Node], list[QueuedJob]]:
    caps = [
        Resources(draw(st.sampled_from([1, 2, 4, 8])), 64000, 262144) for _ in range(draw(st.integers(1, 4)))
    ]
    nodes = [Node(f"n{k}", cap, cap, None) for k, cap in enumerate(caps)]
    jobs = [
        QueuedJob(f"j{k:03d}", f"t{draw(st.integers(0, tenants - 1))}", draw(st.integers(0, priorities - 1)),
                  float(draw(st.integers(0, 60))), draw(st.integers(1, 3)),
                  draw(st.sampled_from([1, 2, 4, 8])), 1000, 1024, None, float(draw(st.integers(1, 30))))
        for k in range(draw(st.integers(1, 30)))
    ]  # fmt: skip
    return nodes, [j for j in jobs if _fits_empty(j, nodes)]


def _replay(nodes: list[Node], jobs: list[QueuedJob]) -> tuple[dict[str, float], dict[str, float], int]:
    """Event loop with exact durations; returns start times, first reserved start per head, cycles."""
    arrivals = sorted(jobs, key=lambda j: (j.submitted_at, j.id))
    names = sorted({j.tenant for j in jobs})
    free = {n.name: n.capacity.gpus for n in nodes}
    queue: dict[str, QueuedJob] = {}
    running: dict[str, tuple[str, RunningJob]] = {}
    ends: list[tuple[float, str]] = []
    started: dict[str, float] = {}
    promised: dict[str, float] = {}
    cycles = 0
    while arrivals or ends:
        now = min(
            arrivals[0].submitted_at if arrivals else float("inf"), ends[0][0] if ends else float("inf")
        )
        while ends and ends[0][0] <= now:
            _, r = running.pop(heapq.heappop(ends)[1])
            for n in r.placements:
                free[n] += r.per_learner.gpus
        while arrivals and arrivals[0].submitted_at <= now:
            arrived = arrivals.pop(0)
            queue[arrived.id] = arrived
        nodes_now = [replace(n, free=Resources(free[n.name], 64000, 262144)) for n in nodes]
        states = []
        for name in names:
            mine = [r for t, r in running.values() if t == name]
            gpus = sum(r.per_learner.gpus * len(r.placements) for r in mine)
            states.append(TenantState(name, 1.0, BIG, 10**6, Resources(gpus, 0, 0), len(mine)))
        snap = Snapshot(list(queue.values()), states, nodes_now, now, [r for _, r in running.values()])
        d = admit(snap)
        cycles += 1
        for a in d.admitted:
            j = queue.pop(a.job_id)
            for n in a.placements:
                free[n] -= j.gpus
            end = now + (j.expected_duration or 0.0)
            running[j.id] = (
                j.tenant,
                RunningJob(j.id, end, tuple(a.placements), Resources(j.gpus, 1000, 1024)),
            )
            heapq.heappush(ends, (end, j.id))
            started[j.id] = now
        if d.reservation is not None and d.reservation.start_at is not None:
            promised.setdefault(d.reservation.job_id, d.reservation.start_at)
    return started, promised, cycles


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(tenants=1, priorities=1))
def test_backfill_never_starts_the_head_later_than_its_first_reservation(workload):
    nodes, jobs = workload
    started, promised, cycles = _replay(nodes, jobs)
    assert set(started) == {j.id for j in jobs}
    assert cycles <= 2 * len(jobs)
    for jid, start_at in promised.items():
        assert started[jid] <= start_at


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads(tenants=3, priorities=2))
def test_every_job_that_fits_the_empty_cluster_is_eventually_admitted(workload):
    nodes, jobs = workload
    started, _, cycles = _replay(nodes, jobs)
    assert set(started) == {j.id for j in jobs}
    assert cycles <= 2 * len(jobs)

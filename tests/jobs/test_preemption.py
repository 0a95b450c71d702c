"""Preemption planning (jobs.core.preemption): reclaim of lent quota and priority within a tenant, choosing
the victims that lose the least work."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.core.admission import Node, QueuedJob, Resources, Snapshot, TenantState, admit
from jobs.core.preemption import Victim, plan, protection_seconds

ROOMY = (10**6, 10**7)


def tenant(name: str, gpus: int, *, borrow: int | None = None, used: int = 0, running: int = 0, cohort=""):
    return TenantState(
        name, 1.0, Resources(gpus, *ROOMY), 100, Resources(used, 0, 0), running, (borrow, None, None), cohort
    )


def job(jid: str, tenant: str, gpus: int, *, learners: int = 1, priority: int = 0, at: float = 0.0):
    return QueuedJob(jid, tenant, priority, at, learners, gpus, 0, 0)


def victim(
    jid: str,
    tenant: str,
    gpus: int,
    nodes: tuple[str, ...],
    *,
    since: float = 100.0,
    priority: int = 0,
    admitted: float = 0.0,
    protected: bool = False,
) -> Victim:
    return Victim(jid, tenant, priority, admitted, nodes, Resources(gpus, 0, 0), since, protected)


def node(name: str, free: int, gpus: int = 8, gpu_type: str | None = None, taints=()) -> Node:
    return Node(name, Resources(free, *ROOMY), Resources(gpus, *ROOMY), gpu_type, tuple(taints))


def run(snapshot: Snapshot, victims, **kwargs):
    return plan(snapshot, admit(snapshot), victims, **kwargs)


def lender_and_borrower(victims, *, lender_job_gpus: int = 4):
    """a (nominal 4) lent its whole share to b (nominal 4, using all 8 GPUs of the one node)."""
    snap = Snapshot(
        [job("a1", "a", lender_job_gpus)],
        [tenant("a", 4), tenant("b", 4, used=8, running=len(victims))],
        [node("n0", 0)],
    )
    return snap


def test_a_lender_below_its_nominal_quota_reclaims_borrowed_gpus():
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    found = run(lender_and_borrower(victims), victims)
    assert len(found) == 1
    assert (found[0].victim_tenant, found[0].preemptor, found[0].kind) == ("b", "a1", "reclaim")


def test_victims_are_the_ones_losing_the_least_work_since_their_checkpoint():
    victims = [
        victim("b1", "b", 2, ("n0",), since=900),
        victim("b2", "b", 2, ("n0",), since=30),
        victim("b3", "b", 4, ("n0",), since=60),
    ]
    found = run(lender_and_borrower(victims), victims)
    # b2 (60 GPU-s) and then b3 (240 GPU-s) make room; b3 alone is enough, so b2 is spared again; b1
    # (1,800 GPU-s) is never touched
    assert [p.victim for p in found] == ["b3"]
    assert found[0].lost_gpu_seconds == 240


def test_the_youngest_order_is_kueues_lowest_priority_then_latest_admitted():
    victims = [
        victim("b1", "b", 4, ("n0",), since=10, admitted=1),
        victim("b2", "b", 4, ("n0",), since=5000, admitted=2),
    ]
    found = run(lender_and_borrower(victims), victims, order="youngest")
    assert [p.victim for p in found] == ["b2"]
    assert found[0].lost_gpu_seconds == 20000
    assert [p.victim for p in run(lender_and_borrower(victims), victims)] == ["b1"]


def test_unneeded_victims_are_dropped_again():
    # least loss first takes the 1-GPU job, which alone cannot make room for 4; the 4-GPU one can, alone
    victims = [victim("b1", "b", 1, ("n0",), since=1), victim("b2", "b", 4, ("n0",), since=10)]
    snap = Snapshot(
        [job("a1", "a", 4)],
        [tenant("a", 4), tenant("b", 0, used=5, running=2), tenant("c", 3, used=3, running=1)],
        [node("n0", 0)],
    )
    assert [p.victim for p in run(snap, victims)] == ["b2"]


def test_jobs_inside_their_minimum_runtime_are_never_victims():
    victims = [victim("b1", "b", 4, ("n0",), protected=True), victim("b2", "b", 4, ("n0",), protected=True)]
    assert run(lender_and_borrower(victims), victims) == []


def test_a_tenant_that_would_go_over_its_nominal_quota_does_not_reclaim():
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    assert run(lender_and_borrower(victims, lender_job_gpus=6), victims) == []


def test_only_borrowed_capacity_is_taken_back():
    # b uses exactly its nominal quota: nothing of it is borrowed, so a waits
    snap = Snapshot([job("a1", "a", 4)], [tenant("a", 4), tenant("b", 8, used=8, running=2)], [node("n0", 0)])
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    assert run(snap, victims) == []


def test_reclaim_takes_a_borrowers_jobs_only_while_it_still_borrows():
    # b (nominal 6) borrows 2: taking b1 brings it to 4 (the last victim may take a tenant below its
    # nominal quota, as in Kueue), so b2 is no longer borrowed capacity; a needs 12 (4 free + both of b's
    # jobs), so it waits rather than take b2 too
    snap = Snapshot(
        [job("a1", "a", 4, learners=3)],
        [tenant("a", 12), tenant("b", 6, used=8, running=2)],
        [node("n0", 0), node("n1", 4, gpus=4)],
    )
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    assert run(snap, victims) == []
    # needing 8, one victim is enough
    snap = Snapshot([job("a1", "a", 4, learners=2)], snap.tenants, snap.nodes)
    assert len(run(snap, victims)) == 1


@pytest.mark.parametrize(
    "never",
    [
        job("huge", "a", 16, at=0),  # over all a may ever hold (nominal 4 + 4 it may borrow)
        job("wide", "a", 4, learners=3, at=0),  # over it too, as a gang of 12
        QueuedJob("odd", "a", 0, 0, 1, 4, 0, 0, gpu_type="H100"),  # no node of its type
    ],
)
def test_a_job_that_can_never_start_does_not_keep_its_tenants_next_job_from_reclaiming(never):
    # admission passes over a job that can never start and reserves for a1: so does preemption
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    snap = Snapshot(
        [never, job("a1", "a", 4, at=1)],
        [tenant("a", 4, borrow=4), tenant("b", 4, used=8, running=2)],
        [node("n0", 0)],
    )
    assert [p.preemptor for p in run(snap, victims)] == ["a1"]


def test_other_cohorts_are_not_touched():
    snap = Snapshot(
        [job("a1", "a", 4)],
        [tenant("a", 4, cohort="x"), tenant("b", 4, used=8, running=2, cohort="y")],
        [node("n0", 0)],
    )
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    assert run(snap, victims) == []


def test_jobs_already_stopping_count_as_gone_so_no_more_are_stopped():
    victims = [victim("b2", "b", 4, ("n0",))]
    releasing = [victim("b1", "b", 4, ("n0",))]
    snap = lender_and_borrower([*victims, *releasing])
    assert run(snap, victims, releasing=releasing) == []


def test_victims_on_nodes_the_job_may_not_use_are_not_stopped():
    snap = Snapshot(
        [job("a1", "a", 4)],
        [tenant("a", 4), tenant("b", 4, used=16, running=2)],
        [node("gpu-a", 0, gpu_type="A100"), node("gpu-t", 0, gpu_type="T4")],
    )
    snap = Snapshot([QueuedJob("a1", "a", 0, 0, 1, 4, 0, 0, gpu_type="A100")], snap.tenants, snap.nodes)
    victims = [victim("b1", "b", 8, ("gpu-t",), since=1), victim("b2", "b", 8, ("gpu-a",), since=50)]
    assert [p.victim for p in run(snap, victims)] == ["b2"]


def test_one_preemptor_per_tenant_and_cycle_and_freed_room_is_not_counted_twice():
    snap = Snapshot(
        [job("a1", "a", 4, at=0), job("a2", "a", 4, at=1), job("c1", "c", 4, at=2)],
        [tenant("a", 8), tenant("c", 4), tenant("b", 0, used=8, running=2)],
        [node("n0", 0)],
    )
    victims = [victim("b1", "b", 4, ("n0",)), victim("b2", "b", 4, ("n0",))]
    found = run(snap, victims)
    assert sorted((p.preemptor, p.victim) for p in found) == [("a1", "b1"), ("c1", "b2")] or sorted(
        (p.preemptor, p.victim) for p in found
    ) == [("a1", "b2"), ("c1", "b1")]


def test_priority_preemption_within_a_tenant_only_where_its_policy_allows():
    snap = Snapshot(
        [job("hi", "a", 8, priority=5)],
        [tenant("a", 8, borrow=0, used=8, running=1)],
        [node("n0", 0)],
    )
    victims = [victim("lo", "a", 8, ("n0",), priority=0)]
    assert run(snap, victims) == []
    found = run(snap, victims, priority_tenants={"a"})
    assert [(p.victim, p.kind) for p in found] == [("lo", "priority")]


def test_priority_preemption_never_takes_equal_or_higher_priority_jobs():
    snap = Snapshot(
        [job("hi", "a", 8, priority=5)],
        [tenant("a", 8, borrow=0, used=8, running=1)],
        [node("n0", 0)],
    )
    victims = [victim("same", "a", 8, ("n0",), priority=5)]
    assert run(snap, victims, priority_tenants={"a"}) == []


def test_no_preemption_when_the_job_fits_already():
    snap = Snapshot([job("a1", "a", 4)], [tenant("a", 4), tenant("b", 4, used=8, running=2)], [node("n0", 8)])
    victims = [victim("b1", "b", 4, ("n1",))]
    assert run(snap, victims) == []


@st.composite
def contended(draw):
    count = draw(st.integers(2, 4))
    nominal = [draw(st.integers(0, 8)) for _ in range(count)]
    node_count = draw(st.integers(1, 3))
    names = [f"n{k}" for k in range(node_count)]
    victims, used, running = [], [0] * count, [0] * count
    free = {name: 8 for name in names}
    for k in range(draw(st.integers(0, 8))):
        owner = draw(st.integers(0, count - 1))
        gpus = draw(st.integers(1, 4))
        where = draw(st.sampled_from(names))
        if free[where] < gpus:
            continue
        free[where] -= gpus
        used[owner] += gpus
        running[owner] += 1
        victims.append(
            victim(
                f"v{k}",
                f"t{owner}",
                gpus,
                (where,),
                since=draw(st.integers(0, 1000)),
                priority=draw(st.integers(0, 2)),
                admitted=k,
                protected=draw(st.booleans()),
            )
        )
    tenants = [
        tenant(f"t{k}", nominal[k], used=used[k], running=running[k], borrow=None) for k in range(count)
    ]
    jobs = [
        job(
            f"j{k}",
            f"t{draw(st.integers(0, count - 1))}",
            draw(st.integers(1, 8)),
            priority=draw(st.integers(0, 3)),
            at=k,
        )
        for k in range(draw(st.integers(1, 5)))
    ]
    nodes = [node(name, free[name]) for name in names]
    return Snapshot(jobs, tenants, nodes), victims


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contended(), st.sampled_from(["checkpoint-aware", "youngest"]), st.booleans())
def test_preemption_rules_hold_for_any_cluster(case, order, by_priority):
    snap, victims = case
    tenants = {t.name: t for t in snap.tenants}
    found = run(
        snap, victims, order=order, priority_tenants={t.name for t in snap.tenants} if by_priority else ()
    )
    by_id = {v.job_id: v for v in victims}
    jobs = {j.id: j for j in snap.jobs}
    assert len({p.victim for p in found}) == len(found)
    for p in found:
        v, j = by_id[p.victim], jobs[p.preemptor]
        assert not v.protected
        if p.kind == "reclaim":
            assert v.tenant != j.tenant
            assert v.tenant == p.victim_tenant
        else:
            assert v.tenant == j.tenant and v.priority < j.priority
    # each reclaim victim was taken while its tenant still borrowed: with the largest of them given back,
    # the tenant is above its nominal quota again (counting what it starts this cycle: the jobs admission
    # admits and those the plan preempts for, which the planner charges before it chooses)
    starting: dict[str, int] = {}
    for started in [jobs[a.job_id] for a in admit(snap).admitted] + [
        jobs[i] for i in {p.preemptor for p in found}
    ]:
        starting[started.tenant] = starting.get(started.tenant, 0) + started.gpus * started.learners
    taken: dict[str, list[int]] = {}
    for p in found:
        taken.setdefault(p.victim_tenant, []).append(by_id[p.victim].total[0])
    for name, sizes in taken.items():
        if any(p.kind == "priority" and p.victim_tenant == name for p in found):
            continue
        after = tenants[name].used.gpus + starting.get(name, 0) - sum(sizes)
        assert after + max(sizes) > tenants[name].quota.gpus


def test_jobs_whose_admission_borrowed_give_capacity_back_first():
    victims = [
        victim("b1", "b", 4, ("n0",), since=10),
        Victim("b2", "b", 0, 0.0, ("n0",), Resources(4, 0, 0), 5000, borrowed=True),
    ]
    assert [p.victim for p in run(lender_and_borrower(victims), victims)] == ["b2"]
    assert [p.victim for p in run(lender_and_borrower(victims), victims, order="youngest")] == ["b2"]


def test_protection_doubles_the_minimum_runtime_for_each_earlier_preemption():
    assert [protection_seconds(300, k) for k in range(4)] == [300, 600, 1200, 2400]
    assert protection_seconds(0, 5) == 0, "no minimum runtime: no protection, whatever the history"

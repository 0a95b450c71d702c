"""Quota borrowing in the admission cycle: nominal quota, borrowing limits and cohorts (Kueue's semantics)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.core.admission import Node, QueuedJob, Resources, Snapshot, TenantState, admit
from jobs.core.borrowing import NO_BORROWING, Limit

ROOMY = (10**6, 10**7)  # CPU and memory never bind in these tests


def tenant(
    name: str,
    gpus: int,
    *,
    borrow: int | None = 0,
    cohort: str = "",
    used: int = 0,
    running: int = 0,
) -> TenantState:
    limit: Limit = (borrow, None, None)
    return TenantState(name, 1.0, Resources(gpus, *ROOMY), 100, Resources(used, 0, 0), running, limit, cohort)


def job(jid: str, tenant: str, gpus: int, *, at: float = 0.0) -> QueuedJob:
    return QueuedJob(jid, tenant, 0, at, 1, gpus, 1000, 1024)


def nodes(count: int, gpus: int = 8) -> list[Node]:
    cap = Resources(gpus, 64_000, 262_144)
    return [Node(f"n{k}", cap, cap) for k in range(count)]


def reasons(decision) -> dict[str, str]:
    return {p.job_id: p.reason for p in decision.pending}


def test_default_tenant_state_borrows_nothing():
    t = TenantState("a", 1.0, Resources(4, 1, 1), 1, Resources(), 0)
    assert t.borrowing_limit == NO_BORROWING
    assert t.cohort == ""


def test_without_borrowing_limit_the_quota_is_a_hard_cap_even_on_an_idle_cluster():
    snap = Snapshot([job("a1", "a", 4), job("a2", "a", 4)], [tenant("a", 4), tenant("b", 12)], nodes(2))
    d = admit(snap)
    assert [(a.job_id, a.borrowed) for a in d.admitted] == [("a1", False)]
    assert reasons(d)["a2"] == "tenant GPU quota 4/4 in use (needs 4)"


def test_tenant_borrows_what_its_idle_cohort_leaves_unused_and_the_job_is_marked_borrowed():
    snap = Snapshot(
        [job("a1", "a", 4), job("a2", "a", 4)], [tenant("a", 4, borrow=None), tenant("b", 12)], nodes(2)
    )
    d = admit(snap)
    assert [(a.job_id, a.borrowed) for a in d.admitted] == [("a1", False), ("a2", True)]


def test_borrowing_never_exceeds_the_borrowing_limit():
    jobs = [job(f"a{k}", "a", 2, at=k) for k in range(4)]
    snap = Snapshot(jobs, [tenant("a", 4, borrow=2), tenant("b", 12)], nodes(2))
    d = admit(snap)
    assert [a.job_id for a in d.admitted] == ["a0", "a1", "a2"]
    assert reasons(d)["a3"] == (
        "tenant GPU borrowing limit reached: 6 in use of nominal 4 + 2 borrowable (needs 2)"
    )


def test_borrowing_stops_at_what_the_cohort_has_to_lend():
    # b uses 10 of its 12: the cohort (16 nominal) has 16 - 4 - 10 = 2 to lend to a.
    snap = Snapshot(
        [job("a1", "a", 4), job("a2", "a", 2, at=1)],
        [tenant("a", 4, borrow=None, used=4, running=1), tenant("b", 12, used=10, running=1)],
        nodes(4),
    )
    d = admit(snap)
    assert [a.job_id for a in d.admitted] == []
    assert reasons(d)["a1"] == "tenant over its nominal 4 GPUs and the cohort has only 2 to lend (needs 4)"
    snap = Snapshot(
        [job("a2", "a", 2)],
        [tenant("a", 4, borrow=None, used=4, running=1), tenant("b", 12, used=12, running=1)],
        nodes(4),
    )
    assert reasons(admit(snap))["a2"] == (
        "tenant over its nominal 4 GPUs and the cohort has none to lend (needs 2)"
    )


def test_a_job_larger_than_nominal_plus_cohort_can_never_start_and_blocks_nothing():
    snap = Snapshot(
        [job("big", "a", 24), job("small", "a", 1, at=1)],
        [tenant("a", 4, borrow=None), tenant("b", 12)],
        nodes(4),
    )
    d = admit(snap)
    assert [a.job_id for a in d.admitted] == ["small"]
    assert reasons(d)["big"] == "needs 24 GPU > tenant quota 4 (+12 it may borrow); can never start"


def test_separate_cohorts_do_not_lend_to_each_other():
    tenants = [
        tenant("a", 4, borrow=None, cohort="red"),
        tenant("b", 4, cohort="red", used=4, running=1),
        tenant("c", 8, cohort="blue"),
    ]
    d = admit(Snapshot([job("a1", "a", 4), job("a2", "a", 2, at=1)], tenants, nodes(4)))
    assert [a.job_id for a in d.admitted] == ["a1"]
    assert reasons(d)["a2"] == "tenant over its nominal 4 GPUs and the cohort has none to lend (needs 2)"


def test_within_nominal_is_guaranteed_even_when_others_borrowed_the_cohort_full():
    tenants = [tenant("a", 4, used=0), tenant("b", 4, borrow=None, used=8, running=2)]
    d = admit(Snapshot([job("a1", "a", 4)], tenants, nodes(2)))
    assert [(a.job_id, a.borrowed) for a in d.admitted] == [("a1", False)]


def test_borrowed_is_set_per_admission_in_turn_order():
    tenants = [tenant("a", 2, borrow=None), tenant("b", 6)]
    d = admit(Snapshot([job("a1", "a", 2), job("a2", "a", 1, at=1)], tenants, nodes(1)))
    assert {a.job_id: a.borrowed for a in d.admitted} == {"a1": False, "a2": True}


def test_with_nominal_first_a_job_within_nominal_gets_the_room_before_a_borrowing_one():
    # a reclaim just stopped b's 8-GPU job on n1, leaving b below its nominal (2 of 8) and a at 6 of 8:
    # by share b goes first and its requeued job takes n1 back as borrowed; nominal first gives it to a1
    tenants = [tenant("a", 8, borrow=None, used=6, running=6), tenant("b", 8, borrow=None, used=2, running=1)]
    full, free = Resources(0, 64_000, 262_144), Resources(8, 64_000, 262_144)
    cluster = [Node("n0", full, free), Node("n1", free, free)]
    snap = Snapshot([job("a1", "a", 1, at=5), job("b1", "b", 8, at=1)], tenants, cluster)
    assert [(a.job_id, a.borrowed) for a in admit(snap).admitted] == [("b1", True)]
    d = admit(snap, nominal_first=True)
    assert [(a.job_id, a.borrowed) for a in d.admitted] == [("a1", False)]
    assert "b1" in reasons(d)


def test_nominal_first_keeps_the_share_order_within_each_group():
    tenants = [
        tenant("a", 2, borrow=None, used=1, running=1),
        tenant("b", 2, borrow=None),
        tenant("c", 6, borrow=None, used=3, running=1),
    ]
    snap = Snapshot([job("a1", "a", 2), job("b1", "b", 2), job("c1", "c", 1)], tenants, nodes(1, gpus=16))
    assert [a.job_id for a in admit(snap).admitted] == ["b1", "a1", "c1"]  # by share: 0, 1/16, 3/16
    # b1 and c1 stay within nominal (share order between them); a1 would borrow, so it goes last
    d = admit(snap, nominal_first=True)
    assert [(a.job_id, a.borrowed) for a in d.admitted] == [("b1", False), ("c1", False), ("a1", True)]


@st.composite
def cohort_snapshots(draw) -> Snapshot:
    count = draw(st.integers(2, 4))
    tenants = [
        tenant(
            f"t{k}",
            draw(st.integers(0, 8)),
            borrow=draw(st.one_of(st.none(), st.integers(0, 6))),
            cohort=draw(st.sampled_from(["", "x"])),
        )
        for k in range(count)
    ]
    jobs = [
        job(f"j{k}", f"t{draw(st.integers(0, count - 1))}", draw(st.integers(0, 6)), at=k)
        for k in range(draw(st.integers(0, 14)))
    ]
    return Snapshot(jobs, tenants, nodes(draw(st.integers(1, 4))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cohort_snapshots())
def test_admissions_stay_within_borrowing_limits_and_cohort_nominal(snap):
    d = admit(snap)
    gpus = {j.id: j.gpus for j in snap.jobs}
    owner = {j.id: j.tenant for j in snap.jobs}
    held = {t.name: 0 for t in snap.tenants}
    for a in d.admitted:
        held[owner[a.job_id]] += gpus[a.job_id]
        t = next(t for t in snap.tenants if t.name == owner[a.job_id])
        assert a.borrowed == (held[t.name] > t.quota.gpus)
        if a.borrowed:
            limit = t.borrowing_limit[0]
            assert limit is None or held[t.name] <= t.quota.gpus + limit
            members = [m for m in snap.tenants if m.cohort == t.cohort]
            assert sum(held[m.name] for m in members) <= sum(m.quota.gpus for m in members)

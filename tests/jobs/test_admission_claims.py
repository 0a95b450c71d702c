"""Claim quota in the pure admission cycle and the claim arithmetic behind it (jobs.core.claims)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.core.admission import Node, QueuedJob, Resources, Snapshot, TenantState, admit
from jobs.core.claims import NO_CLAIMS, claim_layout, storage_problems
from jobs.core.preemption import Victim, plan

NODE = Node("n1", Resources(8, 64_000, 262_144), Resources(8, 64_000, 262_144))


def tenant(name: str = "a", *, claims: int = 0, gib: int = 0, max_claims: int = 20, quota_gib: int = 200):
    return TenantState(
        name, 1.0, Resources(8, 64_000, 262_144), 10, Resources(), 0,
        max_claims=max_claims, storage_quota_gib=quota_gib, claims=claims, storage_gib=gib,
    )  # fmt: skip


def job(jid: str, tenant: str = "a", *, learners: int = 1, claims: int | None = None, at: float = 0.0):
    count = learners if claims is None else claims
    return QueuedJob(jid, tenant, 0, at, learners, 0, 100, 128, claims=count, storage_gib=10 * count)


def test_a_job_whose_claims_would_pass_the_storage_quota_waits_with_the_reason() -> None:
    # Two halted 8-learner jobs hold 16 claims of 10 GiB: a third may not add 8 more.
    decision = admit(Snapshot([job("j", learners=8)], [tenant(claims=16, gib=160)], [NODE]))
    assert not decision.admitted
    [pending] = decision.pending
    assert pending.reason.startswith("tenant storage quota: checkpoint claims 16+8 would exceed 20"), pending


def test_the_storage_in_gib_is_checked_as_well_as_the_count() -> None:
    decision = admit(Snapshot([job("j", learners=3)], [tenant(gib=180, max_claims=100)], [NODE]))
    assert [p.reason for p in decision.pending] == [
        "tenant storage quota: GiB of claim storage 180+30 would exceed 200 "
        "(halted and finished jobs keep their claims until deleted)"
    ]


def test_claims_admitted_in_one_cycle_count_for_the_next_job_of_the_tenant() -> None:
    jobs = [job("first", learners=6, at=1.0), job("second", learners=6, at=2.0)]
    decision = admit(Snapshot(jobs, [tenant(claims=10, gib=100)], [NODE]))
    assert [a.job_id for a in decision.admitted] == ["first"]
    assert "16+6 would exceed 20" in decision.pending[0].reason


def test_a_requeued_job_whose_claims_exist_is_not_held_back_by_them() -> None:
    decision = admit(Snapshot([job("resumed", learners=8, claims=0)], [tenant(claims=20, gib=200)], [NODE]))
    assert [a.job_id for a in decision.admitted] == ["resumed"]


def test_a_job_bigger_than_the_storage_quota_never_fits_and_blocks_nothing_behind_it() -> None:
    jobs = [job("huge", learners=30, at=1.0), job("small", learners=1, at=2.0)]
    decision = admit(Snapshot(jobs, [tenant()], [NODE]))
    assert [a.job_id for a in decision.admitted] == ["small"]
    assert (
        decision.pending[0].reason == "needs 30 checkpoint claims, more than the tenant's storage quota of 20"
    )


def test_a_tenant_full_of_claims_does_not_hold_back_another_tenant() -> None:
    jobs = [job("a1", "a", learners=2), job("b1", "b", learners=2)]
    decision = admit(Snapshot(jobs, [tenant("a", claims=20, gib=200), tenant("b")], [NODE]))
    assert [a.job_id for a in decision.admitted] == ["b1"]


def test_without_a_claim_quota_claims_are_not_checked() -> None:
    state = replace(tenant(claims=500, gib=5000), max_claims=None, storage_quota_gib=None)
    assert admit(Snapshot([job("j", learners=8)], [state], [NODE])).admitted


@pytest.mark.parametrize(
    ("size", "mode", "host", "learners", "claims", "gib"),
    [
        ("10Gi", "ReadWriteOnce", "", 8, 8, 80),
        ("10Gi", "ReadWriteMany", "", 8, 1, 10),
        ("500Mi", "ReadWriteOnce", "", 2, 2, 2),
        ("10G", "ReadWriteOnce", "", 1, 1, 10),
        ("", "ReadWriteOnce", "", 8, 0, 0),
        ("10Gi", "ReadWriteOnce", "/srv/ckpt", 8, 0, 0),
    ],
)
def test_the_claim_layout_follows_the_checkpoint_settings(size, mode, host, learners, claims, gib) -> None:
    layout = claim_layout(claim_size=size, access_mode=mode, host_root=host)
    assert (layout.claims(learners), layout.storage_gib(learners)) == (claims, gib)
    assert (NO_CLAIMS.claims(learners), NO_CLAIMS.storage_gib(learners)) == (0, 0)


def test_storage_problems_name_what_can_never_fit() -> None:
    assert storage_problems(claims=8, gib=80, max_claims=20, storage_gib=200) == []
    assert storage_problems(claims=30, gib=300, max_claims=20, storage_gib=200) == [
        "needs 30 checkpoint claims, the tenant's claim quota is 20",
        "needs 300 GiB of checkpoint claims, the tenant's storage quota is 200 GiB",
    ]


def test_no_job_is_preempted_for_one_that_waits_for_claim_storage() -> None:
    # Tenant a lent its GPUs to b, which fills the node; a's job would reclaim them, but its claims do not fit
    # a's claim quota, and a stopped job keeps its claims: preempting b frees nothing a1 waits for.
    roomy = (10**6, 10**6)
    lender = TenantState(
        "a",
        1.0,
        Resources(4, *roomy),
        100,
        Resources(),
        0,
        max_claims=4,
        storage_quota_gib=40,
        claims=4,
        storage_gib=40,
    )
    borrower = TenantState("b", 1.0, Resources(4, *roomy), 100, Resources(8, 0, 0), 1, (None, None, None))
    full = Node("n0", Resources(0, *roomy), Resources(8, *roomy))
    waiting = QueuedJob("a1", "a", 0, 0.0, 1, 4, 0, 0, claims=1, storage_gib=10)
    victims = [Victim("b1", "b", 0, 0.0, ("n0",), Resources(8, 0, 0), 100.0)]
    snapshot = Snapshot([waiting], [lender, borrower], [full])
    decision = admit(snapshot)
    assert decision.pending[0].reason.startswith("tenant storage quota"), decision
    assert plan(snapshot, decision, victims) == []
    freed = replace(lender, claims=0, storage_gib=0)
    snapshot = Snapshot([waiting], [freed, borrower], [full])
    assert [p.victim for p in plan(snapshot, admit(snapshot), victims)] == ["b1"]

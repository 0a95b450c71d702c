"""The tuner's decision (pure): within the declared range and the tenant's free quota, never before the
job is stable, one change per window and a few per job, a regression reverted and never retried."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.core.tuning.detector import Diagnosis
from jobs.core.tuning.policy import Allocation, History, Limits, Pending, decide


def diagnosis(
    kind: str = "cpu_bound", *, stable: bool = True, speed: float = 1000.0, used: int = 990
) -> Diagnosis:
    return Diagnosis(stable, kind, {"speed_mean": speed, "cpu_used_millis": used, "cpu_util": 0.99}, "why")


LIMITS = Limits(cpu_range=(1000, 2000), learners_range=None, free_cpu_millis=10_000, window_seconds=60)
ONE = Allocation(1000, 1)


def test_cpu_bound_job_gets_more_cpu_within_its_range() -> None:
    decision = decide(diagnosis=diagnosis(), current=ONE, history=History(), limits=LIMITS, now=1000)
    assert decision.action == "scale"
    assert decision.target == Allocation(2000, 1)
    assert decision.direction == "cpu_up"
    assert decision.evidence["diagnosis"] == "cpu_bound"
    assert decision.evidence["target"] == {"cpu_millis": 2000, "learners": 1}


def test_never_above_the_top_of_the_range() -> None:
    decision = decide(
        diagnosis=diagnosis(), current=Allocation(1500, 1), history=History(), limits=LIMITS, now=1000
    )
    assert decision.target == Allocation(2000, 1)
    top = decide(
        diagnosis=diagnosis(), current=Allocation(2000, 1), history=History(), limits=LIMITS, now=1000
    )
    assert top.action == "hold"
    assert top.code == "no_change"


@pytest.mark.parametrize(("free", "expected"), [(0, None), (300, 1300), (1000, 2000)])
def test_never_more_than_the_tenants_free_quota(free: int, expected: int | None) -> None:
    limits = replace(LIMITS, free_cpu_millis=free)
    decision = decide(diagnosis=diagnosis(), current=ONE, history=History(), limits=limits, now=1000)
    if expected is None:
        assert decision.action == "hold"
        assert "quota" in decision.reason
    else:
        assert decision.target == Allocation(expected, 1)


def test_quota_is_shared_by_every_learner() -> None:
    limits = replace(LIMITS, free_cpu_millis=1000)
    decision = decide(
        diagnosis=diagnosis(), current=Allocation(1000, 4), history=History(), limits=limits, now=0
    )
    assert decision.target == Allocation(1200, 4)  # 4 x 250m more would be 1250m: rounded down to 100m
    assert decision.target.cpu_millis * 4 - 4000 <= 1000


def test_never_acts_before_stable() -> None:
    decision = decide(
        diagnosis=diagnosis(stable=False), current=ONE, history=History(), limits=LIMITS, now=1000
    )
    assert decision.action == "hold"
    assert decision.code == "unstable"
    assert decision.target is None


def test_one_change_per_window() -> None:
    history = History(changes=1, last_change_at=980.0)
    decision = decide(diagnosis=diagnosis(), current=ONE, history=history, limits=LIMITS, now=1000)
    assert (decision.action, decision.code) == ("hold", "window")
    later = decide(diagnosis=diagnosis(), current=ONE, history=history, limits=LIMITS, now=1041)
    assert later.action == "scale"


def test_at_most_max_changes() -> None:
    history = History(changes=3, last_change_at=0.0)
    decision = decide(diagnosis=diagnosis(), current=ONE, history=history, limits=LIMITS, now=10_000)
    assert (decision.action, decision.code) == ("hold", "max_changes")


def test_a_change_that_slowed_the_job_is_reverted() -> None:
    pending = Pending(previous=ONE, direction="cpu_up", speed_before=1000.0, at=0.0)
    decision = decide(
        diagnosis=diagnosis(speed=800.0),
        current=Allocation(2000, 1),
        history=History(changes=1, last_change_at=0.0, pending=pending),
        limits=LIMITS,
        now=100,
    )
    assert decision.action == "revert"
    assert decision.target == ONE
    assert decision.evidence["speed_ratio"] == pytest.approx(0.8)


def test_a_change_that_helped_is_kept() -> None:
    pending = Pending(previous=ONE, direction="cpu_up", speed_before=1000.0, at=0.0)
    decision = decide(
        diagnosis=diagnosis(speed=1700.0),
        current=Allocation(2000, 1),
        history=History(changes=1, last_change_at=0.0, pending=pending),
        limits=LIMITS,
        now=100,
    )
    assert decision.action == "keep"
    assert decision.evidence["speed_ratio"] == pytest.approx(1.7)


def test_a_pending_change_waits_for_stability_even_past_the_window() -> None:
    pending = Pending(previous=ONE, direction="cpu_up", speed_before=1000.0, at=0.0)
    history = History(changes=1, last_change_at=0.0, pending=pending)
    decision = decide(
        diagnosis=diagnosis(stable=False),
        current=Allocation(2000, 1),
        history=history,
        limits=LIMITS,
        now=1e6,
    )
    assert (decision.action, decision.code) == ("hold", "pending")


def test_a_reverted_direction_is_not_tried_again() -> None:
    history = History(changes=2, last_change_at=0.0, reverted=frozenset({"cpu_up"}))
    decision = decide(diagnosis=diagnosis(), current=ONE, history=history, limits=LIMITS, now=1000)
    assert (decision.action, decision.code) == ("hold", "reverted")


def test_over_provisioned_gives_cpu_back_not_below_the_range() -> None:
    limits = replace(LIMITS, cpu_range=(500, 4000))
    decision = decide(
        diagnosis=diagnosis("over_provisioned", used=300), current=Allocation(4000, 1), history=History(),
        limits=limits, now=1000,
    )  # fmt: skip
    assert decision.target == Allocation(500, 1)
    small = decide(
        diagnosis=diagnosis("over_provisioned", used=1000), current=Allocation(4000, 1), history=History(),
        limits=limits, now=1000,
    )  # fmt: skip
    assert small.target == Allocation(1500, 1)


def test_cpu_bound_at_the_top_adds_a_learner_when_quota_allows() -> None:
    limits = replace(
        LIMITS, learners_range=(1, 3), free_cpu_millis=2000, memory_mib=1024, free_memory_mib=4096
    )
    decision = decide(
        diagnosis=diagnosis(), current=Allocation(2000, 1), history=History(), limits=limits, now=0
    )
    assert decision.target == Allocation(2000, 2)
    full = replace(limits, free_memory_mib=100)
    held = decide(diagnosis=diagnosis(), current=Allocation(2000, 1), history=History(), limits=full, now=0)
    assert held.action == "hold"


def test_scaling_limited_drops_a_learner_within_range() -> None:
    limits = replace(LIMITS, learners_range=(2, 4))
    drop = decide(
        diagnosis=diagnosis("scaling_limited"),
        current=Allocation(1000, 4),
        history=History(),
        limits=limits,
        now=0,
    )
    assert drop.target == Allocation(1000, 3)
    floor = decide(
        diagnosis=diagnosis("scaling_limited"),
        current=Allocation(1000, 2),
        history=History(),
        limits=limits,
        now=0,
    )
    assert floor.action == "hold"


@pytest.mark.parametrize("kind", ["memory_pressure", "gpu_bound", "unknown"])
def test_nothing_to_change_holds(kind: str) -> None:
    decision = decide(diagnosis=diagnosis(kind), current=ONE, history=History(), limits=LIMITS, now=0)
    assert decision.action == "hold"


def test_never_outside_range_or_quota_over_many_inputs() -> None:
    """Property: whatever the diagnosis, the target stays in range and within the quota."""
    for kind in ("cpu_bound", "over_provisioned", "scaling_limited"):
        for cpu in range(500, 4001, 250):
            for learners in (1, 2, 3):
                for free in (0, 400, 1500, 9000):
                    limits = Limits(
                        cpu_range=(500, 4000), learners_range=(1, 3), free_cpu_millis=free,
                        memory_mib=512, free_memory_mib=free,
                    )  # fmt: skip
                    current = Allocation(cpu, learners)
                    d = decide(
                        diagnosis=diagnosis(kind, used=cpu // 3), current=current, history=History(),
                        limits=limits, now=0,
                    )  # fmt: skip
                    if d.target is None:
                        continue
                    assert 500 <= d.target.cpu_millis <= 4000
                    assert 1 <= d.target.learners <= 3
                    extra = d.target.cpu_millis * d.target.learners - cpu * learners
                    assert extra <= free


def test_a_kept_cpu_up_is_not_given_back_when_a_busy_node_makes_the_job_look_over_provisioned() -> None:
    history = History(changes=1, last_change_at=0.0, kept=frozenset({"cpu_up"}))
    decision = decide(
        diagnosis=diagnosis("over_provisioned", used=500), current=Allocation(2000, 1), history=history,
        limits=LIMITS, now=1000,
    )  # fmt: skip
    assert (decision.action, decision.code) == ("hold", "kept")


def test_a_kept_cpu_down_does_not_stop_a_later_cpu_up() -> None:
    history = History(changes=1, last_change_at=0.0, kept=frozenset({"cpu_down"}))
    decision = decide(diagnosis=diagnosis(), current=ONE, history=history, limits=LIMITS, now=1000)
    assert (decision.action, decision.direction) == ("scale", "cpu_up")

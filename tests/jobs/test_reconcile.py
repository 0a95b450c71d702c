"""Reconcile's decisions as a pure function: for each active job, what the cluster's pods (or their absence)
call for, in the order the module docstring gives."""

from __future__ import annotations

from typing import Any

from jobs.core.reconcile import (
    ActiveJob,
    Clocks,
    Decision,
    PodFacts,
    chosen_node_gone,
    chosen_node_taken,
    decide,
    needs_nodes,
    needs_room,
)

CLOCKS = Clocks(launch_grace=30, pending_timeout=600)


def job(status: str = "starting", age: float = 60, learners: int = 1, **fields: Any) -> ActiveJob:
    return ActiveJob(id="j", attempt=1, status=status, learners=learners, admitted_seconds_ago=age, **fields)


def one(active: ActiveJob, facts: PodFacts | None, nodes: set[str] | None = None) -> Decision | None:
    decisions = decide([active], {active.key: facts} if facts is not None else {}, CLOCKS, nodes)
    assert len(decisions) <= 1
    return decisions[0] if decisions else None


def test_a_learner_past_its_deadline_fails_the_job_unless_it_is_being_cancelled() -> None:
    facts = PodFacts(learners=frozenset({0, 1}), overdue=1)
    decision = one(job("running", learners=2), facts)
    assert decision is not None and (decision.action, decision.reason, decision.learner) == (
        "deadline",
        "DeadlineExceeded",
        1,
    )
    assert one(job("cancelling"), facts) == Decision(job("cancelling"), "teardown")


def test_a_starting_job_whose_chosen_node_is_gone_is_requeued_naming_the_node() -> None:
    active = job(placements=("n1", "n2"), learners=2)
    facts = PodFacts(learners=frozenset({0, 1}), unbound=(1,))
    assert needs_nodes([active], {active.key: facts}, CLOCKS)
    decision = one(active, facts, nodes={"n1"})
    assert decision is not None and (decision.action, decision.reason) == ("requeue", "NodeGone")
    assert decision.message == "node n2 chosen for learner 1 is gone"
    assert one(active, facts, nodes={"n1", "n2"}) is None, "still there: the scheduler may yet bind it"
    assert chosen_node_gone(job(placements=("n1",), learners=2), (0,), set()) is None, "no full placement"


def test_a_learner_waiting_for_a_node_its_pool_has_yet_to_add_is_not_requeued() -> None:
    pooled = job(placements=("pool:a100/0", "pool:a100/1"), learners=2)
    assert chosen_node_gone(pooled, (0, 1), {"n1"}) is None
    assert chosen_node_taken(pooled, (0, 1), {"n1": (8, 1000, 1000)}) is None
    assert one(pooled, PodFacts(learners=frozenset({0, 1}), unbound=(0, 1)), nodes={"n1"}) is None


def test_a_job_pending_past_the_timeout_is_requeued_and_one_short_of_pods_is_launched_again() -> None:
    facts = PodFacts(learners=frozenset({0}))
    decision = one(job(age=700, learners=2), facts)
    assert decision is not None and (decision.action, decision.reason) == ("requeue", "PendingTimeout")
    decision = one(job(age=60, learners=2), facts)
    assert decision is not None and decision.action == "launch"
    assert one(job(age=10, learners=2), facts) is None, "within the grace a launch may still be creating them"
    assert one(job(age=60, learners=1), facts) is None, "all there"


def test_without_pods_a_cancel_completes_a_start_is_retried_and_a_running_job_is_requeued() -> None:
    decision = one(job("cancelling"), None)
    assert decision is not None and decision.action == "cancelled"
    decision = one(job("starting", age=60), None)
    assert decision is not None and decision.action == "launch"
    assert one(job("starting", age=5), None) is None
    decision = one(job("running"), None)
    assert decision is not None and (decision.action, decision.reason) == ("requeue", "PodLost")


def test_node_names_are_asked_for_only_when_a_decision_needs_them() -> None:
    active = job(age=60)
    assert not needs_nodes([active], {active.key: PodFacts(learners=frozenset({0}))}, CLOCKS)
    assert not needs_nodes([job(age=5)], {job(age=5).key: PodFacts(unbound=(0,))}, CLOCKS)


def test_a_halting_job_is_torn_down_again_while_its_pods_exist_and_halted_once_they_are_gone() -> None:
    overdue = PodFacts(learners=frozenset({0}), overdue=0)
    assert one(job("halting", age=900), overdue) == Decision(job("halting", age=900), "teardown")
    assert one(job("halting", age=900), PodFacts(learners=frozenset({0}), unbound=(0,))) == Decision(
        job("halting", age=900), "teardown"
    ), "stopping, not stuck pending"
    decision = one(job("halting"), None)
    assert decision is not None and decision.action == "halted"


def test_a_pinned_learner_whose_node_lost_the_room_is_requeued_node_taken() -> None:
    active = job(placements=("n1", "n1"), learners=2, per_learner=(1, 1000, 1024))
    facts = PodFacts(learners=frozenset({0, 1}), unbound=(0, 1), unschedulable=(0, 1))
    assert needs_room([active], {active.key: facts}, CLOCKS)
    [decision] = decide([active], {active.key: facts}, CLOCKS, {"n1"}, {"n1": (1, 8000, 8192)})
    assert (decision.action, decision.reason) == ("requeue", "NodeTaken")
    assert decision.message == "node n1 chosen for learner 0, 1 has no room for it any more"
    # Room for both: they wait for something else (a taint, a claim), which PendingTimeout handles.
    assert chosen_node_taken(active, (0, 1), {"n1": (2, 8000, 8192)}) is None
    assert chosen_node_taken(active, (0, 1), {}) is None, "an unknown node is NodeGone's case"
    early = job(age=10, placements=("n1", "n1"), learners=2, per_learner=(1, 1000, 1024))
    assert not needs_room([early], {early.key: facts}, CLOCKS), (
        "within the grace the scheduler may yet bind it"
    )
    assert not needs_room([active], {active.key: PodFacts(learners=frozenset({0, 1}), unbound=(0,))}, CLOCKS)


def test_no_second_launch_is_decided_while_a_launch_chain_holds_the_attempt() -> None:
    assert one(job(launching=True), None) is None
    assert one(job(learners=2, launching=True), PodFacts(learners=frozenset({0}))) is None
    decision = one(job(learners=2), PodFacts(learners=frozenset({0})))
    assert decision is not None and decision.action == "launch"


def test_max_runtime_counts_from_the_pods_start_time_until_it_ends() -> None:
    from datetime import UTC, datetime, timedelta

    from jobs.core.reconcile import max_runtime_due, past_max_runtime

    started = datetime(2026, 12, 7, 8, 0, 0, tzinfo=UTC)
    pod = {"status": {"phase": "Running", "startTime": "2026-12-07T08:00:00Z"}}
    assert max_runtime_due(pod, 15) == started + timedelta(seconds=15)
    assert not past_max_runtime(pod, 15, started + timedelta(seconds=14.9))
    assert past_max_runtime(pod, 15, started + timedelta(seconds=15))
    assert max_runtime_due(pod, None) is None
    assert max_runtime_due({"status": {"phase": "Pending"}}, 15) is None  # not started on a node yet
    assert max_runtime_due({"status": {**pod["status"], "phase": "Failed"}}, 15) is None

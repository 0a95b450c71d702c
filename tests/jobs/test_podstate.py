"""Reading learner pods into one job verdict: the worst learner decides, infra faults requeue."""

from typing import Any

import pytest

from jobs.core.podstate import LearnerView, judge, view_from_pod


def running(i: int) -> LearnerView:
    return LearnerView(index=i, phase="Running", node="n1")


def test_all_learners_running_means_running() -> None:
    assert judge([running(0), running(1)], 2).state == "running"


def test_one_learner_still_pending_means_starting() -> None:
    verdict = judge([running(0), LearnerView(index=1, phase="Pending")], 2)
    assert (verdict.state, verdict.reason) == ("starting", "PodsPending")


def test_success_needs_every_learner() -> None:
    done = LearnerView(index=0, phase="Succeeded", exit_code=0)
    assert judge([done, running(1)], 2).state == "running"
    assert judge([done, LearnerView(index=1, phase="Succeeded", exit_code=0)], 2).state == "succeeded"


def test_non_zero_exit_fails_with_the_code() -> None:
    verdict = judge(
        [LearnerView(index=0, phase="Failed", exit_code=2, terminated_reason="Error"), running(1)], 2
    )
    assert (verdict.state, verdict.reason, verdict.learner) == ("failed", "ExitCode2", 0)


def test_oom_is_a_user_error_with_advice() -> None:
    verdict = judge([LearnerView(index=0, phase="Failed", exit_code=137, terminated_reason="OOMKilled")], 1)
    assert verdict.state == "failed" and verdict.reason == "OOMKilled" and "more memory" in verdict.message


def test_image_pull_backoff_fails_without_retry() -> None:
    view = LearnerView(
        index=0, phase="Pending", waiting_reason="ImagePullBackOff", waiting_message="not found"
    )
    assert judge([view], 1).state == "failed"


def test_node_lost_requeues_even_if_another_learner_failed() -> None:
    lost = LearnerView(
        index=1, phase="Failed", pod_reason="NodeLost", pod_message="node gone", disrupted=True
    )
    failed = LearnerView(index=0, phase="Failed", exit_code=1)
    verdict = judge([failed, lost], 2)
    assert (verdict.state, verdict.reason) == ("requeue", "NodeLost")


def test_a_vanished_learner_pod_requeues() -> None:
    verdict = judge([running(0)], 2)
    assert (verdict.state, verdict.reason) == ("requeue", "PodLost")


def test_no_pods_yet_is_starting() -> None:
    assert judge([], 3).state == "starting"


def test_unschedulable_pod_is_reported() -> None:
    view = LearnerView(index=0, phase="Pending", unschedulable_message="0/2 nodes are available")
    verdict = judge([view], 1)
    assert (verdict.state, verdict.reason) == ("starting", "Unschedulable")
    assert "0/2 nodes" in verdict.message


def pod(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": status}


def test_view_from_pod_reads_exit_code_and_reason() -> None:
    view = view_from_pod(
        pod(
            phase="Failed",
            containerStatuses=[{"state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
        ),
        0,
    )
    assert (view.phase, view.exit_code, view.terminated_reason, view.node) == (
        "Failed",
        137,
        "OOMKilled",
        "n1",
    )


def test_view_from_pod_reads_unschedulable_and_disruption() -> None:
    conditions = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no fit"},
        {"type": "DisruptionTarget", "status": "True"},
    ]
    view = view_from_pod(pod(phase="Pending", conditions=conditions), 1)
    assert view.unschedulable_message == "no fit" and view.disrupted


@pytest.mark.parametrize(
    ("condition_reason", "pod_reason", "expected"),
    [
        ("PreemptionByScheduler", "", "PreemptionByScheduler"),
        ("EvictionByEvictionAPI", "", "EvictionByEvictionAPI"),
        ("EvictionByEvictionAPI", "Evicted", "Evicted"),
        ("DeletionByTaintManager", "", "DeletionByTaintManager"),
    ],
)
def test_a_disrupted_pod_requeues_with_the_disruptions_own_reason(
    condition_reason: str, pod_reason: str, expected: str
) -> None:
    conditions = [
        {"type": "DisruptionTarget", "status": "True", "reason": condition_reason, "message": "taken away"}
    ]
    running = pod(phase="Running", conditions=conditions)
    if pod_reason:
        running["status"]["reason"] = pod_reason
    verdict = judge([view_from_pod(running, 0)], 1)
    assert (verdict.state, verdict.reason) == ("requeue", expected)
    assert "taken away" in verdict.message


@pytest.mark.parametrize(
    ("statuses", "lost"),
    [
        ("containerStatuses", {"exitCode": 255, "reason": "Unknown"}),
        ("containerStatuses", {"exitCode": 137, "reason": "ContainerStatusUnknown"}),
        ("initContainerStatuses", {"exitCode": 255, "reason": "Unknown"}),
    ],
)
def test_a_learner_whose_node_rebooted_under_it_requeues_instead_of_failing_with_its_exit_code(
    statuses: str, lost: dict[str, Any]
) -> None:
    """After a node reboot the runtime reports a container that was running as ended with reason Unknown
    (255), or the kubelet one it cannot find as ContainerStatusUnknown (137); a restartPolicy Never pod then
    fails. The learner did not exit: that is the node's fault, not the user's."""
    failed = pod(phase="Failed", **{statuses: [{"name": "learner", "state": {"terminated": lost}}]})
    verdict = judge([view_from_pod(failed, 0), running(1)], 2)
    assert (verdict.state, verdict.reason, verdict.learner) == ("requeue", "ContainerLost", 0)
    assert f"{lost['reason']} ({lost['exitCode']})" in verdict.message
    exited = pod(
        phase="Failed", containerStatuses=[{"state": {"terminated": {"exitCode": 255, "reason": "Error"}}}]
    )
    assert judge([view_from_pod(exited, 0)], 1).reason == "ExitCode255"


def test_a_failed_fetch_init_container_fails_the_job_with_its_message() -> None:
    failed = pod(
        phase="Failed",
        initContainerStatuses=[
            {
                "name": "fetch",
                "state": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "message": "starting\nfetch: S3 bucket 'nope' does not exist\n",
                    }
                },
            }
        ],
        containerStatuses=[{"name": "learner", "state": {"waiting": {"reason": "PodInitializing"}}}],
    )
    view = view_from_pod(failed, 0)
    assert view.init_failure == ("fetch", 1, "fetch: S3 bucket 'nope' does not exist")
    verdict = judge([view], 1)
    assert (verdict.state, verdict.reason) == ("failed", "FetchFailed")
    assert (
        verdict.message == "learner 0: init container fetch exited 1: fetch: S3 bucket 'nope' does not exist"
    )


def _running(ready: str, deleting: bool = False) -> dict[str, object]:
    return {
        "metadata": {"deletionTimestamp": "2026-12-03T15:00:00Z"} if deleting else {},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready}],
            "containerStatuses": [{"name": "learner", "state": {"running": {}}}],
        },
    }


def test_a_running_learner_marked_not_ready_is_on_a_node_that_stopped_answering() -> None:
    assert view_from_pod(_running("False"), 0).node_unready
    assert not view_from_pod(_running("True"), 0).node_unready
    assert not view_from_pod(_running("False", deleting=True), 0).node_unready


def _with_sidecar(learner_state: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    statuses = [
        {"name": "istio-proxy", "state": {"running": {}}},
        {"name": "learner", "state": learner_state},
    ]
    return pod(phase=phase, containerStatuses=statuses)


def test_a_learner_that_exited_0_beside_a_running_sidecar_succeeds() -> None:
    view = view_from_pod(_with_sidecar({"terminated": {"exitCode": 0, "reason": "Completed"}}), 0)
    assert (view.phase, view.exit_code) == ("Succeeded", 0)
    assert judge([view], 1).state == "succeeded"


def test_a_learner_that_exited_3_beside_a_running_sidecar_fails_on_its_code() -> None:
    view = view_from_pod(_with_sidecar({"terminated": {"exitCode": 3, "reason": "Error"}}), 0)
    verdict = judge([view], 1)
    assert (verdict.state, verdict.reason) == ("failed", "ExitCode3")


def test_a_running_learner_is_read_from_its_own_container_not_an_exited_sidecar() -> None:
    statuses = [
        {"name": "vault-agent", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}},
        {"name": "learner", "state": {"running": {}}},
    ]
    view = view_from_pod(pod(phase="Running", containerStatuses=statuses), 0)
    assert (view.phase, view.exit_code) == ("Running", None)
    assert judge([view], 1).state == "running"


@pytest.mark.parametrize("reason", ["UnexpectedAdmissionError", "OutOfnvidia.com/gpu", "OutOfcpu"])
def test_a_kubelet_admission_rejection_requeues(reason: str) -> None:
    view = view_from_pod(pod(phase="Failed", reason=reason, message="Pod was rejected: ..."), 0)
    verdict = judge([view], 1)
    assert (verdict.state, verdict.reason) == ("requeue", reason)


def test_a_native_sidecar_killed_after_the_learner_failed_is_not_an_init_failure() -> None:
    failed = pod(
        phase="Failed",
        initContainerStatuses=[{"name": "istio-proxy", "state": {"terminated": {"exitCode": 137}}}],
        containerStatuses=[{"name": "learner", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
    )
    failed["spec"]["initContainers"] = [{"name": "istio-proxy", "restartPolicy": "Always"}]
    assert judge([view_from_pod(failed, 0)], 1).reason == "ExitCode3"

"""Where learners run, end to end on kubesim: admission sees the nodes' taints (a CPU-only job stays off a
GPU node tainted as GKE taints them, a GPU job tolerates it), and every learner runs on the node admission
chose for it. Nodes added here are removed at the end: the cluster is shared by the whole session.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobs import cluster, tasks
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.kubesim_only]

GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# Long enough to read the pods while the job runs; the learners end on their own.
WORKING = "import time\ntime.sleep(4)\nprint('done')"


def submit(document: str, cpu_millis: int = 32_000) -> Job:
    tenant = make_tenant(cpu_millis=cpu_millis)
    return job_submit(tenant=tenant, user=member(tenant), document=document)


def running_pods(job: Job) -> list[dict[str, Any]]:
    job.refresh_from_db()
    return [p for p in cluster.job_pods(job) if not p["metadata"].get("deletionTimestamp")]


def assert_on_chosen_nodes(job: Job) -> list[str]:
    """The job runs, each learner on the node admission chose for it; returns those nodes."""
    job = wait_status(job, "running", timeout=60)
    pods = running_pods(job)
    assert len(pods) == job.learners and len(job.placements) == job.learners, describe(job)
    assert [p["spec"]["nodeName"] for p in pods] == job.placements, describe(job)
    return list(job.placements)


def test_a_cpu_job_stays_off_a_tainted_gpu_node_and_a_gpu_job_tolerates_it(
    engine: KubeSim, nodes: list[str]
) -> None:
    # With 2 free GPUs the tainted node is the best fit for anything, a CPU job included (fewer free GPUs
    # than kubesim-gpu-0's 4; kubesim-node has too few cores for 3 CPUs): only its taint keeps it away.
    engine.add_gpu_node(
        "gke-gpu-0", gpus=2, labels={"nvidia.com/gpu.product": "GKE-GPU"}, taints=[GKE_GPU_TAINT]
    )
    nodes.append("gke-gpu-0")
    # The platform reads nodes from the watcher's summary: wait for it to see the new node.
    added = wait_until(lambda: {n.name: n for n in cluster.nodes()}.get("gke-gpu-0"), what="the node summary")
    assert [str(t) for t in added.taints] == ["nvidia.com/gpu=present:NoSchedule"]

    cpu_job = submit(python_spec("cpu-only", WORKING, cpu="3"))
    assert "gke-gpu-0" not in assert_on_chosen_nodes(cpu_job)
    # Never held off by the taint (the scheduler may name the learner's claim while it binds, as
    # kube-scheduler does for an immediate claim made just before its pod).
    assert not cpu_job.events.filter(reason="Unschedulable", message__contains="taint").exists(), describe(
        cpu_job
    )

    gpu_resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "GKE-GPU"}
    gpu_job = submit(python_spec("gpu", WORKING, resources=gpu_resources, learners=2))
    assert assert_on_chosen_nodes(gpu_job) == ["gke-gpu-0", "gke-gpu-0"]
    [pod, _] = running_pods(gpu_job)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"][
        "tolerations"
    ]

    for job in (cpu_job, gpu_job):
        wait_status(job, "succeeded", timeout=60)
        assert job.attempt == 1, describe(job)


def test_a_cpu_job_kept_off_every_node_with_room_by_a_taint_waits_and_says_why(
    engine: KubeSim, nodes: list[str]
) -> None:
    engine.add_gpu_node(
        "gke-gpu-1", gpus=1, cpu=512, labels={"nvidia.com/gpu.product": "GKE-GPU"}, taints=[GKE_GPU_TAINT]
    )
    nodes.append("gke-gpu-1")
    job = submit(python_spec("too-wide", "print('never')", cpu="100"), cpu_millis=200_000)
    wait_until(lambda: Job.objects.get(pk=job.pk).message, what="a scheduling reason")
    job.refresh_from_db()
    assert job.status == "queued" and job.attempt == 0, describe(job)
    assert (
        "larger nodes have taints the job does not tolerate (nvidia.com/gpu=present:NoSchedule)"
        in job.message
    )


def test_every_learner_runs_on_the_node_admission_chose(engine: KubeSim) -> None:
    # The default scheduler alone would spread these elsewhere (kubesim's puts CPU pods on the node with the
    # most free GPUs); bound by node affinity, they run where admission counted them.
    job = submit(python_spec("bound", WORKING, learners=3))
    placed = assert_on_chosen_nodes(job)
    assert JobEvent.objects.filter(job=job, reason="Admitted", message__contains=placed[0]).exists()
    wait_status(job, "succeeded", timeout=60)


def test_a_learner_whose_chosen_node_went_away_before_launch_is_admitted_afresh_without_a_retry(
    engine: KubeSim, nodes: list[str], held_launches: list[tuple[Any, ...]], settings: Any
) -> None:
    # One GPU and one core: the best fit (fewest free GPUs, then least free CPU) for a one-GPU learner.
    engine.add_gpu_node("doomed-0", gpus=1, cpu=1, labels={"nvidia.com/gpu.product": "Doomed-GPU"})
    nodes.append("doomed-0")
    resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1}
    job = submit(python_spec("orphaned", "print('ran')", resources=resources, retries=0))
    wait_until(lambda: held_launches, what="the launch to be queued")
    job.refresh_from_db()
    assert job.placements == ["doomed-0"], describe(job)

    engine.lose_node("doomed-0")
    assert tasks.launch.apply(args=held_launches.pop()).get()
    event = wait_until(
        lambda: JobEvent.objects.filter(job=job, kind="pod", reason="Unschedulable").first(),
        what="the learner to wait for its node",
    )
    # The lost node, or (under load, as on a cluster) first the checkpoint claim its binder has not bound
    # yet; the job records one event per reason, so the first message is the one kept.
    reasons = (
        "didn't match Pod's node affinity/selector",
        "pod has unbound immediate PersistentVolumeClaims",
    )
    assert any(reason in event.message for reason in reasons), event.message

    # Reconcile sees the node is gone: back to the queue at once (no PENDING_TIMEOUT_SECONDS wait), no retry.
    settings.LAUNCH_GRACE_SECONDS = 0
    assert tasks.reconcile()["requeued"] == 1
    requeue = JobEvent.objects.get(job=job, to_status="requeued")
    assert (requeue.reason, requeue.data) == ("NodeGone", {"counts": False, "infra": True}), describe(job)
    assert requeue.message == "node doomed-0 chosen for learner 0 is gone"
    wait_until(lambda: held_launches, what="the job to be admitted again")
    job.refresh_from_db()
    assert job.attempt == 2 and job.placements != ["doomed-0"], describe(job)
    tasks.launch.apply(args=held_launches.pop()).get()
    wait_status(job, "succeeded", timeout=60)

"""Pods taken away by the cluster and images that never pull, end to end on kubesim through the official
client: an eviction (as `kubectl drain` does it) requeues the job, which resumes from its checkpoint; an
image that cannot be pulled fails the job with the kubelet's reason, naming the image.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from jobs import cluster
from jobs.models import JobEvent, LogLine, MetricSample
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import CHECKPOINTED, describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def submit(document: str) -> Any:
    tenant = make_tenant()
    return job_submit(tenant=tenant, user=member(tenant), document=document)


def test_evicted_pod_requeues_the_job_which_resumes_from_its_checkpoint(engine: KubeSim) -> None:
    job = submit(python_spec("drained", CHECKPOINTED, retries=1))
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, what="three steps")
    [pod] = [p for p in cluster.job_pods(job) if not p["metadata"].get("deletionTimestamp")]
    body = k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
    )
    cluster.cluster().core.create_namespaced_pod_eviction(
        pod["metadata"]["name"], pod["metadata"]["namespace"], body
    )

    requeue = wait_until(
        lambda: JobEvent.objects.filter(job=job, to_status="requeued").first(), timeout=30, what="a requeue"
    )
    assert requeue.reason in ("Evicted", "EvictionByEvictionAPI"), describe(job)
    assert requeue.data == {"counts": True}, "an eviction is an infrastructure fault: it uses a retry"
    job = wait_status(job, "succeeded", timeout=60, logs=True)
    assert job.attempt == 2
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) >= 3


@pytest.mark.kubesim_only
def test_a_node_gone_silent_at_full_quota_requeues_the_job_which_resumes_on_another_node(
    engine: KubeSim,
) -> None:
    """The learner's node stops its heartbeat: after NODE_LOST_GRACE_SECONDS the cluster deletes the pod,
    which stays Terminating (no kubelet confirms) and holds the tenant's only GPU. The job requeues; the
    next attempt waits for that pod, force-deletes it once its grace period is over, and resumes from its
    checkpoint on a healthy node."""
    labels = {"nvidia.com/gpu.product": "Silent-GPU"}
    engine.add_gpu_node("silent-0", gpus=1, labels=labels)
    tenant = make_tenant(gpus=1)
    resources = {"cpu": "500m", "memory": "256Mi", "gpus": 1, "gpu_type": "Silent-GPU"}
    document = python_spec("partitioned", CHECKPOINTED, resources=resources, retries=1)
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, what="three steps")
    [first] = cluster.job_pods(job)
    assert {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 2,
    } in first["spec"]["tolerations"]

    engine.set_node_ready("silent-0", False)
    requeue = wait_until(
        lambda: JobEvent.objects.filter(job=job, to_status="requeued").first(), timeout=30, what="a requeue"
    )
    assert requeue.reason == "DeletionByTaintManager", describe(job)
    stranded = cluster.cluster().get_pod(
        namespace=first["metadata"]["namespace"], pod=first["metadata"]["name"]
    )
    assert stranded is not None and stranded["metadata"]["deletionTimestamp"], "Terminating on the dead node"
    engine.add_gpu_node("silent-1", gpus=1, labels=labels)
    job = wait_status(job, "succeeded", timeout=120, logs=True)
    assert job.attempt == 2
    assert (
        cluster.cluster().get_pod(namespace=first["metadata"]["namespace"], pod=first["metadata"]["name"])
        is None
    ), "the stranded pod was force-deleted"
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) >= 3
    assert not JobEvent.objects.filter(job=job, reason__in=("LaunchRefused", "QuotaBusy")).exists()
    engine.set_node_ready("silent-0", True)


@pytest.mark.kubesim_only
def test_an_image_that_cannot_be_pulled_fails_the_job_with_the_reason(engine: KubeSim, settings: Any) -> None:
    settings.IMAGE_PULL_GRACE_SECONDS = 0
    rule = engine.fail_image_pulls(r"registry\.example/missing")
    try:
        document = python_spec("no-image", "print('never')", image="registry.example/missing:1.0")
        job = wait_status(submit(document), "failed", timeout=30)
    finally:
        engine.clear_image_pull_failures(rule)
    assert job.reason in ("ErrImagePull", "ImagePullBackOff"), describe(job)
    assert "registry.example/missing:1.0" in job.message, job.message
    assert job.attempt == 1 and not LogLine.objects.filter(job=job).exists()


@pytest.mark.kubesim_only
def test_an_image_pull_that_recovers_within_the_grace_lets_the_job_run(
    engine: KubeSim, settings: Any
) -> None:
    settings.IMAGE_PULL_GRACE_SECONDS = 600
    rule = engine.fail_image_pulls(r"registry\.example/flaky")
    try:
        document = python_spec("flaky-image", "print('pulled at last')", image="registry.example/flaky:1.0")
        job = submit(document)
        event = wait_until(
            lambda: (
                JobEvent.objects.filter(job=job, kind="pod", reason__in=("ErrImagePull", "ImagePullBackOff"))
                .order_by("created_at")
                .first()
            ),
            timeout=30,
            what="the pull failure shown on the job",
        )
        assert "registry.example/flaky:1.0" in event.message
        job.refresh_from_db()
        assert job.status == "starting", describe(job)
    finally:
        engine.clear_image_pull_failures(rule)
    job = wait_status(job, "succeeded", timeout=60, logs=True)
    assert list(LogLine.objects.filter(job=job).values_list("text", flat=True)) == ["pulled at last"]
    assert job.attempt == 1


@pytest.mark.kubesim_only
def test_a_learner_whose_node_stops_answering_is_marked_within_seconds_and_runs_on_when_it_returns(
    engine: KubeSim, settings: Any
) -> None:
    settings.NODE_LOST_GRACE_SECONDS = 600  # the node comes back long before the learner would be replaced
    engine.add_gpu_node("blinking-0", gpus=1, labels={"nvidia.com/gpu.product": "Blinking-GPU"})
    resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "Blinking-GPU"}
    job = submit(python_spec("blinking", CHECKPOINTED, resources=resources))
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 2, what="two steps")
    engine.set_node_ready("blinking-0", False)
    event = wait_until(
        lambda: JobEvent.objects.filter(job=job, reason="NodeNotReady").first(), timeout=30, what="the mark"
    )
    assert "blinking-0" in event.message and "600 s" in event.message
    engine.set_node_ready("blinking-0", True)
    job = wait_status(job, "succeeded", timeout=120, logs=True)
    assert job.attempt == 1 and JobEvent.objects.filter(job=job, reason="NodeNotReady").count() == 1

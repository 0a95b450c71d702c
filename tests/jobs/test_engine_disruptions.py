"""Pods taken away by the cluster and images that never pull, end to end on kubesim through the official
client: an eviction (as `kubectl drain` does it) requeues the job, which resumes from its checkpoint; an
image that cannot be pulled fails the job with the kubelet's reason, naming the image.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from clusterio import names
from jobs import cluster, tasks
from jobs.models import JobEvent, LogLine, MetricSample
from jobs.services import job_cancel, job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import CHECKPOINTED, describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


# A learner that checkpoints each step and, told to stop (SIGTERM), keeps training for a few seconds of its
# grace period before it saves and exits: the pod stays Terminating, holding its GPU, all that time.
SLOW_TO_STOP = """
import json, os, pathlib, signal, sys, time
ck = pathlib.Path(os.environ["CHECKPOINT_DIR"]) / "step"
start = int(ck.read_text()) if ck.exists() else 0
print(f"resuming from {start}", flush=True)
told = []
signal.signal(signal.SIGTERM, lambda *_: told.append(time.monotonic()))
for step in range(start, 80):
    if told and time.monotonic() - told[0] > 3:
        print(f"stopping after step {step}", flush=True)
        sys.exit(0)
    time.sleep(0.1)
    tmp = ck.with_suffix(".tmp")
    tmp.write_text(str(step + 1))
    os.replace(tmp, ck)
    print(json.dumps({"metric": "loss", "value": 1 / (step + 1), "step": step}), flush=True)
print("finished", flush=True)
"""


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
    assert requeue.data == {"counts": False, "infra": True}, "an eviction is a disruption: no retry used"
    job = wait_status(job, "succeeded", timeout=60, logs=True)
    assert job.attempt == 2
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) >= 3


@pytest.mark.kubesim_only
def test_an_evicted_learner_slow_to_stop_at_full_gpu_quota_is_resumed_once_its_pod_is_gone(
    engine: KubeSim,
) -> None:
    """The tenant's quota is the one GPU the job uses. The evicted learner takes seconds of its grace
    period to stop, and its Terminating pod holds that GPU meanwhile (a ResourceQuota counts it): the next
    attempt waits for it instead of being refused, resumes from the last checkpoint the old one wrote,
    and succeeds; nothing of the first attempt is left in the cluster."""
    engine.add_gpu_node("slowstop-0", gpus=1, labels={"nvidia.com/gpu.product": "SlowStop-GPU"})
    try:
        tenant = make_tenant(gpus=1)
        resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "SlowStop-GPU"}
        document = python_spec("slow-to-stop", SLOW_TO_STOP, resources=resources, retries=1)
        job = job_submit(tenant=tenant, user=member(tenant), document=document)
        wait_status(job, "running")
        wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, what="three steps")
        client = cluster.cluster()
        first = {names.LABEL_JOB: names.label_value(job.pk), names.LABEL_ATTEMPT: "1"}

        def first_attempt_left() -> list[str]:
            objects = [("pods", p) for p in client.managed_pods()[0]] + [
                (kind, o) for kind in ("services", "secrets") for o in client.managed_objects(kind)
            ]
            return [
                f"{kind}/{o['metadata']['name']}"
                for kind, o in objects
                if first.items() <= ((o["metadata"].get("labels") or {}).items())
            ]

        [pod] = cluster.job_pods(job)
        meta = pod["metadata"]
        before = first_attempt_left()
        assert f"pods/{meta['name']}" in before and any(o.startswith("services/") for o in before), before
        body = k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]))
        cluster.cluster().core.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body)

        requeue = wait_until(
            lambda: JobEvent.objects.filter(job=job, to_status="requeued").first(),
            timeout=30,
            what="a requeue",
        )
        assert requeue.reason in ("Evicted", "EvictionByEvictionAPI"), describe(job)
        assert requeue.data == {"counts": False, "infra": True}, "an eviction is a disruption: no retry used"
        job = wait_status(job, "succeeded", timeout=90, logs=True)
        assert job.attempt == 2
        stopped = LogLine.objects.get(job=job, attempt=1, text__startswith="stopping after step")
        resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
        # The old learner trained on for seconds after SIGTERM; the new one started after its last save.
        assert int(resumed.text.split()[-1]) == int(stopped.text.split()[-1]) >= 3, describe(job, logs=True)
        refused = ("LaunchRefused", "QuotaBusy")
        assert not JobEvent.objects.filter(job=job, reason__in=refused).exists(), describe(job)
        assert LogLine.objects.filter(job=job, text="finished").count() == 1

        wait_until(lambda: not first_attempt_left(), timeout=30, what="attempt 1's objects to go")
    finally:
        cluster.cluster().core.delete_node("slowstop-0")


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


@pytest.mark.kubesim_only
def test_cancelling_a_job_whose_node_died_finishes_once_its_pods_grace_is_over(engine: KubeSim) -> None:
    """Teardown deletes the learner with its grace period, but no kubelet on the dead node confirms: the pod
    stays Terminating and would keep the job `cancelling` (and the tenant's GPU counted) forever. Once the
    grace period is over, reconcile force-deletes it and the cancel completes."""
    labels = {"nvidia.com/gpu.product": "Dead-GPU"}
    engine.add_gpu_node("dead-0", gpus=1, labels=labels)
    try:
        tenant = make_tenant(gpus=1)
        user = member(tenant)
        resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "Dead-GPU"}
        document = python_spec("stranded", "import time\ntime.sleep(600)", resources=resources)
        job = job_submit(tenant=tenant, user=user, document=document)
        wait_status(job, "running")
        [pod] = cluster.job_pods(job)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]

        engine.set_node_ready("dead-0", False)
        job_cancel(job=job, user=user)
        stranded = wait_until(
            lambda: (
                (cluster.cluster().get_pod(namespace=namespace, pod=name) or {})
                .get("metadata", {})
                .get("deletionTimestamp")
            ),
            what="the learner's deletion to start",
        )
        assert stranded, "Terminating on the dead node"
        job = wait_status(job, "cancelled", timeout=60, poll=tasks.reconcile)
        assert cluster.cluster().get_pod(namespace=namespace, pod=name) is None, "force-deleted"
        quota = cluster.cluster().core.read_namespaced_resource_quota_status(
            names.RESOURCE_QUOTA_NAME, namespace
        )
        assert int(quota.status.used.get("requests.nvidia.com/gpu", "0")) == 0, "the GPU is free again"
    finally:
        engine.set_node_ready("dead-0", True)
        engine.lose_node("dead-0")

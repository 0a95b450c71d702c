"""Checkpoint claims on network block disks after a node dies, end to end on kubesim: the disk stays attached to
the dead node for maxWaitForUnmountDuration after its learner is force-deleted, the next attempt's learner
waits with the Multi-Attach error meanwhile, and the job then resumes from its checkpoint on its own
(docs/operations.md, *A dead node keeps its network disks*)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from clusterio import names
from jobs import cluster
from jobs.models import JobEvent, LogLine, MetricSample
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import CHECKPOINTED, describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.kubesim_only]
WAIT_FOR_UNMOUNT = 20.0  # longer than the launch's back-off while the old pod is still there (10 s)


@pytest.fixture
def short_wait_for_unmount(engine: KubeSim) -> Iterator[None]:
    """kube-controller-manager's 6 minutes, shortened so that the test does not take them."""
    attacher = engine.cluster.attacher
    before, attacher.max_wait_for_unmount = attacher.max_wait_for_unmount, WAIT_FOR_UNMOUNT
    yield
    attacher.max_wait_for_unmount = before


def test_a_job_whose_node_died_waits_out_the_multi_attach_of_its_block_claim_and_resumes(
    engine: KubeSim, settings: Any, short_wait_for_unmount: None
) -> None:
    settings.CHECKPOINT_STORAGE_CLASS = "kubesim-block"
    labels = {"nvidia.com/gpu.product": "Attached-GPU"}
    engine.add_gpu_node("attached-0", gpus=1, labels=labels)
    engine.add_gpu_node("attached-1", gpus=1, labels=labels)
    tenant = make_tenant(gpus=2)
    resources = {"cpu": "500m", "memory": "256Mi", "gpus": 1, "gpu_type": "Attached-GPU"}
    job = job_submit(
        tenant=tenant,
        user=member(tenant),
        document=python_spec("disk", CHECKPOINTED, resources=resources, retries=2),
    )
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, what="three steps")
    [first] = cluster.job_pods(job)
    dead = first["spec"]["nodeName"]

    engine.set_node_ready(dead, False)
    wait_until(
        lambda: JobEvent.objects.filter(job=job, to_status="requeued").exists(), timeout=30, what="a requeue"
    )
    core = k8s.CoreV1Api(engine.api_client())
    namespace = first["metadata"]["namespace"]
    second = names.learner_pod_name(job.pk, 2, 0)

    def multi_attach() -> list[k8s.CoreV1Event]:
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={second}").items
        return [e for e in events if e.reason == "FailedAttachVolume" and "Multi-Attach error" in e.message]

    wait_until(multi_attach, timeout=60, what="the next learner's Multi-Attach wait")
    job = wait_status(job, "succeeded", timeout=120, logs=True)
    assert job.attempt == 2, describe(job)
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) >= 3, "the learner resumed from its checkpoint on the block claim"
    assert not JobEvent.objects.filter(
        job=job, reason__in=("LaunchRefused", "QuotaBusy", "PendingTimeout")
    ).exists()
    engine.set_node_ready(dead, True)

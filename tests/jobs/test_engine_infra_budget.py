"""Ordinary cluster operations never cost a user's retry, end to end on kubesim: evictions, a failing
admission webhook and kubelet admission rejections requeue the job within its infrastructure budget
(INFRA_RETRY_LIMIT), and only that budget spent fails it (`DisruptionBudgetExhausted`)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from jobs import cluster
from jobs.core.choices import Reason
from jobs.models import Job, JobEvent, MetricSample
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import CHECKPOINTED, describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.kubesim_only, pytest.mark.django_db(transaction=True)]

# CHECKPOINTED with room for three evictions: 60 steps of 0.1 s, resumed from the last one each time.
LONGER = CHECKPOINTED.replace("range(start, 30)", "range(start, 60)")


def submit(document: str) -> tuple[Job, str]:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    return job, cluster.namespace_for(tenant)


def stepped(job_id: str, attempt: int) -> bool:
    return MetricSample.objects.filter(job_id=job_id, attempt=attempt).count() >= 2


def requeued(job_id: str, times: int) -> bool:
    return JobEvent.objects.filter(job_id=job_id, to_status="requeued").count() == times


def requeues(job: Job) -> list[JobEvent]:
    return list(JobEvent.objects.filter(job=job, to_status="requeued").order_by("pk"))


def test_three_evictions_in_a_row_do_not_fail_a_job_with_two_retries(engine: KubeSim) -> None:
    """Through the Eviction API, by the kubelet, and by a plain delete: three disruptions, no retry used."""
    job, namespace = submit(python_spec("drained-thrice", LONGER, retries=2))
    for attempt in (1, 2, 3):
        wait_status(job, "running")
        assert job.attempt == attempt, describe(job)
        wait_until(functools.partial(stepped, job.pk, attempt), what=f"two steps of attempt {attempt}")
        [pod] = [p for p in cluster.job_pods(job) if not p["metadata"].get("deletionTimestamp")]
        name = pod["metadata"]["name"]
        if attempt == 1:  # what a drain or node upgrade does
            engine.evict_pod(namespace, name)
        elif attempt == 2:  # the kubelet under memory pressure
            engine.kubelet_evict(namespace, name)
        else:  # someone's `kubectl delete pod`
            cluster.cluster().core.delete_namespaced_pod(name, namespace)
        wait_until(functools.partial(requeued, job.pk, attempt), timeout=30, what=f"requeue {attempt}")
    job = wait_status(job, "succeeded", timeout=90)
    assert job.attempt == 4
    assert [e.data for e in requeues(job)] == [{"counts": False, "infra": True}] * 3, describe(job)
    assert [e.reason for e in requeues(job)] == ["EvictionByEvictionAPI", "Evicted", "PodDeleted"], describe(
        job
    )


def test_a_webhook_failing_for_a_while_requeues_without_a_retry_and_the_job_runs_after_it(
    engine: KubeSim,
) -> None:
    tenant = make_tenant()
    namespace = cluster.namespace_for(tenant)
    rule = engine.fail_pod_creates(namespace)
    try:
        job = job_submit(
            tenant=tenant,
            user=member(tenant),
            document=python_spec("hooked", "print('ran', flush=True)", retries=0),
        )
        requeue = wait_until(lambda: next(iter(requeues(job)), None), timeout=120, what="a requeue")
    finally:
        engine.cluster.faults.clear(rule.id)
    assert requeue.reason == Reason.CLUSTER_UNAVAILABLE, describe(job)
    assert "failed calling webhook" in requeue.message
    assert requeue.data == {"counts": False, "infra": True}, "retries: 0, yet the job was not failed"
    job = wait_status(job, "succeeded", timeout=60)
    assert job.attempt == 2


def test_a_kubelet_admission_rejection_requeues_without_a_retry(engine: KubeSim) -> None:
    tenant = make_tenant()
    namespace = cluster.namespace_for(tenant)
    rule = engine.reject_pod_admission(f"^{namespace}/", reason="OutOfnvidia.com/gpu", count=1)
    try:
        job = job_submit(
            tenant=tenant,
            user=member(tenant),
            document=python_spec("rejected", "print('ran', flush=True)", retries=0),
        )
        job = wait_status(job, "succeeded", timeout=60)
    finally:
        engine.clear_admission_rejections(rule)
    [requeue] = requeues(job)
    assert requeue.reason == "OutOfnvidia.com/gpu", describe(job)
    assert requeue.message.startswith("learner 0: Pod was rejected: Node didn't have enough resource")
    assert requeue.data == {"counts": False, "infra": True}
    assert job.attempt == 2


def test_the_disruption_budget_spent_fails_the_job_with_its_reason(engine: KubeSim, settings: Any) -> None:
    settings.INFRA_RETRY_LIMIT = 1
    tenant = make_tenant()
    namespace = cluster.namespace_for(tenant)
    rule = engine.reject_pod_admission(f"^{namespace}/", reason="UnexpectedAdmissionError")
    try:
        job = job_submit(
            tenant=tenant,
            user=member(tenant),
            document=python_spec("unlucky", "print('ran', flush=True)", retries=5),
        )
        job = wait_status(job, "failed", timeout=60)
    finally:
        engine.clear_admission_rejections(rule)
    assert job.reason == Reason.DISRUPTION_BUDGET_EXHAUSTED, describe(job)
    assert "UnexpectedAdmissionError" in JobEvent.objects.get(job=job, to_status="failed").data["last_reason"]
    assert [e.reason for e in requeues(job)] == ["UnexpectedAdmissionError"]
    assert job.attempt == 2

"""Launches that cannot succeed where admission sent them, end to end on kubesim: a tenant namespace that is
not this installation's is left alone and the job waits, saying how to resolve it; a namespace quota that
keeps refusing the pods sends the job back to the queue once (one launch chain, a bounded number of tries)
and admission stops offering it until that quota changes; a learner pinned to a node that another pod took
meanwhile is requeued (NodeTaken) and runs on another node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from jobs import cluster, tasks
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.kubesim_only]

QUICK = "print('done')"


def submit(document: str) -> Job:
    tenant = make_tenant(cpu_millis=32_000)
    return job_submit(tenant=tenant, user=member(tenant), document=document)


def core() -> k8s.CoreV1Api:
    return cluster.cluster().core


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids of every launch that reached the cluster (one per try at creating the pods)."""
    seen: list[str] = []
    launch: Callable[[Job], list[str]] = cluster.launch

    def counted(job: Job) -> list[str]:
        seen.append(job.pk)
        return launch(job)

    monkeypatch.setattr(cluster, "launch", counted)
    return seen


@pytest.fixture
def namespaces() -> Iterator[list[str]]:
    """Namespaces a test makes or makes the platform make; deleted at the end."""
    made: list[str] = []
    yield made
    for name in made:
        with contextlib.suppress(k8s.ApiException):
            core().delete_namespace(name)


def test_a_namespace_of_another_team_is_left_alone_and_the_job_waits_until_it_is_labelled(
    engine: KubeSim, namespaces: list[str], settings: Any
) -> None:
    tenant = make_tenant(cpu_millis=32_000)
    namespace = cluster.namespace_for(tenant)
    core().create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace, labels={"team": "x"})))
    namespaces.append(namespace)
    job = job_submit(tenant=tenant, user=member(tenant), document=python_spec("theirs", QUICK, retries=0))

    job = wait_status(job, "requeued")
    assert job.reason == "NamespaceNotOwned", describe(job)
    assert job.message.startswith(f"namespace {namespace} exists and is not managed by this installation: ")
    labels = core().read_namespace(namespace).metadata.labels or {}
    assert labels["team"] == "x" and not {"app.kubernetes.io/managed-by", "trainyard.io/tenant"} & set(labels)
    assert not core().list_namespaced_resource_quota(namespace).items
    assert not k8s.NetworkingV1Api(core().api_client).list_namespaced_network_policy(namespace).items
    # Held: the cycles that follow do not start it again.
    for _ in range(3):
        tasks.schedule()
    job.refresh_from_db()
    assert (job.status, job.attempt) == ("requeued", 1), describe(job)
    assert tasks.reconcile()["released"] == 0

    core().patch_namespace(namespace, {"metadata": {"labels": cluster.ownership_labels(tenant.slug)}})
    assert tasks.reconcile()["released"] == 1
    job = wait_status(job, "succeeded")
    assert job.attempt == 2 and job.events.filter(to_status="requeued").get().data == {"counts": False}


def test_a_quota_that_keeps_refusing_holds_the_job_in_the_queue_until_it_changes(
    engine: KubeSim, launches: list[str], namespaces: list[str], settings: Any
) -> None:
    settings.LAUNCH_QUOTA_RETRIES = 2
    settings.LAUNCH_GRACE_SECONDS = 0  # reconcile would relaunch a starting job with no pods at once
    tenant = make_tenant(cpu_millis=32_000)
    namespace = cluster.namespace_for(tenant)
    namespaces.append(namespace)
    cluster.cluster().ensure_tenant(
        namespace=namespace, tenant_slug=tenant.slug, limits=cluster.tenant_limits(tenant)
    )
    admin_quota = k8s.V1ResourceQuota(
        metadata=k8s.V1ObjectMeta(name="admin-pods"), spec=k8s.V1ResourceQuotaSpec(hard={"pods": "0"})
    )
    core().create_namespaced_resource_quota(namespace, admin_quota)
    job = job_submit(tenant=tenant, user=member(tenant), document=python_spec("refused", QUICK, retries=0))

    def requeued() -> Job | None:
        tasks.reconcile()  # every pass while the launch backs off: none may start a second chain
        job.refresh_from_db()
        return job if job.status == "requeued" else None

    job = wait_until(requeued, timeout=60, what="the job to go back to the queue")
    assert job.reason == "QuotaBusy" and "namespace quota admin-pods keeps refusing" in job.message, describe(
        job
    )
    assert launches == [job.pk] * (settings.LAUNCH_QUOTA_RETRIES + 1)
    assert job.events.get(to_status="requeued").data == {"counts": False}

    for _ in range(3):
        tasks.schedule()
    assert tasks.reconcile()["released"] == 0
    job.refresh_from_db()
    assert (job.status, job.attempt) == ("requeued", 1), describe(job)
    assert len(launches) == settings.LAUNCH_QUOTA_RETRIES + 1

    core().patch_namespaced_resource_quota("admin-pods", namespace, {"spec": {"hard": {"pods": "5"}}})
    assert wait_until(lambda: tasks.reconcile()["released"], what="the hold to be released") == 1
    job = wait_status(job, "succeeded")
    assert job.attempt == 2, describe(job)


def test_a_learner_whose_node_was_taken_requeues_node_taken_and_runs_on_another_node(
    engine: KubeSim, held_launches: list[tuple[Any, ...]], namespaces: list[str], settings: Any
) -> None:
    for name in ("taken-a", "taken-b"):
        engine.add_gpu_node(name, gpus=2, labels={"nvidia.com/gpu.product": "Taken-GPU"})
    others = "other-team"
    core().create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=others)))
    namespaces.append(others)
    try:
        resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "Taken-GPU"}
        job = submit(python_spec("pinned", QUICK, resources=resources, retries=0))
        wait_until(lambda: held_launches, what="the launch to be queued")
        job.refresh_from_db()
        [chosen] = job.placements
        [elsewhere] = {"taken-a", "taken-b"} - {chosen}
        # Another scheduler binds a pod of another team to the chosen node, taking both its GPUs.
        theirs = k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="their-trainer"),
            spec=k8s.V1PodSpec(
                node_name=chosen,
                restart_policy="Never",
                containers=[
                    k8s.V1Container(
                        name="main",
                        image="python:3.11",
                        command=["python", "-c", "import time; time.sleep(300)"],
                        resources=k8s.V1ResourceRequirements(
                            requests={"nvidia.com/gpu": "2", "cpu": "100m", "memory": "64Mi"},
                            limits={"nvidia.com/gpu": "2", "cpu": "100m", "memory": "64Mi"},
                        ),
                    )
                ],
            ),
        )
        core().create_namespaced_pod(others, theirs)
        tasks.launch.apply(args=held_launches.pop()).get()
        wait_until(
            lambda: JobEvent.objects.filter(job=job, kind="pod", reason="Unschedulable").first(),
            what="the learner to be unschedulable",
        )

        settings.LAUNCH_GRACE_SECONDS = 0  # what a minute after admission looks like
        assert tasks.reconcile()["requeued"] == 1
        requeue = job.events.get(to_status="requeued")
        assert requeue.reason == "NodeTaken" and requeue.data == {"counts": False, "infra": True}
        assert requeue.message == f"node {chosen} chosen for learner 0 has no room for it any more"

        wait_until(lambda: held_launches, what="the next admission")
        job.refresh_from_db()
        assert job.placements == [elsewhere], describe(job)
        tasks.launch.apply(args=held_launches.pop()).get()
        job = wait_status(job, "succeeded")
        assert job.attempt == 2
    finally:
        with contextlib.suppress(k8s.ApiException):
            core().delete_namespaced_pod("their-trainer", others, grace_period_seconds=0)
        for name in ("taken-a", "taken-b"):
            engine.lose_node(name)

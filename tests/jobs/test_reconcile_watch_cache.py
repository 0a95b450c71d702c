"""Reconcile reads copies instead of listing (issue 27, item 7): the watcher's copy of the platform's pods,
and its own copy of the attempts that may have Services or Secrets and of the checkpoint claims, resynced by
a list once per RECONCILE_RESYNC_SECONDS. With a running job and nothing to repair a round sends no request
to the cluster; when a copy shows something to repair it acts on the cluster as it is now; without a fresh
pod copy it lists pods. Real kubesim, Celery worker and watch loop (the `engine` fixture)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from clusterio import names
from clusterio.builders import make_learner_pod
from jobs import cluster, tasks
from jobs.cluster import leftovers, podsummary
from jobs.models import Job
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LISTS = ("list pods", "list services", "list secrets", "list persistentvolumeclaims")


@pytest.fixture
def from_cache(engine: KubeSim, settings: Any) -> KubeSim:
    settings.RECONCILE_FROM_WATCH_CACHE = True
    settings.RECONCILE_RESYNC_SECONDS = 3600
    podsummary.forget_turn(cluster.resync_turn())
    leftovers.clear(cluster.installation_id())
    return engine


def running_job() -> Job:
    tenant = make_tenant()
    document = python_spec("quiet", "import time\nprint('up', flush=True)\ntime.sleep(600)")
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    job = wait_status(job, "running")
    wait_until(lambda: _copied(job), what="the watcher's copy to hold the job's pod")
    return job


def _copied(job: Job) -> bool:
    pods = podsummary.read(cluster.installation_id()) or []
    return any(cluster.pod_owner(p) == (job.pk, job.attempt) for p in pods)


def _only(job: Job) -> bool:
    pods = podsummary.read(cluster.installation_id())
    return pods is not None and all(cluster.pod_owner(p) == (job.pk, job.attempt) for p in pods)


def _lists(sim: KubeSim) -> dict[str, int]:
    return {k: v for k, v in sim.request_counts().items() if k in LISTS}


def test_with_nothing_to_repair_reconcile_reads_the_copy_and_sends_no_request(from_cache: KubeSim) -> None:
    job = running_job()
    first = tasks.reconcile()
    assert first["resync"] == 1, "the first round of the period is the resync"

    from_cache.request_counts(reset=True)
    for _ in range(3):
        # The copy is fresh (published within STALE_SECONDS: on a busy machine the watcher may be late) and
        # holds this job's pod only: pods other tests of the session left are gone after the first round.
        wait_until(lambda: _only(job), what="a fresh copy with only the job's pod")
        counts = tasks.reconcile()
        assert counts["watched"] == 1 and counts["requeued"] == 0 and counts["resync"] == 0, counts
    assert _lists(from_cache) == {}, from_cache.request_counts()
    job.refresh_from_db()
    assert job.status == "running", describe(job)


def test_a_pod_of_no_active_attempt_in_the_copy_is_listed_and_deleted(from_cache: KubeSim) -> None:
    job = running_job()
    tasks.reconcile()  # the period's resync
    # A pod of an attempt that is not active (a launch that raced a requeue): its attempt is the next one.
    spec = cluster.pods_spec(job)
    orphan = make_learner_pod(spec, 0)
    orphan.metadata.name = f"{orphan.metadata.name}-stray"
    orphan.metadata.labels[names.LABEL_ATTEMPT] = str(job.attempt + 1)
    orphan.metadata.labels[names.LABEL_INSTALLATION] = cluster.installation_id()
    client = cluster.cluster()
    namespace = cluster.namespace_for(job.tenant)
    client.core.create_namespaced_pod(namespace, orphan)
    wait_until(
        lambda: any(
            cluster.pod_owner(p) == (job.pk, job.attempt + 1)
            for p in podsummary.read(cluster.installation_id()) or []
        ),
        what="the stray pod in the watcher's copy",
    )

    from_cache.request_counts(reset=True)
    counts = tasks.reconcile()
    assert counts["watched"] == 0 and counts["orphans"] == 1, counts
    # It acts on a fresh list, not on the copy (then the attempt's teardown lists what it deletes).
    assert _lists(from_cache).get("list pods", 0) >= 1
    job.refresh_from_db()
    assert job.status == "running", describe(job)


def test_without_a_fresh_copy_reconcile_lists(from_cache: KubeSim, monkeypatch: pytest.MonkeyPatch) -> None:
    running_job()
    tasks.reconcile()  # the period's resync
    monkeypatch.setattr(podsummary, "STALE_SECONDS", -1.0)
    from_cache.request_counts(reset=True)
    counts = tasks.reconcile()
    assert counts["watched"] == 0
    lists = _lists(from_cache)
    assert lists.get("list pods") == 1, lists
    assert "list persistentvolumeclaims" not in lists, "claims wait for the resync"


def test_the_resync_comes_once_per_period_across_callers(from_cache: KubeSim, settings: Any) -> None:
    assert cluster.resync_due(3600) is True
    assert cluster.resync_due(3600) is False
    settings.RECONCILE_FROM_WATCH_CACHE = False
    from_cache.request_counts(reset=True)
    tasks.reconcile()
    lists = _lists(from_cache)
    # Without the copies every round resyncs (the watch loop starting beside it lists pods too).
    assert lists.get("list persistentvolumeclaims") == 1 and lists.get("list pods", 0) >= 1, lists


def _quiet_rounds(sim: KubeSim, job: Job, rounds: int = 3) -> None:
    """`rounds` reconcile rounds between resyncs with nothing to repair: not one list of anything."""
    sim.request_counts(reset=True)
    for _ in range(rounds):
        wait_until(lambda: _only(job), what="a fresh copy with only the job's pod")
        counts = tasks.reconcile()
        assert counts["watched"] == 1 and counts["resync"] == 0 and counts["orphans"] == 0, counts
    assert _lists(sim) == {}, sim.request_counts()


def _service_exists(namespace: str, name: str) -> bool:
    return bool(
        cluster.cluster()
        .core.list_namespaced_service(namespace, field_selector=f"metadata.name={name}")
        .items
    )


def test_a_teardown_that_failed_half_way_is_finished_from_the_copy_between_resyncs(
    from_cache: KubeSim,
) -> None:
    """The job's attempt ends, its pods go, but its Service stays (a teardown that died after the pods): the
    next round tears the rest down from reconcile's copy (the launch remembered the attempt), without the
    resync's lists of every Service, Secret and claim."""
    job = running_job()
    tasks.reconcile()  # the period's resync
    _quiet_rounds(from_cache, job)

    namespace = cluster.namespace_for(job.tenant)
    service = names.service_name(job.pk, job.attempt)
    assert _service_exists(namespace, service)
    Job.objects.filter(pk=job.pk).update(status="failed")  # ended, and no teardown ran
    for pod in cluster.job_pods(job):
        cluster.cluster().delete_pod(namespace=namespace, pod=pod["metadata"]["name"], grace_seconds=0)
    wait_until(
        lambda: podsummary.read(cluster.installation_id()) is not None and not _copied(job),
        what="a fresh copy without the job's pods",
    )

    from_cache.request_counts(reset=True)
    counts = tasks.reconcile()
    assert counts["resync"] == 0 and counts["orphans"] >= 1, counts
    assert not _service_exists(namespace, service)
    lists = _lists(from_cache)
    assert "list persistentvolumeclaims" not in lists, lists  # no resync: the copy named the attempt
    assert (job.pk, job.attempt) not in leftovers.read(cluster.installation_id())[0]

    from_cache.request_counts(reset=True)
    again = tasks.reconcile()
    assert again["orphans"] == 0 and _lists(from_cache) == {}, (again, from_cache.request_counts())


def test_a_leftover_the_copy_does_not_know_waits_for_the_resync(from_cache: KubeSim) -> None:
    """A Service and a claim of a job whose row is gone, which no launch of this installation remembered:
    rounds between resyncs neither list nor touch them; the resync lists them and removes both."""
    job = running_job()
    tasks.reconcile()  # the period's resync
    namespace = cluster.namespace_for(job.tenant)
    labels = {
        **names.job_labels(job.tenant.slug, "gone0000", 1),
        names.LABEL_INSTALLATION: cluster.installation_id(),
    }
    core = cluster.cluster().core
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="ty-gone0000-a1", labels=labels),
            spec=client.V1ServiceSpec(
                cluster_ip="None", selector=labels, ports=[client.V1ServicePort(port=29500)]
            ),
        ),
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="ty-gone0000-ckpt", labels=labels),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    _quiet_rounds(from_cache, job)
    assert _service_exists(namespace, "ty-gone0000-a1")

    podsummary.forget_turn(cluster.resync_turn())  # the period is over
    from_cache.request_counts(reset=True)
    counts = tasks.reconcile()
    assert counts["resync"] == 1 and counts["orphans"] >= 2, counts
    lists = _lists(from_cache)
    assert lists.get("list persistentvolumeclaims", 0) >= 1 and lists.get("list services", 0) >= 1, lists
    assert not _service_exists(namespace, "ty-gone0000-a1")
    claims = core.list_namespaced_persistent_volume_claim(
        namespace, field_selector="metadata.name=ty-gone0000-ckpt"
    )
    assert all(c.metadata.deletion_timestamp for c in claims.items)


def test_a_pod_without_a_job_label_is_found_in_the_watchers_copy(from_cache: KubeSim) -> None:
    """A managed pod that carries no job label (nobody's) is in the watcher's copy, so a round between
    resyncs deletes it: no periodic list of pods is needed to find it."""
    job = running_job()
    tasks.reconcile()  # the period's resync
    orphan = make_learner_pod(cluster.pods_spec(job), 0)
    orphan.metadata.name = f"{orphan.metadata.name}-nobody"
    orphan.metadata.labels.pop(names.LABEL_JOB)
    orphan.metadata.labels[names.LABEL_INSTALLATION] = cluster.installation_id()
    namespace = cluster.namespace_for(job.tenant)
    cluster.cluster().core.create_namespaced_pod(namespace, orphan)
    wait_until(
        lambda: any(
            p["metadata"]["name"] == orphan.metadata.name
            for p in podsummary.read(cluster.installation_id()) or []
        ),
        what="the pod without a job label in the watcher's copy",
    )
    counts = tasks.reconcile()
    assert counts["resync"] == 0 and counts["orphans"] >= 1, counts
    pod = cluster.cluster().get_pod(namespace=namespace, pod=orphan.metadata.name)
    assert pod is None or pod["metadata"].get("deletionTimestamp"), pod

"""Reconcile reads the watcher's copy of the platform's pods (issue 27, item 7): with a running job and
nothing to repair it sends no request to the cluster; when the copy shows something to repair it lists the
cluster and acts on what is there now; without a fresh copy, and once per full pass, it lists everything.
Real kubesim, Celery worker and watch loop (the `engine` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio import names
from clusterio.builders import make_learner_pod
from jobs import cluster, tasks
from jobs.cluster import podsummary
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
    settings.RECONCILE_FULL_PASS_SECONDS = 3600
    podsummary.forget_turn(cluster.full_pass_turn())
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
    assert first["watched"] == 0, "the first round of the period is the full pass"

    from_cache.request_counts(reset=True)
    for _ in range(3):
        # The copy is fresh (published within STALE_SECONDS: on a busy machine the watcher may be late) and
        # holds this job's pod only: pods other tests of the session left are gone after the full pass.
        wait_until(lambda: _only(job), what="a fresh copy with only the job's pod")
        counts = tasks.reconcile()
        assert counts["watched"] == 1 and counts["requeued"] == 0, counts
    assert _lists(from_cache) == {}, from_cache.request_counts()
    job.refresh_from_db()
    assert job.status == "running", describe(job)


def test_a_pod_of_no_active_attempt_in_the_copy_is_listed_and_deleted(from_cache: KubeSim) -> None:
    job = running_job()
    tasks.reconcile()  # the period's full pass
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
    tasks.reconcile()  # the period's full pass
    monkeypatch.setattr(podsummary, "STALE_SECONDS", -1.0)
    from_cache.request_counts(reset=True)
    counts = tasks.reconcile()
    assert counts["watched"] == 0
    lists = _lists(from_cache)
    assert lists.get("list pods") == 1, lists
    assert "list persistentvolumeclaims" not in lists, "leftovers wait for the full pass"


def test_the_full_pass_comes_once_per_period_across_callers(from_cache: KubeSim, settings: Any) -> None:
    assert cluster.full_pass_due(3600) is True
    assert cluster.full_pass_due(3600) is False
    settings.RECONCILE_FROM_WATCH_CACHE = False
    from_cache.request_counts(reset=True)
    tasks.reconcile()
    lists = _lists(from_cache)
    # Only reconcile's full pass lists claims (the watch loop starting beside it lists pods too).
    assert lists.get("list persistentvolumeclaims") == 1 and lists.get("list pods", 0) >= 1, lists

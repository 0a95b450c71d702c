"""The engine under faults, end to end on kubesim: a launch retried after its worker died, pods that
cannot be scheduled, pods deleted behind the platform's back, orphans, the runtime cap, and two
scheduler cycles racing. Real PostgreSQL, Redis, Celery worker and watch loop (the `engine` fixture);
the reconcile loop, which beat runs in production, is called by the tests themselves.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from clusterio import names
from clusterio.builders import (
    make_datastore_secret,
    make_headless_service,
    make_job_checkpoint_pvcs,
    make_learner_pod,
)
from clusterio.capacity import NodeInfo, Resources
from clusterio.client import Cluster, ManagedKind
from jobs import cluster, scheduling, tasks
from jobs import watcher as watcher_module
from jobs.core.states import TERMINAL
from jobs.models import Job, JobEvent, LogLine, MetricSample
from jobs.scheduling import CycleResult
from jobs.services import job_cancel, job_submit, lifecycle
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import CHECKPOINTED, describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def spec(name: str, script: str, **extra: Any) -> str:
    return python_spec(name, script, **extra)


def submit(document: str) -> tuple[Job, Any]:
    tenant = make_tenant()
    user = member(tenant)
    return job_submit(tenant=tenant, user=user, document=document), user


def attempt_pods(job: Job) -> list[dict[str, Any]]:
    """The live (not terminating) pods of the job's current attempt."""
    job.refresh_from_db()
    return [p for p in cluster.job_pods(job) if not p["metadata"].get("deletionTimestamp")]


# -- a launch retried after its worker died ---------------------------------------------------------------


def test_launch_retried_after_a_worker_died_mid_launch_adopts_and_duplicates_no_pod(
    engine: KubeSim, held_launches: list[tuple[Any, ...]], settings: Any
) -> None:
    script = "import os, time\ntime.sleep(2)\nprint('learner', os.environ['RANK'], 'done')"
    job, _ = submit(spec("relaunched", script, learners=2))
    wait_until(lambda: held_launches, what="the launch to be queued")
    job.refresh_from_db()
    assert job.status == "starting" and held_launches == [(job.pk, 1)]

    # The dead worker got as far as learner 0: namespace objects, the checkpoint claims and the first pod.
    client = cluster.cluster()
    namespace = cluster.namespace_for(job.tenant)
    client.ensure_tenant(
        namespace=namespace, tenant_slug=job.tenant.slug, limits=cluster.tenant_limits(job.tenant)
    )
    for claim in make_job_checkpoint_pvcs(cluster.pods_spec(job)):
        claim.metadata.labels[names.LABEL_INSTALLATION] = cluster.installation_id()
        client.core.create_namespaced_persistent_volume_claim(namespace, claim)
    pod = make_learner_pod(cluster.pods_spec(job), 0)
    pod.metadata.labels[names.LABEL_INSTALLATION] = cluster.installation_id()
    first = client.core.create_namespaced_pod(namespace, pod)
    # The watch loop sees one pod of two: the launch is unfinished, not a lost pod.
    wait_until(
        lambda: job.learner_set.filter(index=0, phase__in=("Running", "Succeeded")).exists(),
        what="learner 0 to run",
    )
    time.sleep(0.5)
    job.refresh_from_db()
    assert job.status == "starting", describe(job)

    # The reconcile loop relaunches the half-launched attempt; a redelivered task and a direct retry race it.
    settings.LAUNCH_GRACE_SECONDS = 0
    assert tasks.reconcile()["relaunched"] == 1
    assert tasks.launch.apply(args=held_launches[0]).get() == [
        p["metadata"]["name"] for p in attempt_pods(job)
    ]
    tasks.launch.apply(args=held_launches[0]).get()
    pods = attempt_pods(job)
    assert [p["metadata"]["labels"]["trainyard.io/learner"] for p in pods] == ["0", "1"]
    assert pods[0]["metadata"]["uid"] == first.metadata.uid, "learner 0 was replaced, not adopted"

    job = wait_status(job, "succeeded", timeout=30)
    assert job.attempt == 1 and not job.events.filter(to_status="requeued").exists()
    texts = set(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert {"learner 0 done", "learner 1 done"} <= texts
    assert job.events.filter(reason="PodsCreated").count() >= 1


def test_cancel_before_any_pod_ends_at_once_and_a_launch_that_raced_it_is_torn_down(
    engine: KubeSim, held_launches: list[tuple[Any, ...]]
) -> None:
    job, user = submit(spec("raced", "import time\ntime.sleep(60)"))
    wait_until(lambda: held_launches, what="the launch to be queued")
    job.refresh_from_db()
    # The launch task has read the job as `starting` and is about to create its pods when the user cancels:
    # the teardown finds nothing to delete, and the job, holding no pod, is cancelled without waiting.
    job_cancel(job=job, user=user)
    wait_status(job, "cancelled", timeout=10)

    # The launch now creates its pods and reports them: they belong to nobody and go at once.
    created = cluster.launch(job)
    assert len(created) == 1 and attempt_pods(job)
    lifecycle.job_launched(job_id=job.pk, attempt=job.attempt, pod_names=created)
    wait_until(lambda: not attempt_pods(job), timeout=15, what="the raced pods to be deleted")
    job.refresh_from_db()
    assert job.status == "cancelled" and job.events.filter(to_status="cancelled").count() == 1


def test_reconcile_deletes_its_managed_pods_without_a_job_and_leaves_other_installations_alone(
    engine: KubeSim,
) -> None:
    job, _ = submit(spec("anchor", "print(1)"))
    wait_status(job, "succeeded", timeout=30)
    base = dataclasses.replace(
        cluster.pods_spec(job), command=["python", "-c", "import time; time.sleep(60)"]
    )
    client = cluster.cluster()
    unlabelled = make_learner_pod(dataclasses.replace(base, attempt=7), 0)
    unlabelled.metadata.name = "no-job-label"
    del unlabelled.metadata.labels[names.LABEL_JOB]
    ghost = make_learner_pod(dataclasses.replace(base, job_id="gonejob123", attempt=1), 0)
    foreign = make_learner_pod(dataclasses.replace(base, job_id="theirs1234", attempt=1), 0)
    foreign.metadata.name = theirs_name = "theirs-pod"
    foreign.metadata.labels[names.LABEL_INSTALLATION] = "staging"  # another installation's pod
    for body in (unlabelled, ghost):
        body.metadata.labels[names.LABEL_INSTALLATION] = cluster.installation_id()
    for body in (unlabelled, ghost, foreign):
        client.core.create_namespaced_pod(base.namespace, body)
    assert tasks.reconcile()["orphans"] >= 2

    def gone() -> bool:
        pods, _ = client.managed_pods()
        mine = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        return not mine & {"no-job-label", ghost.metadata.name}

    wait_until(gone, timeout=15, what="both orphans to be deleted")
    theirs = client.core.read_namespaced_pod(theirs_name, base.namespace)
    assert theirs.metadata.deletion_timestamp is None, "another installation's pod is left alone"
    other = Cluster(kubeconfig=settings.KUBECONFIG, installation="staging")
    assert [p["metadata"]["name"] for p in other.managed_pods()[0]] == [theirs_name]
    assert theirs_name not in {p["metadata"]["name"] for p in client.managed_pods()[0]}
    assert client.teardown(namespace=base.namespace, job_id="theirs1234") == 0
    assert other.teardown(namespace=base.namespace, job_id="theirs1234", grace_seconds=0) == 1
    other.close()


# -- pods that cannot be scheduled --------------------------------------------------------------------------


@pytest.mark.kubesim_only
def test_unschedulable_pod_is_reported_then_requeued_without_using_a_retry(
    engine: KubeSim, held_launches: list[tuple[Any, ...]], settings: Any
) -> None:
    # Admission sees the node untainted; it is tainted between admission and launch (a cause admission
    # cannot see), so the learner, bound to that node, cannot be scheduled.
    engine.add_gpu_node("tainted-0", gpus=1, labels={"nvidia.com/gpu.product": "Tainted-GPU"})
    core = cluster.cluster().core

    def launch_onto_a_node_tainted_meanwhile() -> None:
        wait_until(lambda: held_launches, what="the launch to be queued")
        core.patch_node(
            "tainted-0", {"spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}
        )
        tasks.launch.apply(args=held_launches.pop()).get()

    try:
        resources = {"cpu": "250m", "memory": "128Mi", "gpus": 1, "gpu_type": "Tainted-GPU"}
        job, _ = submit(spec("stuck", "print('never')", resources=resources, retries=0))
        launch_onto_a_node_tainted_meanwhile()
        wait_until(
            lambda: JobEvent.objects.filter(job=job, kind="pod", reason="Unschedulable").first(),
            what="the Unschedulable event",
        )
        # The scheduler may first name the learner's claim, still binding; the job's message follows its
        # words to the taint that really stops it.
        job = wait_until(
            lambda: Job.objects.filter(
                pk=job.pk, message__contains="untolerated taint {dedicated: x}"
            ).first(),
            what="the taint in the job's message",
        )
        assert job.status == "starting" and job.reason == "Unschedulable", describe(job)

        settings.PENDING_TIMEOUT_SECONDS = 0
        settings.LAUNCH_GRACE_SECONDS = 0  # the node still exists: not NodeGone
        assert tasks.reconcile()["requeued"] == 1
        requeue = JobEvent.objects.get(job=job, to_status="requeued")
        assert requeue.reason == "PendingTimeout" and requeue.data == {"counts": False}
        assert "untolerated taint" in requeue.message
        # retries=0: had the requeue used a retry, the job would have failed with RetriesExhausted.
        job.refresh_from_db()
        assert job.status not in TERMINAL, describe(job)
        # Back in the queue, admission sees the taint: the job waits, saying why, instead of looping.
        job = wait_until(
            lambda: Job.objects.filter(
                pk=job.pk, message__contains="taints the job does not tolerate"
            ).first(),
            what="the waiting reason",
        )
        assert "dedicated=x:NoSchedule" in job.message and job.attempt == 1, describe(job)

        # Untainted, it is admitted again, and pending again for the same reason: at PENDING_TIMEOUT_LIMIT
        # it fails with the scheduler's message.
        settings.PENDING_TIMEOUT_LIMIT = 2
        core.patch_node("tainted-0", {"spec": {"taints": []}})
        launch_onto_a_node_tainted_meanwhile()
        wait_until(
            lambda: JobEvent.objects.filter(job=job, kind="pod", reason="Unschedulable").count() >= 2,
            what="the second attempt to be unschedulable too",
        )
        wait_until(
            lambda: Job.objects.filter(pk=job.pk, message__contains="untolerated taint").first(),
            what="the taint in the job's message again",
        )
        assert tasks.reconcile()["requeued"] == 1
        job = wait_status(job, "failed")
        assert job.reason == "Unschedulable" and "untolerated taint {dedicated: x}" in job.message, describe(
            job
        )
        assert "2 times" in job.message
    finally:
        engine.lose_node("tainted-0")


# -- pods deleted behind the platform's back, and orphans ---------------------------------------------------


def test_deleted_pod_requeues_and_runs_again_and_reconcile_removes_orphans(engine: KubeSim) -> None:
    job, _ = submit(spec("victim", CHECKPOINTED))
    wait_status(job, "running")
    wait_until(lambda: MetricSample.objects.filter(job=job).count() >= 3, what="three steps")
    [pod] = attempt_pods(job)
    client = cluster.cluster()
    client.core.delete_namespaced_pod(pod["metadata"]["name"], pod["metadata"]["namespace"])

    def requeued() -> JobEvent | None:
        tasks.reconcile()
        job.refresh_from_db()
        assert job.status not in TERMINAL, f"the deleted pod ended the job: {describe(job)}"
        return JobEvent.objects.filter(job=job, to_status="requeued").first()

    requeue = wait_until(requeued, what="a requeue")
    assert requeue.reason in ("PodDeleted", "PodLost"), describe(job)
    assert requeue.data == {"counts": False, "infra": True}, "a pod deleted by someone is a disruption"
    job = wait_status(job, "succeeded")
    assert job.attempt == 2
    resumed = LogLine.objects.get(job=job, attempt=2, text__startswith="resuming from")
    assert int(resumed.text.split()[-1]) >= 3

    # A managed pod of the finished job that no attempt owns (say, created by a launch that finished after
    # the job had moved on) is an orphan: reconcile deletes it.
    stray = dataclasses.replace(
        cluster.pods_spec(job),
        attempt=job.attempt + 1,
        command=["python", "-c", "import time; time.sleep(60)"],
    )
    body = make_learner_pod(stray, 0)
    body.metadata.labels[names.LABEL_INSTALLATION] = cluster.installation_id()
    client.core.create_namespaced_pod(stray.namespace, body)
    assert tasks.reconcile()["orphans"] >= 1
    wait_until(
        lambda: not client.job_pods(namespace=stray.namespace, job_id=job.pk, attempt=stray.attempt),
        what="the orphan to be deleted",
    )
    job.refresh_from_db()
    assert (job.status, job.attempt) == ("succeeded", 2)


# -- the runtime cap -----------------------------------------------------------------------------------------


def test_max_runtime_is_enforced_with_deadline_exceeded(engine: KubeSim) -> None:
    job, _ = submit(spec("overtime", "import time\nprint('up', flush=True)\ntime.sleep(60)", max_runtime=2))
    assert job.spec["max_runtime_seconds"] == 2
    wait_status(job, "running")
    started = time.monotonic()
    job = wait_status(job, "failed", timeout=20)  # the watcher's deadline clock, no reconcile pass
    assert job.reason == "DeadlineExceeded", describe(job)
    assert time.monotonic() - started < 10
    assert job.events.filter(to_status="halting", reason="DeadlineExceeded").exists(), describe(job)
    wait_until(lambda: not cluster.job_pods(job), what="the pod to be deleted")


def test_reconcile_stops_a_job_past_its_max_runtime_when_the_watcher_did_not(
    engine: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watcher_module.Watcher, "_past_deadline", lambda *_: False)
    job, _ = submit(spec("unwatched", "import time\nprint('up', flush=True)\ntime.sleep(60)", max_runtime=2))
    job = wait_status(job, "running")
    wait_until(lambda: tasks.reconcile()["deadline"] == 1, timeout=20, what="reconcile to see the deadline")
    job = wait_status(job, "failed", timeout=30)
    assert job.reason == "DeadlineExceeded", describe(job)


# -- two scheduler cycles at once ----------------------------------------------------------------------------


def test_two_scheduler_cycles_at_once_never_admit_a_job_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "enqueue", lambda *args, **kwargs: None)
    monkeypatch.setattr("jobs.services.submit.enqueue", lambda *args, **kwargs: None)
    monkeypatch.setattr("jobs.services.control.enqueue", lambda *args, **kwargs: None)
    jobs = [submit(spec(f"queued-{i}", "print(1)"))[0] for i in range(4)]
    node = Resources(gpus=0, cpu_millis=8000, memory_mib=32768)
    nodes = [NodeInfo(name="fake-0", ready=True, gpu_type=None, allocatable=node, free=node)]

    # The first cycle pauses right after taking its snapshot (inside the lock) until the second is done.
    first_inside, second_done = threading.Event(), threading.Event()
    build = scheduling.build_snapshot

    def paused_build(**kwargs: Any) -> Any:
        snapshot = build(**kwargs)
        if not first_inside.is_set():
            first_inside.set()
            second_done.wait(timeout=10)
        return snapshot

    monkeypatch.setattr(scheduling, "build_snapshot", paused_build)
    results: dict[str, CycleResult] = {}
    errors: list[BaseException] = []

    def cycle(name: str, after: threading.Event | None) -> None:
        try:
            if after is not None:
                assert after.wait(timeout=10)
            results[name] = scheduling.run_cycle(nodes=nodes)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            if name == "second":
                second_done.set()
            connection.close()

    threads = [
        threading.Thread(target=cycle, args=("first", None)),
        threading.Thread(target=cycle, args=("second", first_inside)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    first, second = results["first"], results["second"]
    assert first.ran and sorted(first.admitted) == sorted(j.pk for j in jobs)
    assert not second.ran or not second.admitted, (first, second)
    admitted = first.admitted + second.admitted
    assert len(admitted) == len(set(admitted)), admitted
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.attempt) == ("starting", 1)
        assert job.events.filter(reason="Admitted").count() == 1


def test_a_cordoned_node_gets_no_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "enqueue", lambda *args, **kwargs: None)
    monkeypatch.setattr("jobs.services.submit.enqueue", lambda *args, **kwargs: None)
    monkeypatch.setattr("jobs.services.control.enqueue", lambda *args, **kwargs: None)
    job, _ = submit(spec("waits", "print(1)"))
    node = Resources(gpus=0, cpu_millis=8000, memory_mib=32768)
    cordoned = NodeInfo(
        name="cordoned-0", ready=True, gpu_type=None, allocatable=node, free=node, unschedulable=True
    )
    result = scheduling.run_cycle(nodes=[cordoned])
    job.refresh_from_db()
    assert result.ran and result.admitted == [] and job.status == "queued" and job.attempt == 0


# -- the database going away under the watcher ------------------------------------------------------------


def test_database_connections_killed_mid_stream_lose_no_line_and_store_none_twice(engine: KubeSim) -> None:
    script = (
        "import time\nfor i in range(40):\n    print(f'line {i}', flush=True)\n    time.sleep(0.05)\n"
        "print('waiting', flush=True)\ntime.sleep(600)"
    )
    job, user = submit(spec("streaming", script))
    wait_until(lambda: LogLine.objects.filter(job=job).count() >= 5, what="the first lines")
    with connection.cursor() as cursor:  # every other session: the watcher's, its followers', the worker's
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        assert cursor.fetchall(), "there were sessions to end"
    # The follower resumes while the learner still runs (it prints nothing more and sleeps for minutes).
    wait_until(lambda: LogLine.objects.filter(job=job, text="waiting").exists(), what="the last line")
    job.refresh_from_db()
    assert job.status == "running", describe(job)
    texts = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert texts == [f"line {i}" for i in range(40)] + ["waiting"], texts
    job_cancel(job=job, user=user)
    wait_status(job, "cancelled")


def test_reconcile_removes_services_secrets_and_claims_that_no_running_attempt_owns(engine: KubeSim) -> None:
    job, _ = submit(spec("finished", "print(1)"))
    job = wait_status(job, "succeeded", timeout=30)
    client = cluster.cluster()
    mine = {names.LABEL_INSTALLATION: cluster.installation_id()}
    # What a teardown that died half-way leaves: an attempt's Service and Secret (of an attempt that is
    # not running: the job has finished)...
    stale = dataclasses.replace(cluster.pods_spec(job), attempt=job.attempt + 1, node_names=None)
    service = make_headless_service(stale)
    service.metadata.labels.update(mine)
    labels = {**names.job_labels(job.tenant.slug, job.pk, stale.attempt), **mine}
    secret = make_datastore_secret(stale.namespace, "ty-stale-ds", labels, {})
    # ...and the claims of jobs whose rows were deleted: one per learner, or one the learners shared.
    deleted = dataclasses.replace(
        stale,
        job_id="deletedjob1",
        learners=2,
        checkpoint_learner_claims=tuple(names.checkpoint_claim_name("deletedjob1", i) for i in (0, 1)),
    )
    shared = dataclasses.replace(
        stale,
        job_id="deletedjob2",
        checkpoint_learner_claims=(),
        checkpoint_claim=names.checkpoint_claim_name("deletedjob2"),
    )
    claims = make_job_checkpoint_pvcs(deleted) + make_job_checkpoint_pvcs(shared)
    client.core.create_namespaced_service(stale.namespace, service)
    client.core.create_namespaced_secret(stale.namespace, secret)
    for claim in claims:
        claim.metadata.labels.update(mine)
        client.core.create_namespaced_persistent_volume_claim(stale.namespace, claim)
    # Another installation's leftovers are not this one's business.
    theirs_name = names.checkpoint_claim_name("theirjob1", 0)
    (theirs,) = make_job_checkpoint_pvcs(
        dataclasses.replace(stale, job_id="theirjob1", checkpoint_learner_claims=(theirs_name,))
    )
    theirs.metadata.labels[names.LABEL_INSTALLATION] = "staging"
    client.core.create_namespaced_persistent_volume_claim(stale.namespace, theirs)

    assert tasks.reconcile()["orphans"] >= 5

    KINDS: tuple[ManagedKind, ...] = ("services", "secrets", "persistentvolumeclaims")

    def left() -> set[str]:
        return {
            f"{kind}/{o['metadata']['name']}"
            for kind in KINDS
            for o in client.managed_objects(kind)
            if o["metadata"]["namespace"] == stale.namespace and not o["metadata"].get("deletionTimestamp")
        }

    wait_until(
        lambda: (
            not left()
            & {
                f"services/{service.metadata.name}",
                "secrets/ty-stale-ds",
                *(f"persistentvolumeclaims/{claim.metadata.name}" for claim in claims),
            }
        ),
        what="the leftovers to go",
    )
    assert client.core.read_namespaced_persistent_volume_claim(theirs_name, stale.namespace)


def test_a_name_held_by_someone_elses_object_fails_the_launch_with_the_apis_words(engine: KubeSim) -> None:
    tenant = make_tenant(max_running_jobs=1)
    user = member(tenant)
    blocker = job_submit(tenant=tenant, user=user, document=spec("blocker", "import time\ntime.sleep(120)"))
    # Running, not just starting: the launch has created the tenant's namespace by then (under load
    # "starting" came before it, and the squatter below could not be created).
    wait_status(blocker, "running")
    job = job_submit(tenant=tenant, user=user, document=spec("squatted", "print(1)"))  # queued behind it
    squatter = make_headless_service(dataclasses.replace(cluster.pods_spec(job), attempt=1))
    squatter.metadata.labels = {"app": "not-trainyard"}
    cluster.cluster().core.create_namespaced_service(cluster.namespace_for(tenant), squatter)
    job_cancel(job=blocker, user=user)
    job = wait_status(job, "failed", timeout=60)
    assert job.reason == "LaunchRefused" and "belongs to something else" in job.message, describe(job)

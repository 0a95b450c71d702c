"""A real Celery worker process killed (SIGKILL) in the middle of a launch: the platform recovers the
attempt with exactly one pod per learner, no extra attempt and no lost retry.

The doomed worker is a separate `celery worker` process on a queue of its own, so the test's in-process
worker cannot take the launch first. kubesim holds that worker's first pod-create request (an injected
hang), so the kill lands after the headless Service exists and while a pod create is in flight; the held
request then completes on the server, as a request to a real API server would, after its client died.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from clusterio import names
from jobs import cluster, tasks
from jobs.models import Job, LogLine
from jobs.services import job_submit, lifecycle
from jobs.services.launches import launching
from kubesim.testing import KubeSim
from portal.celery import app
from tests.conftest import ROOT
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DOOMED_QUEUE = "doomed-launches"


@pytest.fixture
def doomed_worker(engine: KubeSim) -> Iterator[subprocess.Popen[bytes]]:
    """A Celery worker process on DOOMED_QUEUE, against the test database, broker and cluster."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "DATABASE_URL": f"postgres://{db['USER'] or ''}@{db['HOST'] or ''}/{db['NAME']}",
        "REDIS_URL": django_settings.REDIS_URL,
        "KUBECONFIG": str(engine.kubeconfig_path),
    }
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker", "--pool=solo", "-Q", DOOMED_QUEUE]
    process = subprocess.Popen(
        [*command, "--loglevel=WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: app.control.ping(destination=None, timeout=0.5) and _doomed_ready(),
            timeout=60,
            what="the doomed worker to start",
        )
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def _doomed_ready() -> bool:
    queues = app.control.inspect(timeout=0.5).active_queues() or {}
    return any(q["name"] == DOOMED_QUEUE for consumed in queues.values() for q in consumed)


SCRIPT = "import os, time\ntime.sleep(1)\nprint('learner', os.environ['RANK'], 'done', flush=True)"


@pytest.mark.kubesim_only
def test_worker_killed_mid_launch_leaves_one_pod_per_learner_and_the_job_succeeds(
    engine: KubeSim, doomed_worker: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    send = lifecycle.enqueue

    def enqueue(task: str, *args: Any, countdown: float = 0) -> None:
        if task == "jobs.tasks.launch":
            connection.on_commit(lambda: app.send_task(task, args=args, queue=DOOMED_QUEUE))
        else:
            send(task, *args, countdown=countdown)

    monkeypatch.setattr(lifecycle, "enqueue", enqueue)
    hang = engine.inject_fault("POST", r"^/api/v1/namespaces/[^/]+/pods$", hang_seconds=3, count=1)
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=python_spec("killed", SCRIPT, learners=2))
    client = cluster.cluster()
    namespace = cluster.namespace_for(tenant)

    # The doomed worker has created the Service and is inside its first pod create (kubesim holds it: the
    # one-shot rule is used up): kill it there.
    wait_until(
        lambda: hang.id not in {rule.id for rule in engine.cluster.faults.rules()},
        timeout=30,
        what="the doomed worker's first pod create to reach kubesim",
    )
    os.killpg(doomed_worker.pid, signal.SIGKILL)
    doomed_worker.wait(timeout=10)
    # The held create completes on the server after its client died, as on a real API server. Waiting for it
    # here keeps it from landing after the job has ended (a pod of a finished attempt, which reconcile
    # removes as an orphan, but which this test would count as a replaced learner).
    wait_until(
        lambda: client.job_pods(namespace=namespace, job_id=job.pk), timeout=30, what="the held pod create"
    )
    job.refresh_from_db()
    assert job.status == "starting" and job.attempt == 1, describe(job)
    assert not job.events.filter(reason="PodsCreated").exists(), "the killed launch must not have finished"
    engine.cluster.faults.clear(hang.id)

    # The dead launch still holds the attempt: reconcile starts no second launch until its lease runs out.
    monkeypatch.setattr(lifecycle, "enqueue", send)
    settings.LAUNCH_GRACE_SECONDS = 0
    assert launching(job) and tasks.reconcile()["relaunched"] == 0, describe(job)
    Job.objects.filter(pk=job.pk).update(launch_lease_until=timezone.now())  # LAUNCH_LEASE_SECONDS later

    # Back to the normal worker; the reconcile loop (beat, in production) finds the half-done launch.
    seen: set[tuple[str, str]] = set()

    def reconcile_and_look() -> None:
        tasks.reconcile()
        for pod in client.job_pods(namespace=namespace, job_id=job.pk):
            seen.add((pod["metadata"]["name"], pod["metadata"]["uid"]))

    job = wait_status(job, "succeeded", timeout=60, poll=reconcile_and_look, logs=True)

    assert job.attempt == 1 and not job.events.filter(to_status="requeued").exists(), describe(job)
    expected = [names.learner_pod_name(job.pk, 1, index) for index in (0, 1)]
    assert sorted(name for name, _ in seen) == expected, f"one pod per learner, never replaced: {seen}"
    texts = list(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert sorted(texts) == ["learner 0 done", "learner 1 done"], "each learner ran exactly once"

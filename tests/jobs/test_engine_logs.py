"""Log ingest on kubesim: a job's log caps, a log flood with catastrophic metric patterns that slows no one
else, and log followers that end with their job.

Real parts throughout (PostgreSQL, the Celery worker on Redis, kubesim over HTTP through the official
client); every assertion is about the order of events, never about how long something took.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest
from django.db import IntegrityError
from django.test import Client

from clusterio import names
from clusterio.client import Cluster
from jobs import cluster, watcher
from jobs.core.choices import Reason
from jobs.core.logcaps import MARKER_PREFIX
from jobs.models import Job, Learner, LogLine
from jobs.services import job_cancel, job_submit
from kubesim.testing import KubeSim
from tests.factories import allow, make_tenant, member
from tests.jobs.engine import describe, gate_env, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# The issue's attack: eight groups of a pattern that backtracks exponentially on a line of 'a's, and a job
# printing such lines as fast as it can for a minute (the flood lasted 40 s and delayed another
# tenant's job by about 100 s: the other job must now be done, and deleted, while the flood still runs).
NASTY_METRICS = {
    "type": "regex_extractor",
    "groups": {f"g{i}": {"regex": r"(?P<loss>(.*a){12}b)", "values": ["loss"]} for i in range(8)},
}
FLOOD = """
import sys, time
chunk = ("a" * 60 + "\\n") * 100
end = time.time() + 60
while time.time() < end:
    sys.stdout.write(chunk)
    sys.stdout.flush()
"""


def texts(job: Job) -> list[str]:
    return list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


def stored_seq(job: Job) -> int:
    return Learner.objects.filter(job=job).values_list("log_seq", flat=True).first() or 0


def test_a_job_writing_past_its_log_cap_keeps_running_and_succeeds_with_one_marker(engine: KubeSim) -> None:
    tenant = allow(make_tenant(), log_max_lines=20)
    user = member(tenant)
    script = (
        "import time\nfor i in range(200):\n    print(f'line {i}')\ntime.sleep(1)\nprint('past the cap')\n"
    )
    job = job_submit(tenant=tenant, user=user, document=python_spec("chatty", script))
    job = wait_status(job, "succeeded", timeout=120, logs=True)
    lines = texts(job)
    assert lines[:20] == [f"line {i}" for i in range(20)], describe(job, logs=True)
    assert len(lines) == 21 and lines[20].startswith(MARKER_PREFIX), lines[18:]
    assert "more than 20 lines in this attempt" in lines[20]
    [truncated] = job.events.filter(reason=Reason.LOGS_TRUNCATED)
    finished = job.events.get(to_status="succeeded")
    assert truncated.pk < finished.pk, "the cap was hit while the job ran on"
    assert truncated.data["exceeded"] == "more than 20 lines in this attempt"
    client = Client()
    client.force_login(user)
    page = client.get(f"/api/v1/jobs/{job.pk}/logs/?learner=0").json()
    assert page["lines"][-1]["text"] == lines[20]


def test_the_log_follower_of_a_job_deleted_mid_ingest_ends(engine: KubeSim) -> None:
    tenant = make_tenant()
    script = "import time\nfor i in range(1200):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.05)\n"
    job = job_submit(tenant=tenant, user=member(tenant), document=python_spec("ticker", script))
    wait_until(lambda: LogLine.objects.filter(job=job).count() >= 5, 90, "the first lines to be stored")
    job.refresh_from_db()
    name = f"logs-{job.pk}-{job.attempt}-0"
    follower = wait_until(lambda: next((t for t in threading.enumerate() if t.name == name), None))
    learner = Learner.objects.get(job=job, attempt=job.attempt)
    namespace = cluster.namespace_for(job.tenant)

    def delete() -> bool:
        try:  # a delete that races a batch being committed loses at its commit: try again, as a user would
            Job.objects.filter(pk=job.pk).delete()
        except IntegrityError:
            return False
        return True

    try:
        wait_until(delete, 30, "the job's rows to be deleted")
        wait_until(lambda: not follower.is_alive(), 30, "the deleted job's log follower to end")
    finally:
        cluster.cluster().core.delete_namespaced_pod(learner.pod_name, namespace, grace_period_seconds=0)


def test_a_log_flood_with_catastrophic_patterns_slows_no_other_tenant(engine: KubeSim) -> None:
    flooder_tenant, other_tenant = make_tenant(), make_tenant()
    flooder, other = member(flooder_tenant), member(other_tenant)
    spec = python_spec("flood", FLOOD, cpu="500m", evaluation_metrics=NASTY_METRICS)
    flood = job_submit(tenant=flooder_tenant, user=flooder, document=spec)
    try:
        wait_status(flood, "running", timeout=120)
        wait_until(lambda: stored_seq(flood) > 500, 120, "the flood to be ingested")

        learner = Learner.objects.get(job=flood)
        namespace = cluster.namespace_for(flood.tenant)

        def flooding() -> None:
            pod = cluster.cluster().core.read_namespaced_pod(learner.pod_name, namespace)
            assert pod.status.phase == "Running", f"the flood ended first: {describe(flood)}"

        quick = job_submit(tenant=other_tenant, user=other, document=python_spec("quick", "print('hello')"))
        quick = wait_status(quick, "succeeded", timeout=120, poll=flooding)
        assert texts(quick) == ["hello"]
        at_success = stored_seq(flood)

        client = Client()
        client.force_login(other)
        assert client.delete(f"/api/v1/jobs/{quick.pk}/").status_code == 204
        assert not Job.objects.filter(pk=quick.pk).exists()
        flooding()
        wait_until(lambda: stored_seq(flood) > at_success, 60, "the flood's ingest to go on")
        flooding()
        truncated = flood.events.filter(reason=Reason.LOGS_TRUNCATED)
        assert truncated.count() == 1 and "in one second" in truncated.get().data["exceeded"]
    finally:
        flood.refresh_from_db()
        if flood.status not in ("succeeded", "failed", "cancelled"):
            job_cancel(job=flood, user=flooder)
    wait_status(flood, "cancelled", timeout=120)


def test_a_job_whose_log_is_still_being_stored_holds_up_no_other_job(
    engine: KubeSim, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """A job is declared finished only once its log is stored to the end; while its follower is still at it
    (a flood's backlog, here a batch held back), the watch loop goes on with everyone else's events."""
    slow_tenant, other_tenant = make_tenant(), make_tenant()
    slow = job_submit(
        tenant=slow_tenant, user=member(slow_tenant), document=python_spec("slow", "print('last')")
    )
    gate = threading.Event()
    store = watcher.logs_append

    def held(**batch: Any) -> Any:
        if batch["job_id"] == slow.pk:
            gate.wait(120)
        return store(**batch)

    monkeypatch.setattr(watcher, "logs_append", held)
    settings.LOG_DRAIN_SECONDS = 120.0
    try:
        learner = wait_until(lambda: Learner.objects.filter(job=slow).exclude(pod_name="").first(), 90)
        namespace = cluster.namespace_for(slow.tenant)

        def pod_ended() -> bool:
            pod = cluster.cluster().core.read_namespaced_pod(learner.pod_name, namespace)
            return pod.status.phase == "Succeeded"

        wait_until(pod_ended, 90, "the slow job's pod to end")
        other = member(other_tenant)
        quick = job_submit(tenant=other_tenant, user=other, document=python_spec("quick", "print('hello')"))
        wait_status(quick, "succeeded", timeout=90)
        slow.refresh_from_db()
        assert slow.status == "running" and not texts(slow), describe(slow)
    finally:
        gate.set()
    slow = wait_status(slow, "succeeded", timeout=60)
    assert texts(slow) == ["last"]


LAST_WORDS = """
import os, socket, time
gate = (os.environ.get("GATE_HOST", "127.0.0.1"), int(os.environ["GATE_PORT"]))
with socket.create_connection(gate, timeout=120) as s:
    print("holding", flush=True)
    s.recv(1)
    for i in range(5):
        print(f"printed while the API server was down {i}", flush=True)
    s.sendall(b"y")
    time.sleep(300)
"""


def test_a_requeued_attempt_keeps_the_lines_its_follower_had_not_read_when_its_pod_failed(
    engine: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's kubesim restart: every log stream is cut, the learner prints on and its pod fails (here a
    kubelet eviction: a disruption, so the job goes back to the queue). The requeue's teardown deletes the
    pod, whose log cannot be read after that: the watcher lets the follower read it to its end first. The
    follower's reconnection is held until the watcher has either started that wait or (without it) requeued
    the job and deleted the pod, so the race the issue lost is run the same way every time."""
    tenant = make_tenant()
    hold, released = threading.Event(), threading.Event()
    follow_log = Cluster.follow_log

    def held_follow_log(self: Cluster, **request: Any) -> Any:
        if hold.is_set() and request.get("pod") == pod:
            released.wait(60)
        return follow_log(self, **request)

    monkeypatch.setattr(Cluster, "follow_log", held_follow_log)
    with socket.create_server(("127.0.0.1", 0)) as gate:
        gate.settimeout(120)
        document = python_spec("last-words", LAST_WORDS, env=gate_env(engine, gate.getsockname()[1]))
        user = member(tenant)
        job = job_submit(tenant=tenant, user=user, document=document)
        conn, _ = gate.accept()
        with conn:
            wait_until(lambda: texts(job) == ["holding"], 60, "the first line to be stored")
            job.refresh_from_db()
            pod, namespace = names.learner_pod_name(job.pk, job.attempt, 0), cluster.namespace_for(tenant)
            hold.set()
            engine.stop_api_server()
            try:
                conn.sendall(b"x")
                assert conn.recv(1) == b"y"
                engine.kubelet_evict(namespace, pod)
            finally:
                engine.start_api_server()

            def draining_or_torn_down() -> bool:
                if any(t.name == f"drain-{job.pk}-1" for t in threading.enumerate()):
                    return True
                return job.events.filter(to_status="requeued").exists() and not cluster.job_pods(job)

            try:
                wait_until(draining_or_torn_down, 60, "the watcher to wait for the log, or to tear down")
            finally:
                released.set()
            requeued = wait_until(
                lambda: job.events.filter(to_status="requeued").first(), 60, "the job to be requeued"
            )
            stored = list(
                LogLine.objects.filter(job=job, attempt=1).order_by("seq").values_list("text", flat=True)
            )
            assert stored == ["holding", *(f"printed while the API server was down {i}" for i in range(5))]
            assert requeued.reason == "Evicted", describe(job)
    job_cancel(job=Job.objects.get(pk=job.pk), user=user)
    wait_status(job, "cancelled", timeout=60)


def test_the_log_follower_of_a_cancelled_flood_stops_once_the_job_is_cancelled(engine: KubeSim) -> None:
    """The issue saw ingest go on after a cancel at ~10k lines/s until the watcher restarted: now the
    follower stops within seconds of the job's end, whatever backlog the flood left."""
    tenant = allow(make_tenant(), log_max_lines=1000)
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=python_spec("flood", FLOOD))
    wait_until(lambda: stored_seq(job) >= 1000, 90, "the flood to reach its cap")
    job.refresh_from_db()
    follower = wait_until(
        lambda: next((t for t in threading.enumerate() if t.name == f"logs-{job.pk}-1-0"), None)
    )
    job_cancel(job=job, user=user)
    wait_status(job, "cancelled", timeout=60)
    wait_until(lambda: not follower.is_alive(), 10, "the cancelled job's log follower to stop")
    learner = Learner.objects.get(job=job)
    assert learner.log_lines == 1001 and texts(job)[-1].startswith(MARKER_PREFIX)

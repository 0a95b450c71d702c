"""Idle GPUs end to end on kubesim: a held GPU job, the cluster's DCGM exporter played by a local HTTP server
that answers with the recorded series (tests/jobs/data/dcgm_idle_gpu_series.json, one reading per request:
busy, then idle), telemetry looks as the beat task takes them, and the idle-GPU check as its beat task runs
it. Under a tenant policy that halts at once, the job is flagged, its owner notified, and it is halted
through the halt path (its pods stopped, its GPU free), ready to be resumed. kubesim's GPUs are simulated
and no GPU machine was available: the utilisation is the recorded series', not a real GPU's."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest
from django.test import Client, override_settings

from clusterio import names
from jobs.cluster import namespace_for
from jobs.core.choices import EventKind, Reason
from jobs.models import Job, TelemetrySample
from jobs.notifications.models import Notification
from jobs.notifications.services import subscription_create
from jobs.services import job_submit
from jobs.services.idlegpu import idle_gpu_check_running
from jobs.telemetry import telemetry_record_running
from kubesim.testing import KubeSim
from tenants.models import Policy
from tests.factories import make_tenant, member
from tests.jobs.engine import HOLD, gate_env, python_spec, wait_status
from tests.local_http import serving

SERIES = json.loads((Path(__file__).parent / "data" / "dcgm_idle_gpu_series.json").read_text())
BUSY_READINGS = [r["metrics"] for r in SERIES["readings"] if r["t"] <= SERIES["busy_until_t"]][:2]
IDLE_READINGS = [r["metrics"] for r in SERIES["readings"] if r["t"] > SERIES["busy_until_t"]]


@pytest.mark.kubesim_only  # the learner connects to this host's loopback (GATE_PORT): kubesim pods share it
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_idle_gpu_job_is_flagged_notified_and_halted_by_its_tenants_policy(
    engine: KubeSim, client: Client
) -> None:
    tenant = make_tenant()
    Policy.objects.create(tenant=tenant, idle_gpu_halt_after_seconds=0)
    alice = member(tenant, username="alice")
    subscription_create(
        user=alice, tenant=tenant, name="mail", channel="email", email="a@example.com", events=["idle_gpu"]
    )
    with socket.create_server(("127.0.0.1", 0)) as gate:
        gate.settimeout(120)
        document = json.loads(python_spec("gpu-idle", HOLD, env=gate_env(engine, gate.getsockname()[1])))
        document["resources"]["gpus"] = 1
        job = job_submit(tenant=tenant, user=alice, document=document)
        conn, _ = gate.accept()
        with conn:
            job = wait_status(job, "running", timeout=60)
            namespace, pod = namespace_for(tenant), names.learner_pod_name(job.pk, job.attempt, 0)
            readings, lock = [*BUSY_READINGS, *IDLE_READINGS], threading.Lock()

            def next_reading() -> str:  # one reading per request: busy, then idle (the last one once done)
                with lock:
                    text = readings.pop(0) if len(readings) > 1 else readings[0]
                return text.replace("{namespace}", namespace).replace("{pod}", pod)

            idle = {
                "IDLE_GPU_THRESHOLD": 0.05,
                "IDLE_GPU_WINDOW_SECONDS": 1.0,
                "TELEMETRY_INTERVAL_SECONDS": 0.5,
            }
            with serving(next_reading) as url, override_settings(GPU_METRICS_URLS=[url], **idle):

                def look() -> None:  # as the two beat tasks do
                    telemetry_record_running()
                    idle_gpu_check_running()

                job = wait_status(job, "halting", "halted", timeout=90, poll=look)
            assert job.reason == Reason.IDLE_GPU_HALTED and "idle-GPU policy" in job.message
            busy = TelemetrySample.objects.filter(job=job, gpu_util__gte=0.8)
            assert busy.exists() and TelemetrySample.objects.filter(job=job, gpu_util__lt=0.05).exists()
            flag = job.events.get(kind=EventKind.GPU, reason=Reason.IDLE_GPU)
            assert flag.data["attempt"] == job.attempt and flag.data["peak"] < 0.05
            (note,) = Notification.objects.filter(job=job, event="idle_gpu")
            assert "has idle GPUs" in note.payload["text"]
            job = wait_status(Job.objects.get(pk=job.pk), "halted", timeout=60)
            assert job.reason == Reason.IDLE_GPU_HALTED
        client.force_login(alice)
        page = client.get(f"/jobs/{job.pk}/").content.decode()
        assert "IdleGpuHalted" in page and "Resume" in page

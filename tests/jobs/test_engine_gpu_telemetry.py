"""GPU telemetry for a GPU job on kubesim: the platform reads the cluster's DCGM exporter (here a local HTTP
server answering with dcgm-exporter output for the job's own pod), stores each learner's GPU utilisation
with its telemetry look, and the job page shows it; without an exporter the page says the cluster does not
expose it. kubesim's GPUs are simulated, so the exporter's numbers are the recorded sample's
(tests/clusterio/data/dcgm_exporter_metrics.txt), not a real GPU's."""

from __future__ import annotations

import json
import socket
import time

import pytest
from django.test import Client, override_settings

from clusterio import names
from jobs.cluster import namespace_for
from jobs.models import Job, TelemetrySample
from jobs.services import job_submit
from jobs.telemetry import telemetry_record_running
from kubesim.testing import KubeSim
from tests.clusterio.test_gpumetrics import exporter_output
from tests.factories import make_job, make_tenant, member
from tests.jobs.engine import HOLD, gate_env, python_spec, wait_status
from tests.local_http import serving


@pytest.mark.kubesim_only  # the learner connects to this host's loopback (GATE_PORT): kubesim pods share it
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_gpu_jobs_utilisation_is_read_from_the_dcgm_exporter_and_shown(
    engine: KubeSim, client: Client
) -> None:
    tenant = make_tenant()
    alice = member(tenant, username="alice")
    with socket.create_server(("127.0.0.1", 0)) as gate:
        gate.settimeout(120)
        document = json.loads(python_spec("gpu-held", HOLD, env=gate_env(engine, gate.getsockname()[1])))
        document["resources"]["gpus"] = 1
        job = job_submit(tenant=tenant, user=alice, document=document)
        conn, _ = gate.accept()
        with conn:
            job = wait_status(job, "running", timeout=60)
            pod = names.learner_pod_name(job.pk, job.attempt, 0)
            body = exporter_output(namespace=namespace_for(tenant), pod=pod)
            with serving(lambda: body) as url, override_settings(GPU_METRICS_URLS=[url]):
                deadline = time.monotonic() + 60
                while not TelemetrySample.objects.filter(job=job, gpu_util__isnull=False).exists():
                    assert time.monotonic() < deadline, "no telemetry look with GPU utilisation"
                    telemetry_record_running()  # as the beat task does; waits for kubesim's first metrics
                sample = TelemetrySample.objects.filter(job=job, gpu_util__isnull=False).latest("ts")
                assert sample.gpu_util == pytest.approx(0.83) and sample.learner == 0
                client.force_login(alice)
                page = client.get(f"/jobs/{job.pk}/").content.decode()
                assert "GPU utilisation: <strong>83 %</strong>" in page
            conn.sendall(b"x")
        wait_status(Job.objects.get(pk=job.pk), "succeeded", timeout=60)


@pytest.mark.django_db
def test_the_job_page_says_when_the_cluster_does_not_expose_gpu_utilisation(client: Client) -> None:
    tenant = make_tenant()
    alice = member(tenant, username="alice")
    gpu_job = make_job(tenant, alice, gpus=1)
    cpu_job = make_job(tenant, alice)
    client.force_login(alice)
    with override_settings(GPU_METRICS_URLS=[]):
        page = client.get(f"/jobs/{gpu_job.pk}/").content.decode()
        assert "GPU utilisation: not exposed by this cluster" in page
        assert "data-gpu-util" not in client.get(f"/jobs/{cpu_job.pk}/").content.decode()
    with override_settings(GPU_METRICS_URLS=["http://dcgm-exporter.gpu-operator:9400/metrics"]):
        page = client.get(f"/jobs/{gpu_job.pk}/").content.decode()
        assert "GPU utilisation: no reading yet" in page

"""Private registries end to end (issue 30's "a job whose image needs a pull secret runs only when the tenant
has one"): on kubesim with registry.example.com private, a job whose image is there fails with ErrImagePull
while its tenant has no credentials for the host; once an owner adds them, a job's pods name the attempt's
dockerconfigjson Secret in imagePullSecrets, pull and succeed (the Secret goes with the attempt), and a retry
of the refused job runs."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

from clusterio import names
from jobs import cluster
from jobs.models import LogLine
from jobs.services import job_retry, job_submit
from kubesim.testing import KubeSim
from tenants.registries import registry_credential_create
from tests.factories import allow, make_tenant, member
from tests.jobs.engine import HOLD, describe, gate_env, python_spec, wait_status, wait_until
from tests.jobs.test_engine_datastores import _read_secret

HOST = "registry.example.com"
IMAGE = f"{HOST}/team/train:1"
PASSWORD = "registry-Token-42"


@pytest.mark.kubesim_only
def test_a_job_whose_image_needs_a_pull_secret_runs_only_when_the_tenant_has_one(
    engine: KubeSim, settings: Any
) -> None:
    settings.IMAGE_PULL_GRACE_SECONDS = 0
    tenant = allow(make_tenant(), image_registries=[f"{HOST}/*"])
    owner, user = member(tenant, "owner"), member(tenant)
    engine.add_private_registry(HOST, "robot", PASSWORD)
    try:
        document = python_spec("private-image", "print('pulled and ran')", image=IMAGE)
        refused = wait_status(job_submit(tenant=tenant, user=user, document=document), "failed", timeout=30)
        assert refused.reason in ("ErrImagePull", "ImagePullBackOff"), describe(refused)
        assert "401 Unauthorized" in refused.message and IMAGE in refused.message, refused.message
        assert f"tenant {tenant.slug} has no registry credentials for {HOST}" in refused.message
        assert not LogLine.objects.filter(job=refused).exists()

        registry_credential_create(
            tenant=tenant,
            user=owner,
            name="team",
            host=HOST,
            values={"username": "robot", "password": PASSWORD},
        )
        with socket.create_server(("127.0.0.1", 0)) as gate:
            gate.settimeout(120)
            held = json.loads(python_spec("private-image", HOLD, image=IMAGE))
            held["env"] = gate_env(engine, gate.getsockname()[1])
            job = job_submit(tenant=tenant, user=user, document=held)
            conn, _ = gate.accept()  # the learner runs: its image pulled
            with conn:
                job.refresh_from_db()  # admitted: its attempt is set
                core = cluster.cluster().core
                namespace = cluster.namespace_for(tenant)
                name = names.pull_secret_name(job.pk, job.attempt)
                secret = _read_secret(core, name, namespace)
                assert secret is not None and secret.type == "kubernetes.io/dockerconfigjson"
                config = json.loads(base64.b64decode(secret.data[".dockerconfigjson"]))
                assert base64.b64decode(config["auths"][HOST]["auth"]).decode() == f"robot:{PASSWORD}"
                assert secret.metadata.labels[names.LABEL_JOB] == names.label_value(job.pk)
                pod = core.read_namespaced_pod(names.learner_pod_name(job.pk, job.attempt, 0), namespace)
                assert [ref.name for ref in pod.spec.image_pull_secrets] == [name]
                assert PASSWORD not in json.dumps(core.api_client.sanitize_for_serialization(pod))
                conn.sendall(b"x")
        job = wait_status(job, "succeeded", timeout=60, logs=True)
        assert list(LogLine.objects.filter(job=job).values_list("text", flat=True)) == ["holding", "released"]
        wait_until(lambda: _read_secret(core, name, namespace) is None, what="the pull Secret to be deleted")

        retried = wait_status(job_retry(job=refused, user=user), "succeeded", timeout=60, logs=True)
        assert list(LogLine.objects.filter(job=retried).values_list("text", flat=True)) == ["pulled and ran"]
    finally:
        engine.remove_private_registry(HOST)

"""Private registries end to end (issue 30's "a job whose image needs a pull secret runs only when the tenant
has one"): on kubesim with registry.example.com private, a job whose image is there fails with ErrImagePull
while its tenant has no credentials for the host; once an owner adds them, the retried job's pods name the
attempt's dockerconfigjson Secret in imagePullSecrets, pull and succeed, and the Secret goes with the attempt."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from clusterio import names
from jobs import cluster
from jobs.models import LogLine
from jobs.services import job_retry, job_submit
from kubesim.testing import KubeSim
from tenants.registries import registry_credential_create
from tests.factories import allow, make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until
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
        job = job_retry(job=refused, user=user)
        wait_status(job, "starting", "running", "succeeded", timeout=30)
        core = cluster.cluster().core
        namespace = cluster.namespace_for(tenant)
        name = names.pull_secret_name(job.pk, job.attempt)
        secret = wait_until(lambda: _read_secret(core, name, namespace), what="the pull Secret")
        assert secret.type == "kubernetes.io/dockerconfigjson"
        config = json.loads(base64.b64decode(secret.data[".dockerconfigjson"]))
        assert base64.b64decode(config["auths"][HOST]["auth"]).decode() == f"robot:{PASSWORD}"
        assert secret.metadata.labels[names.LABEL_JOB] == names.label_value(job.pk)
        pod = core.read_namespaced_pod(names.learner_pod_name(job.pk, job.attempt, 0), namespace)
        assert [ref.name for ref in pod.spec.image_pull_secrets] == [name]
        assert PASSWORD not in json.dumps(core.api_client.sanitize_for_serialization(pod))

        job = wait_status(job, "succeeded", timeout=60, logs=True)
        assert list(LogLine.objects.filter(job=job).values_list("text", flat=True)) == ["pulled and ran"]
        wait_until(lambda: _read_secret(core, name, namespace) is None, what="the pull Secret to be deleted")
    finally:
        engine.remove_private_registry(HOST)

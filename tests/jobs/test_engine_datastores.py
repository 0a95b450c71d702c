"""Data-store credentials from an FfDL manifest, end to end on kubesim: sealed at rest, a Secret in the
tenant's namespace for the attempt, referenced by the pods (never a literal), readable by the learner as
env, absent from the API's answers, deleted with the attempt, and carried over to a retry.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.core.exceptions import ImproperlyConfigured
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from rest_framework.test import APIClient

from clusterio import names
from clusterio.builders import make_learner_pod
from jobs import cluster
from jobs.credentials import seal, unseal
from jobs.models import Job, JobCredentials, LogLine
from jobs.services import JobRejected, job_retry, job_submit
from kubesim.testing import KubeSim
from tests.clusters import pod_url
from tests.factories import allow, make_tenant, member
from tests.jobs.engine import wait_status, wait_until

PASSWORD = "s3cr3t-Pa55word"
DIGEST = hashlib.sha256(PASSWORD.encode()).hexdigest()[:16]

TEMPLATE = f"""
name: ffdl-with-store
version: "1.0"
gpus: 0
cpus: 0.25
memory: 128MiB
learners: 1
data_stores:
  - id: cos
    type: mount_cos
    training_data: {{container: datasets}}
    connection: {{auth_url: "S3_URL", user_name: keyid, password: {PASSWORD}}}
framework:
  name: custom
  version: "python:3.11"
  command: >-
    python -c "import hashlib, os; k = os.environ['COS_SECRET_ACCESS_KEY'].encode();
    print('secret', len(k), hashlib.sha256(k).hexdigest()[:16] == '{DIGEST}', os.environ['COS_ACCESS_KEY_ID'])"
"""
# Where the data store is: a real S3 API (the learner's data is downloaded from it before it starts).
MANIFEST = TEMPLATE.replace("S3_URL", "http://s3.example.test")


def test_sealed_credentials_open_only_with_the_key_and_keys_rotate(settings: Any) -> None:
    creds = {"cos": {"secret_access_key": PASSWORD}}
    token = seal(creds)
    assert PASSWORD not in token and unseal(token) == creds
    old = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
    settings.CREDENTIALS_KEY = old
    sealed_with_old = seal(creds)
    settings.CREDENTIALS_KEY = "Zm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyMTI=," + old
    assert unseal(sealed_with_old) == creds, "an old key must still open what it sealed"
    settings.CREDENTIALS_KEY = "Zm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyZm9vYmFyMTI="
    with pytest.raises(ImproperlyConfigured):
        unseal(sealed_with_old)


@pytest.mark.django_db
def test_credentials_that_collide_as_env_names_are_refused_and_nothing_stored() -> None:
    tenant = make_tenant()
    stores = "\n".join(
        f"  - id: {store}\n    type: mount_cos\n    training_data: {{container: b}}\n"
        f"    connection: {{auth_url: 'http://s3', user_name: u, password: p}}"
        for store in ("a-b", "a_b")
    )
    manifest = (
        MANIFEST.split("data_stores:")[0] + "data_stores:\n" + stores + "\nframework:\n  name: custom\n"
    )
    manifest += '  version: "python:3.11"\n  command: "true"\n'
    with pytest.raises(JobRejected) as info:
        job_submit(tenant=tenant, user=member(tenant), document=manifest)
    assert "both map to A_B_ACCESS_KEY_ID" in " ".join(info.value.errors["data_stores"])
    assert not Job.objects.exists() and not JobCredentials.objects.exists()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_ffdl_credentials_reach_the_learner_through_a_secret_and_nowhere_else(
    engine: KubeSim, s3_server: str
) -> None:
    s3_url = pod_url(engine, s3_server)  # moto's server, on this machine
    tenant = allow(make_tenant(), datastore_hosts=[urlsplit(s3_url).hostname])
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=TEMPLATE.replace("S3_URL", s3_url))
    row = JobCredentials.objects.get(job=job)
    assert PASSWORD not in row.sealed and row.stores == ["cos"]
    assert PASSWORD not in json.dumps(job.spec)

    wait_status(job, "starting", "running", "succeeded")
    core = cluster.cluster().core
    namespace = cluster.namespace_for(tenant)
    secret_name = names.datastore_secret_name(job.pk, 1)
    secret = wait_until(lambda: _read_secret(core, secret_name, namespace), what="the Secret")
    assert base64.b64decode(secret.data["COS_SECRET_ACCESS_KEY"]).decode() == PASSWORD

    job = wait_status(job, "succeeded", timeout=60, logs=True)
    texts = list(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert texts == ["secret 15 True keyid"], texts

    pod = cluster.pods_spec(job)
    body = json.dumps(ApiClient().sanitize_for_serialization(make_learner_pod(pod, 0)))
    assert PASSWORD not in body and "keyid" not in body
    refs = [e for e in json.loads(body)["spec"]["containers"][0]["env"] if "valueFrom" in e]
    assert {e["name"] for e in refs} == {
        "COS_ACCESS_KEY_ID",
        "COS_SECRET_ACCESS_KEY",
        "TRAINYARD_ARTIFACT_TOKEN",
    }
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in refs} == {secret_name}

    api = APIClient()
    api.force_authenticate(user)
    for path in (f"/api/v1/jobs/{job.pk}/", f"/api/v1/jobs/{job.pk}/events/", "/api/v1/jobs/"):
        answer = api.get(path)
        assert answer.status_code == 200 and PASSWORD not in answer.content.decode(), path
    assert PASSWORD not in json.dumps(list(job.events.values_list("message", "data")))

    wait_until(lambda: _read_secret(core, secret_name, namespace) is None, what="the Secret to be deleted")

    again = job_retry(job=job, user=user)
    assert JobCredentials.objects.get(job=again).stores == ["cos"]
    again = wait_status(again, "succeeded", timeout=60, logs=True)
    assert list(LogLine.objects.filter(job=again).values_list("text", flat=True)) == ["secret 15 True keyid"]


def _read_secret(core: Any, name: str, namespace: str) -> Any:
    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise

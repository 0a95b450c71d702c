"""A tenant's data-store secret end to end on kubesim: a spec names it in `volumes[].secret`, the launch opens
its values into the attempt's data-store Secret in the tenant's namespace (as an FfDL manifest's inline
credentials), the `fetch` init container downloads the S3 volume from a real S3 API (moto's server) with
them, the learner reads them as env; a rotation applies to the next launch; a secret deleted behind the
409's back fails the launch clearly."""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes.client import ApiClient

from clusterio import names
from clusterio.builders import make_learner_pod
from jobs import cluster
from jobs.models import JobCredentials, LogLine
from jobs.services import JobRejected, job_cancel, job_retry, job_submit
from kubesim.network import HOST_NAME
from kubesim.testing import KubeSim
from tenants.models import DataStoreSecret
from tenants.secrets import MissingSecret, SecretRefused, datastore_secret_create, datastore_secret_rotate
from tests.clusters import pod_url
from tests.factories import allow, make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until
from tests.jobs.test_engine_datastores import _read_secret

KEY_ID = "AKIATEAMDATA"
SECRET = "team-data-Secret-Value-1"
ROTATED = "team-data-Secret-Value-2"

SCRIPT = """
import os
points = open(os.path.join(os.environ["DATA_DIR"], "points.csv")).read().splitlines()
print("rows", len(points), points[1])
print("key", os.environ["TEAM_DATA_ACCESS_KEY_ID"], len(os.environ["TEAM_DATA_SECRET_ACCESS_KEY"]))
"""


def spec(s3_url: str) -> dict[str, Any]:
    return {
        "name": "team-data-reader",
        "image": "python:3.11",
        "command": ["python", "-u", "-c", SCRIPT],
        "resources": {"cpu": "250m", "memory": "256Mi"},
        "volumes": [
            {
                "name": "toy",
                "kind": "data",
                "type": "s3",
                "bucket": "datasets",
                "prefix": "toy/",
                "endpoint": s3_url,
                "mount_path": "/data",
                "secret": "team-data",
            }
        ],
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_tenant_secret_reaches_the_pod_secret_and_the_s3_fetch(engine: KubeSim, s3_server: str) -> None:
    s3_url = pod_url(engine, s3_server)  # moto's server, on this machine
    tenant = allow(make_tenant(), datastore_hosts=[urlsplit(s3_url).hostname])
    owner = member(tenant, "owner")
    values = {"access_key_id": KEY_ID, "secret_access_key": SECRET}
    datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=values)
    job = job_submit(tenant=tenant, user=member(tenant), document=spec(s3_url))
    assert not JobCredentials.objects.filter(job=job).exists()  # nothing copied: opened at launch

    wait_status(job, "starting", "running", "succeeded")
    core = cluster.cluster().core
    namespace = cluster.namespace_for(tenant)
    secret_name = names.datastore_secret_name(job.pk, 1)
    secret = wait_until(lambda: _read_secret(core, secret_name, namespace), what="the Secret")
    assert base64.b64decode(secret.data["TEAM_DATA_SECRET_ACCESS_KEY"]).decode() == SECRET
    assert base64.b64decode(secret.data["TEAM_DATA_ACCESS_KEY_ID"]).decode() == KEY_ID

    job = wait_status(job, "succeeded", timeout=90, logs=True)
    texts = list(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert texts == ["rows 20 0.1,1.2", f"key {KEY_ID} {len(SECRET)}"], texts
    body = json.dumps(ApiClient().sanitize_for_serialization(make_learner_pod(cluster.pods_spec(job), 0)))
    assert SECRET not in body and KEY_ID not in body

    datastore_secret_rotate(
        secret=DataStoreSecret.objects.get(),
        user=owner,
        values={"access_key_id": "AKIAROT", "secret_access_key": ROTATED},
    )
    again = job_retry(job=job, user=owner)
    assert not JobCredentials.objects.filter(job=again).exists()
    again = wait_status(again, "succeeded", timeout=90, logs=True)
    texts = list(LogLine.objects.filter(job=again).values_list("text", flat=True))
    assert texts == ["rows 20 0.1,1.2", f"key AKIAROT {len(ROTATED)}"], texts


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_secret_gone_since_submit_fails_the_launch_with_its_name(engine: KubeSim) -> None:
    tenant = allow(make_tenant(max_running_jobs=1), datastore_hosts=["127.0.0.1"])
    owner = member(tenant, "owner")
    values = {"access_key_id": KEY_ID, "secret_access_key": SECRET}
    datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=values)
    blocker = job_submit(
        tenant=tenant, user=owner, document=python_spec("blocker", "import time; time.sleep(300)")
    )
    wait_status(blocker, "running", timeout=60)
    job = job_submit(tenant=tenant, user=owner, document=spec("http://127.0.0.1:9"))
    assert cluster.job_credentials(job) == {"team-data": values}
    # Behind the service's back (it answers 409 while the job waits): the launch must say what is missing.
    DataStoreSecret.objects.all().delete()
    with pytest.raises(MissingSecret, match=f"tenant {tenant.slug} has no data-store secret 'team-data'"):
        cluster.job_credentials(job)
    job_cancel(job=blocker, user=owner)
    job = wait_status(job, "failed", timeout=60)
    assert job.reason == "InvalidSpec" and "no data-store secret 'team-data'" in job.message, describe(job)


@pytest.mark.slow
@pytest.mark.kubesim_only  # maps a port of kubesim's node to moto's
@pytest.mark.django_db(transaction=True)
def test_a_secret_that_carries_its_endpoint_lets_the_spec_name_no_host(
    engine: KubeSim, s3_server_and_pod_port: tuple[str, int]
) -> None:
    """The store's endpoint lives in the secret: the spec names only the secret. Pods reach moto at a port
    of kubesim's node other than the one it listens on (`--expose-host-port POD_PORT:PORT`)."""
    s3_server, pod_port = s3_server_and_pod_port
    host_port = urlsplit(s3_server).port
    assert host_port is not None
    if engine.cluster.network.available:
        engine.expose_host_port(pod_port, host_port)
        s3_url = f"http://{HOST_NAME}:{pod_port}"
    else:
        s3_url = pod_url(engine, s3_server)  # pods share this machine's loopback: no mapping
    tenant = allow(make_tenant(), datastore_hosts=[urlsplit(s3_url).hostname])
    owner = member(tenant, "owner")
    values = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "endpoint": s3_url}
    datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=values)
    document = spec("unused")
    del document["volumes"][0]["endpoint"]
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    job = wait_status(job, "succeeded", timeout=90, logs=True)
    texts = list(LogLine.objects.filter(job=job).values_list("text", flat=True))
    assert texts == ["rows 20 0.1,1.2", f"key {KEY_ID} {len(SECRET)}"], texts


@pytest.mark.django_db
def test_a_secret_endpoint_the_policy_does_not_allow_is_refused_on_the_volumes_secret() -> None:
    tenant = allow(make_tenant(), datastore_hosts=["s3.example.com"])
    owner = member(tenant, "owner")
    values = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "endpoint": "http://minio.internal:9000"}
    datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=values)
    document = spec("unused")
    del document["volumes"][0]["endpoint"]
    with pytest.raises(JobRejected) as refused:
        job_submit(tenant=tenant, user=member(tenant), document=document)
    assert refused.value.errors == {
        "volumes[0].secret": [
            "its endpoint: minio.internal is not among the S3 hosts tenant "
            f"{tenant.slug} may use: s3.example.com"
        ]
    }


@pytest.mark.django_db
def test_a_secret_endpoint_must_be_a_plain_url() -> None:
    tenant = make_tenant()
    owner = member(tenant, "owner")
    for bad in ("minio:9000", "http://user:pw@minio:9000", "ftp://minio"):
        values = {"access_key_id": KEY_ID, "secret_access_key": SECRET, "endpoint": bad}
        with pytest.raises(SecretRefused) as refused:
            datastore_secret_create(tenant=tenant, user=owner, name="team-data", values=values)
        assert refused.value.errors == {
            "endpoint": ["must be an http:// or https:// URL without credentials in it"]
        }

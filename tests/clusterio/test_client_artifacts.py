"""`Cluster` and artifacts against kubesim: the token Secret, the per-job checkpoint claim, the launcher.

The claim belongs to the job, not the attempt: every attempt adopts it, `teardown` leaves it and
only `delete_checkpoint_claims` removes it. A learner wrapped by the launcher uploads its results to
a local stand-in for the platform.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from clusterio import names
from clusterio.builders import (
    TOKEN_ENV,
    ArtifactSpec,
    VolumeSpec,
    checkpoint_claim_labels,
    make_checkpoint_pvc,
)
from clusterio.client import Cluster
from clusterio.errors import Conflict
from kubesim.testing import KubeSim
from tests.clusterio.artifact_server import TOKEN, ArtifactServer, running_artifact_server
from tests.clusterio.conftest import (
    TENANT,
    job_spec,
    node_folder,
    pod_phase,
    python,
    wait_file_code,
    wait_for,
)
from tests.clusters import pod_url


@pytest.fixture
def server() -> Iterator[ArtifactServer]:
    with running_artifact_server() as running:
        yield running


def test_launch_stores_the_artifact_token_in_the_attempts_secret_without_credentials(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str, tmp_path: Path
) -> None:
    spec = job_spec(
        ns,
        job_id,
        python(wait_file_code(tmp_path / "never")),
        artifacts=ArtifactSpec(results_url="http://p/r"),
    )
    cluster.launch(spec=spec, artifact_token=TOKEN)
    cluster.launch(spec=spec, artifact_token=TOKEN)
    secret = core.read_namespaced_secret(names.datastore_secret_name(job_id, 0), ns)
    assert {key: base64.b64decode(value) for key, value in secret.data.items()} == {TOKEN_ENV: TOKEN.encode()}
    assert secret.metadata.labels[names.LABEL_ATTEMPT] == "0"
    assert len(core.list_namespaced_secret(ns).items) == 1


def test_launch_refuses_an_artifacts_spec_without_a_token(cluster: Cluster, ns: str, job_id: str) -> None:
    spec = job_spec(ns, job_id, python("pass"), artifacts=ArtifactSpec(results_url="http://p/r"))
    with pytest.raises(ValueError, match="artifact_token"):
        cluster.launch(spec=spec)
    assert cluster.job_pods(namespace=ns, job_id=job_id) == []


def test_checkpoint_claim_is_created_once_shared_by_attempts_and_kept_by_teardown(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str, tmp_path: Path
) -> None:
    claim = names.checkpoint_claim_name(job_id)
    command = python(wait_file_code(tmp_path / "never"))
    uids = []
    for attempt in (0, 1):
        spec = job_spec(
            ns, job_id, command, attempt=attempt, checkpoint_claim=claim, checkpoint_claim_size="1Gi"
        )
        cluster.launch(spec=spec)
        cluster.launch(spec=spec)
        pvc = core.read_namespaced_persistent_volume_claim(claim, ns)
        uids.append(pvc.metadata.uid)
    # The same object (its binder may still update its status, so its resourceVersion can move on).
    assert uids[0] == uids[1], "the second attempt adopts the claim, it does not recreate it"
    assert pvc.metadata.labels == {
        **checkpoint_claim_labels(TENANT, job_id),
        names.LABEL_MANAGED_BY: "trainyard",
    }
    assert pvc.spec.resources.requests == {"storage": "1Gi"}
    assert len(core.list_namespaced_persistent_volume_claim(ns).items) == 1

    assert cluster.teardown(namespace=ns, job_id=job_id, grace_seconds=0) == 4
    wait_for(lambda: not cluster.job_pods(namespace=ns, job_id=job_id))
    kept = core.read_namespaced_persistent_volume_claim(claim, ns)
    assert kept.metadata.deletion_timestamp is None

    assert cluster.delete_checkpoint_claim(namespace=ns, name=claim) is True
    wait_for(lambda: not core.list_namespaced_persistent_volume_claim(ns).items)
    assert cluster.delete_checkpoint_claim(namespace=ns, name=claim) is False


def test_each_learner_has_its_own_claim_bound_on_the_default_class_and_all_go_with_the_job(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str, tmp_path: Path
) -> None:
    claims = tuple(names.checkpoint_claim_name(job_id, index) for index in (0, 1))
    command = python(wait_file_code(tmp_path / "never"))
    for attempt in (0, 1):
        spec = job_spec(
            ns,
            job_id,
            command,
            attempt=attempt,
            learners=2,
            checkpoint_learner_claims=claims,
            checkpoint_claim_size="1Gi",
        )
        cluster.launch(spec=spec)
        cluster.launch(spec=spec)
    for index, claim in enumerate(claims):
        pvc = core.read_namespaced_persistent_volume_claim(claim, ns)
        assert pvc.spec.access_modes == ["ReadWriteOnce"]
        assert pvc.metadata.labels == {
            **checkpoint_claim_labels(TENANT, job_id, index),
            names.LABEL_MANAGED_BY: "trainyard",
        }
    # kubesim's default class (like local-path) offers ReadWriteOnce only: every claim binds.
    wait_for(
        lambda: all(
            core.read_namespaced_persistent_volume_claim(c, ns).status.phase == "Bound" for c in claims
        )
    )
    pods = cluster.job_pods(namespace=ns, job_id=job_id, attempt=1)
    mounted = [
        next(
            v["persistentVolumeClaim"]["claimName"] for v in p["spec"]["volumes"] if v["name"] == "checkpoint"
        )
        for p in pods
    ]
    assert mounted == list(claims)

    # A claim of the shared layout (the job began under ReadWriteMany) goes with the job too; another
    # job's claim stays.
    shared = names.checkpoint_claim_name(job_id)
    core.create_namespaced_persistent_volume_claim(
        ns, make_checkpoint_pvc(ns, shared, checkpoint_claim_labels(TENANT, job_id), None, "1Gi")
    )
    other = names.checkpoint_claim_name("other-job", 0)
    core.create_namespaced_persistent_volume_claim(
        ns, make_checkpoint_pvc(ns, other, checkpoint_claim_labels(TENANT, "other-job", 0), None, "1Gi")
    )
    cluster.teardown(namespace=ns, job_id=job_id, grace_seconds=0)
    wait_for(lambda: not cluster.job_pods(namespace=ns, job_id=job_id))
    assert cluster.delete_checkpoint_claims(namespace=ns, job_id=job_id) == 3
    wait_for(
        lambda: [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items] == [other]
    )
    assert cluster.delete_checkpoint_claims(namespace=ns, job_id=job_id) == 0


def test_a_checkpoint_claim_of_another_job_is_a_conflict(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str
) -> None:
    claim = names.checkpoint_claim_name(job_id)
    other = make_checkpoint_pvc(ns, claim, checkpoint_claim_labels(TENANT, "other-job"), None, "1Gi")
    core.create_namespaced_persistent_volume_claim(ns, other)
    spec = job_spec(ns, job_id, python("pass"), checkpoint_claim=claim, checkpoint_claim_size="1Gi")
    with pytest.raises(Conflict):
        cluster.launch(spec=spec)
    assert cluster.job_pods(namespace=ns, job_id=job_id) == []


@pytest.mark.kubesim_only  # results go to kubesim's hostPath on this host; the pod reaches the server on loopback
def test_a_learner_wrapped_by_the_launcher_uploads_its_results_on_kubesim(
    cluster: Cluster, sim: KubeSim, ns: str, job_id: str, server: ArtifactServer
) -> None:
    results = f"/results/{job_id}"
    node_folder(sim, results)
    model = b"trained weights \x00\x01" * 1000
    child = (
        "import os\n"
        "open(os.path.join(os.environ['RESULT_DIR'], 'model.pt'), 'wb').write(" + repr(model) + ")\n"
        "print('trained', flush=True)\n"
    )
    spec = job_spec(
        ns,
        job_id,
        python(child),
        volumes=[VolumeSpec(name="results", kind="host", mount_path="/result", host_path=results)],
        artifacts=ArtifactSpec(results_url=pod_url(sim, server.results_url)),
    )
    (pod,) = cluster.launch(spec=spec, artifact_token=TOKEN)
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded", timeout=30)
    (put,) = server.received("PUT")
    assert put.path == "/results/files/model.pt" and put.body == model
    assert put.headers["X-Trainyard-Sha256"] == hashlib.sha256(model).hexdigest()
    assert put.headers["X-Trainyard-Artifact-Token"] == TOKEN
    (post,) = server.received("POST")
    assert json.loads(post.body) == {"exit_code": 0, "files": 1, "bytes": len(model), "checkpoint_bytes": 0}
    log = cluster.pod_log_tail(namespace=ns, pod=pod)
    assert log == ["trained", f"trainyard: uploaded 1 result file(s), {len(model)} bytes"]

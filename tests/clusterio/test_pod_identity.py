"""A learner pod holds no Kubernetes identity: no service-account token is mounted into it, and the
service account the platform gives it does not mount one either (tests/kubesim/test_auth.py proves that
the API refuses requests without the kubeconfig's token)."""

from __future__ import annotations

import pytest
from kubernetes import client

from clusterio import names
from clusterio.builders import ArtifactSpec
from clusterio.client import Cluster
from kubesim.testing import KubeSim
from tests.clusterio.artifact_server import TOKEN, ArtifactServer
from tests.clusterio.conftest import job_spec, pod_phase, python, wait_for
from tests.clusters import pod_url

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
PROBE = f"""
import os
print("token:", os.path.exists("{SA_DIR}/token"), "dir:", os.path.exists("{SA_DIR}"))
"""


def test_a_learner_pod_has_no_service_account_token(
    cluster: Cluster, core: client.CoreV1Api, ns: str, job_id: str
) -> None:
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(PROBE)))
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded", timeout=60)
    assert core.read_namespaced_pod_log(pod, ns) == "token: False dir: False\n"

    stored = core.read_namespaced_pod(pod, ns)
    assert stored.spec.automount_service_account_token is False
    assert stored.spec.service_account_name == names.SERVICE_ACCOUNT_NAME
    mounts = [
        m.mount_path
        for c in stored.spec.containers + (stored.spec.init_containers or [])
        for m in c.volume_mounts or []
    ]
    assert not any(path.startswith("/var/run/secrets") for path in mounts), mounts
    projected = [v.name for v in stored.spec.volumes or [] if v.projected is not None]
    assert projected == [], "no kube-api-access projected volume was added"
    account = core.read_namespaced_service_account(names.SERVICE_ACCOUNT_NAME, ns)
    assert account.automount_service_account_token is False


# Everything a process of the user's command can try to read the token from: every readable environ,
# command line and memory of the pod's other processes, and its own environment.
HUNT = f"""
import os
token = bytes.fromhex({TOKEN.encode().hex()!r})  # not the token itself: it would be in every command line
found = []
if os.environ.get("TRAINYARD_ARTIFACT_TOKEN"):
    found.append("own environment")
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    if int(pid) == os.getpid():
        continue
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{{pid}}/{{part}}", "rb") as fh:
                if token in fh.read():
                    found.append(f"/proc/{{pid}}/{{part}}")
        except OSError:
            pass
    try:
        with open(f"/proc/{{pid}}/mem", "rb"):
            found.append(f"/proc/{{pid}}/mem opens")
    except OSError:
        pass
print("uid", os.getuid(), "ppid", os.getppid(), "found", found or "nothing", flush=True)
"""


def test_the_users_command_cannot_read_the_attempts_artifact_token(
    cluster: Cluster, core: client.CoreV1Api, sim: KubeSim, ns: str, job_id: str, server: ArtifactServer
) -> None:
    """The token reaches the launcher (it uploads with it) and nothing the user's command can read: not its
    environment, nor /proc/<launcher>/environ or its memory (the launcher is not dumpable)."""
    if not sim.cluster.sandbox.available:
        pytest.skip(f"kubesim's sandbox is off ({sim.cluster.sandbox.reason}): pods run as kubesim's user")
    spec = job_spec(
        ns, job_id, python(HUNT), artifacts=ArtifactSpec(results_url=pod_url(sim, server.results_url))
    )
    (pod,) = cluster.launch(spec=spec, artifact_token=TOKEN)
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded", timeout=60)
    first = cluster.pod_log_tail(namespace=ns, pod=pod)[0]
    assert first.startswith("uid ") and not first.startswith("uid 0 ")
    assert first.endswith("found nothing"), first
    (post,) = server.received("POST")
    assert post.headers["X-Trainyard-Artifact-Token"] == TOKEN, "the launcher itself still holds it"

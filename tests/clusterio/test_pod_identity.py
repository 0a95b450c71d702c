"""A learner pod holds no Kubernetes identity: no service-account token is mounted into it, and the
service account the platform gives it does not mount one either (tests/kubesim/test_auth.py proves that
the API refuses requests without the kubeconfig's token)."""

from __future__ import annotations

from kubernetes import client

from clusterio import names
from clusterio.client import Cluster
from tests.clusterio.conftest import job_spec, pod_phase, python, wait_for

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

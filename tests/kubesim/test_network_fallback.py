"""The fallback where pods get no network of their own (--no-network-isolation, or namespaces refused):
they share this machine's loopback, cluster names in env values are rewritten to it, and kubesim says so."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from kubernetes import client

from kubesim import network
from kubesim.testing import running_kubesim
from tests.kubesim.conftest import make_pod, wait_phase

pytestmark = pytest.mark.slow


def test_without_isolation_pods_share_the_loopback_and_kubesim_says_so(tmp_path: Path) -> None:
    with running_kubesim(tmp_path, network=False) as shared:
        status = httpx.get(
            f"{shared.url}/kubesim/network",
            headers=shared.auth_headers(),
            verify=shared.ssl_context(),
            timeout=10,
        ).json()
        assert status["isolated"] is False and "no-network-isolation" in status["reason"]
        core = client.CoreV1Api(shared.api_client())
        pod = make_pod("loop", ["sh", "-c", "echo $ADDR"])
        pod.spec.containers[0].env = [
            client.V1EnvVar(name="ADDR", value=f"w-0.w.default.svc:{network.HOST_NAME}")
        ]
        core.create_namespaced_pod("default", pod)
        done = wait_phase(core, "default", "loop", ("Succeeded", "Failed"), timeout=60)
        assert (done.status.pod_ip, done.status.host_ip) == ("127.0.0.1", "127.0.0.1")
        assert core.read_namespaced_pod_log("loop", "default") == "127.0.0.1:127.0.0.1\n"

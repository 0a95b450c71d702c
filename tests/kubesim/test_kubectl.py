"""kubectl against kubesim (skipped when no working kubectl is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from kubesim.testing import KubeSim
from tests.kubesim.conftest import wait_phase


def _kubectl_works() -> bool:
    path = shutil.which("kubectl")
    if not path:
        return False
    try:
        result = subprocess.run([path, "version", "--client"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


pytestmark = pytest.mark.skipif(not _kubectl_works(), reason="no working kubectl")


def _kubectl(sim: KubeSim, *args: str) -> str:
    env = dict(os.environ, KUBECONFIG=str(sim.kubeconfig_path))
    result = subprocess.run(
        ["kubectl", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kubectl_apply_get_logs_delete(sim: KubeSim, core: client.CoreV1Api, ns: str, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kc\n"
        "spec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: busybox\n"
        "    command: [python, -c, 'print(42)']\n"
    )
    # kubesim serves no OpenAPI document, so kubectl's client-side schema validation must be off.
    assert "created" in _kubectl(sim, "apply", "--validate=false", "-n", ns, "-f", str(manifest))
    wait_phase(core, ns, "kc", ("Succeeded",))
    listing = _kubectl(sim, "get", "nodes,pods", "-A")
    assert "kubesim-node" in listing and "kc" in listing
    assert _kubectl(sim, "logs", "-n", ns, "kc") == "42\n"
    assert "deleted" in _kubectl(sim, "delete", "-n", ns, "pod", "kc")

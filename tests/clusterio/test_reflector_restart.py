"""`PodReflector` across a kubesim restart: it resumes (or relists) and keeps seeing pods, never goes blind."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kubernetes import client

from clusterio.client import Cluster
from clusterio.reflector import PodReflector
from kubesim.testing import running_kubesim
from tests.clusterio.conftest import wait_for
from tests.clusterio.test_reflector import Recorder


def _pod(name: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "restart-watch"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(name="main", image="x", command=["python", "-c", "pass"])],
        ),
    )


@pytest.mark.kubesim_only  # restarts the API server, which only kubesim lets a test do
def test_reflector_keeps_seeing_pods_after_kubesim_restarts(tmp_path: Path) -> None:
    recorder = Recorder()
    with running_kubesim(tmp_path) as sim:
        core = client.CoreV1Api(sim.api_client())
        cluster = Cluster(kubeconfig=str(sim.kubeconfig_path), request_timeout=5.0, retries=1, backoff=0.01)
        reflector = PodReflector(
            cluster,
            on_sync=recorder.on_sync,
            on_event=recorder.on_event,
            label_selector="app=restart-watch",
            watch_timeout_seconds=1,
            backoff_max=0.5,
        )
        stop = threading.Event()
        thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
        thread.start()
        try:
            core.create_namespaced_pod("default", _pod("before"))
            wait_for(lambda: recorder.phase("before") == "Succeeded")

            sim.restart()
            core.create_namespaced_pod("default", _pod("after"))

            wait_for(lambda: recorder.phase("after") == "Succeeded", timeout=30)
            assert recorder.phase("before") == "Succeeded"
        finally:
            stop.set()
            thread.join(10)
            cluster.close()

"""Fixtures for clusterio against kubesim: one emulator and one `Cluster` per session, a fresh tenant
namespace per test, and helpers that build small learner specs and poll with bounded timeouts."""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from clusterio.builders import JobPodsSpec, TenantLimits, VolumeSpec
from clusterio.client import Cluster
from clusterio.errors import ClusterError
from kubesim.testing import KubeSim
from tests.clusterio.artifact_server import ArtifactServer, running_artifact_server
from tests.clusters import cluster_for_tests

RETRIES = 3
TENANT = "acme"
BIG_LIMITS = TenantLimits(gpus=8, cpu_millis=16000, memory_mib=32768)


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSim]:
    with cluster_for_tests(
        tmp_path_factory.mktemp("clusterio-kubesim"),
        gpu_nodes=1,
        gpus_per_node=4,
        restart_backoff=0.2,
        bookmark_interval=0.3,
    ) as running:
        yield running


@pytest.fixture(scope="session")
def cluster(sim: KubeSim) -> Iterator[Cluster]:
    cluster = Cluster(kubeconfig=str(sim.kubeconfig_path), request_timeout=5.0, retries=RETRIES, backoff=0.01)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def core(sim: KubeSim) -> client.CoreV1Api:
    """The official client, unwrapped, for arranging and checking state behind `Cluster`'s back."""
    return client.CoreV1Api(sim.api_client())


@pytest.fixture(autouse=True)
def _no_leftover_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "sim" in request.fixturenames:
        request.getfixturevalue("sim").clear_faults()


@pytest.fixture
def ns(cluster: Cluster, core: client.CoreV1Api) -> Iterator[str]:
    """A tenant namespace fenced by `ensure_tenant`; its pods are killed and it is deleted afterwards."""
    name = f"ty-{uuid.uuid4().hex[:8]}"
    cluster.ensure_tenant(namespace=name, tenant_slug=TENANT, limits=BIG_LIMITS)
    yield name
    with contextlib.suppress(ClusterError, client.ApiException):
        for pod in cluster.list_pods(label_selector="", namespace=name)[0]:
            core.delete_namespaced_pod(pod["metadata"]["name"], name, grace_period_seconds=0)
        wait_for(lambda: not cluster.list_pods(label_selector="", namespace=name)[0], timeout=10)
        core.delete_namespace(name)


@pytest.fixture
def job_id() -> str:
    return f"j{uuid.uuid4().hex[:10]}"


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll until `predicate` returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def python(code: str) -> list[str]:
    """A container command running `code` with the test's own interpreter."""
    return [sys.executable, "-u", "-c", code]


def wait_file_code(path: str | Path) -> str:
    """Python code that blocks until `path` exists, so a test decides when a pod ends."""
    return f"import os, time\nwhile not os.path.exists({str(path)!r}): time.sleep(0.02)\n"


def node_folder(sim: KubeSim, host_path: str) -> Path:
    """The folder kubesim keeps behind hostPath `host_path`, made writable for the learners' non-root
    user, as a node's admin would prepare it (pods are sandboxed: they see only their volumes)."""
    folder = sim.state_dir / "hostpath" / host_path.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)
    return folder


@dataclass(frozen=True)
class Gate:
    """Files a test creates to let its learners go on: a hostPath folder mounted at `/gate`."""

    folder: Path
    volume: VolumeSpec

    def wait_code(self, name: str) -> str:
        """Python code that blocks until the test calls `open(name)`."""
        return wait_file_code(f"{self.volume.mount_path}/{name}")

    def open(self, name: str) -> None:
        (self.folder / name).touch()


@pytest.fixture
def gate(sim: KubeSim, job_id: str) -> Gate:
    path = f"/gates/{job_id}"
    volume = VolumeSpec(name="gate", kind="host", mount_path="/gate", host_path=path, read_only=True)
    return Gate(node_folder(sim, path), volume)


def job_spec(
    namespace: str,
    job_id: str,
    command: list[str],
    *,
    attempt: int = 0,
    learners: int = 1,
    gpus: int = 0,
    cpu_millis: int = 500,
    memory_mib: int = 256,
    **extra: Any,
) -> JobPodsSpec:
    """A small learner spec for kubesim (rendezvous on localhost, no pod DNS needed)."""
    return JobPodsSpec(
        job_id=job_id,
        attempt=attempt,
        tenant=TENANT,
        namespace=namespace,
        image="python:3.11-slim",
        command=command,
        learners=learners,
        gpus=gpus,
        cpu_millis=cpu_millis,
        memory_mib=memory_mib,
        checkpoint_dir="/ckpt",
        data_dir="/data",
        result_dir="/result",
        master_addr="127.0.0.1",
        **extra,
    )


def pod_phase(cluster: Cluster, namespace: str, pod: str) -> str | None:
    """The pod's phase, or None when it does not exist."""
    found = cluster.get_pod(namespace=namespace, pod=pod)
    return None if found is None else (found.get("status") or {}).get("phase")


@pytest.fixture
def server() -> Iterator[ArtifactServer]:
    """A stand-in for the platform's artifact endpoints (tests/clusterio/artifact_server.py)."""
    with running_artifact_server() as running:
        yield running

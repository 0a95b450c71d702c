"""Fixtures for kubesim tests: one emulator per session, a fresh namespace per test."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim, running_kubesim


@pytest.fixture(scope="session", autouse=True)
def _end_stray_database_sessions() -> None:
    """kubesim tests use no database: this shadows the suite-wide fixture of that name, which needs
    ``django_db_setup`` and fails at session end when a run holds only database-free tests (no test
    database is created then, and it connects to the development one)."""


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSim]:
    with running_kubesim(
        tmp_path_factory.mktemp("kubesim"),
        gpu_nodes=1,
        gpus_per_node=4,
        restart_backoff=0.2,
        bookmark_interval=0.3,
        node_monitor_grace=0.5,
    ) as running:
        yield running


@pytest.fixture(scope="session")
def api_client(sim: KubeSim) -> client.ApiClient:
    return sim.api_client()


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api_client)


@pytest.fixture
def ns(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.05) -> Any:
    """Poll until ``predicate`` returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


class HasMetadata(Protocol):
    """Any Kubernetes client model with object metadata."""

    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def name_of(obj: HasMetadata) -> str:
    """``obj.metadata.name``, which the server always sets on objects it returns."""
    assert obj.metadata is not None and obj.metadata.name is not None
    return obj.metadata.name


def error_body(exc: ApiException) -> Any:
    """The decoded JSON Status object of an API error."""
    assert exc.body is not None
    return json.loads(exc.body)


def follow_log(core: client.CoreV1Api, name: str, ns: str) -> urllib3.HTTPResponse:
    """Follow a pod's log unbuffered; the client types this as ``str`` but returns the raw response."""
    response = core.read_namespaced_pod_log(name, ns, follow=True, _preload_content=False)
    return cast(urllib3.HTTPResponse, response)


def make_pod(name: str, command: list[str], restart_policy: str = "Never", **container: Any) -> client.V1Pod:
    """A one-container pod running ``command`` (``image`` defaults to one kubesim ignores)."""
    image = container.pop("image", "ignored:latest")
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1PodSpec(
            restart_policy=restart_policy,
            termination_grace_period_seconds=2,
            containers=[client.V1Container(name="main", image=image, command=command, **container)],
        ),
    )


def wait_phase(
    core: client.CoreV1Api, ns: str, name: str, phases: tuple[str, ...], timeout: float = 20
) -> Any:
    """Wait until the pod reaches one of ``phases``; return it."""

    def check() -> Any:
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in phases else None

    return wait_for(check, timeout)


def authorized(api_client: client.ApiClient, **headers: str) -> dict[str, str]:
    """``headers`` with the client's ``Authorization`` added: ``ApiClient.call_api`` sends only the headers
    it is given, not the configured credentials."""
    bearer = api_client.configuration.auth_settings().get("BearerToken")
    return {**headers, "Authorization": bearer["value"]} if bearer else headers


def table_rows(api_client: client.ApiClient, url: str) -> tuple[list[str], dict[str, list[Any]]]:
    """GET ``url`` as a meta.k8s.io/v1 Table, as kubectl asks for it: column names and cells by name."""
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    response = api_client.call_api("GET", url, header_params=authorized(api_client, Accept=accept))
    assert response.status == 200
    body = json.loads(bytes(response.read()))
    shown = [i for i, c in enumerate(body["columnDefinitions"]) if c["priority"] == 0]
    columns = [body["columnDefinitions"][i]["name"] for i in shown]
    rows = {row["cells"][0]: [row["cells"][i] for i in shown] for row in body["rows"]}
    return columns, rows

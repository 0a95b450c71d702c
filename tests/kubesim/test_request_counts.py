"""kubesim counts the API requests it serves by verb and resource, as `apiserver_request_total` does."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from kubernetes import client

from kubesim.testing import KubeSim


def test_requests_are_counted_by_verb_and_resource_and_reset(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    sim.request_counts(reset=True)
    core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")))
    core.read_namespaced_config_map("c", ns)
    core.list_namespaced_config_map(ns)
    core.list_node()
    stream: Any = core.list_pod_for_all_namespaces(watch=True, timeout_seconds=1, _preload_content=False)
    stream.release_conn()
    core.read_namespace_status(ns)

    counts = sim.request_counts(reset=True)

    assert counts == {
        "create configmaps": 1,
        "get configmaps": 1,
        "list configmaps": 1,
        "list nodes": 1,
        "watch pods": 1,
        "get namespaces/status": 1,
    }
    request = urllib.request.Request(f"{sim.url}/kubesim/requests", headers=sim.auth_headers())  # noqa: S310
    with urllib.request.urlopen(request, context=sim.ssl_context()) as response:  # noqa: S310
        assert json.load(response) == {"counts": {}}, "admin requests are not counted"

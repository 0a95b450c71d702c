"""Watch semantics: event types, resume, timeouts, bookmarks, 410 Gone and selector transitions."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim


def _cm(name: str, labels: dict[str, str] | None = None) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data={"k": "v"})


def test_watch_sees_added_modified_deleted(core: client.CoreV1Api, ns: str) -> None:
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("w"))
    core.patch_namespaced_config_map(
        "w", ns, {"data": {"k": "2"}}, _content_type="application/merge-patch+json"
    )
    core.delete_namespaced_config_map("w", ns)
    events = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_resumes_from_resource_version(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("first"))
    middle = core.create_namespaced_config_map(ns, _cm("second")).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("third"))
    names = [
        e["object"].metadata.name
        for e in watch.Watch().stream(
            core.list_namespaced_config_map, ns, resource_version=middle, timeout_seconds=1
        )
    ]
    assert names == ["third"]


def test_watch_without_version_starts_with_current_objects(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("existing"))
    events = list(watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=1))
    assert ("ADDED", "existing") in [(e["type"], e["object"].metadata.name) for e in events]


def test_watch_delivers_live_events(core: client.CoreV1Api, ns: str) -> None:
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    timer = threading.Timer(0.2, lambda: core.create_namespaced_config_map(ns, _cm("live")))
    timer.start()
    w = watch.Watch()
    for event in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=10):
        assert event["object"].metadata.name == "live"
        w.stop()
        break
    timer.join()


def test_watch_from_compacted_version_gets_410(core: client.CoreV1Api, ns: str, sim: KubeSim) -> None:
    old = core.create_namespaced_config_map(ns, _cm("old")).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("newer"))
    sim.compact(keep=0)
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(core.list_namespaced_config_map, ns, resource_version=old, timeout_seconds=1)
        )
    assert err.value.status == 410
    url = f"{sim.url}/api/v1/namespaces/{ns}/configmaps?watch=true&resourceVersion={old}&timeoutSeconds=1"
    request = urllib.request.Request(url, headers=sim.auth_headers())  # noqa: S310
    with urllib.request.urlopen(request, context=sim.ssl_context()) as response:  # noqa: S310
        event = json.loads(response.readline())
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def test_watch_sends_bookmarks_when_allowed(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    url = (
        f"{sim.url}/api/v1/namespaces/{ns}/configmaps?watch=1&resourceVersion={rv}"
        "&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    request = urllib.request.Request(url, headers=sim.auth_headers())  # noqa: S310
    with urllib.request.urlopen(request, context=sim.ssl_context()) as response:  # noqa: S310
        types = [json.loads(line)["type"] for line in response]
    assert "BOOKMARK" in types


def test_watch_label_selector_transitions_become_added_and_deleted(core: client.CoreV1Api, ns: str) -> None:
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("sel", {"pick": "no"}))
    merge = "application/merge-patch+json"
    core.patch_namespaced_config_map(
        "sel", ns, {"metadata": {"labels": {"pick": "yes"}}}, _content_type=merge
    )
    core.patch_namespaced_config_map("sel", ns, {"data": {"k": "x"}}, _content_type=merge)
    core.patch_namespaced_config_map("sel", ns, {"metadata": {"labels": {"pick": "no"}}}, _content_type=merge)
    types = [
        e["type"]
        for e in watch.Watch().stream(
            core.list_namespaced_config_map,
            ns,
            resource_version=rv,
            label_selector="pick=yes",
            timeout_seconds=1,
        )
    ]
    assert types == ["ADDED", "MODIFIED", "DELETED"]


def test_watch_pods_by_field_selector_phase(core: client.CoreV1Api, ns: str) -> None:
    from tests.kubesim.conftest import make_pod

    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, make_pod("quick", ["true"]))
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_pod,
        ns,
        resource_version=rv,
        field_selector="status.phase=Succeeded",
        timeout_seconds=15,
    ):
        assert event["type"] == "ADDED" and event["object"].metadata.name == "quick"
        w.stop()
        break
    else:
        pytest.fail("no Succeeded event")

"""Object API semantics through the official client: CRUD, errors, selectors, paging, patches."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim
from tests.kubesim.conftest import error_body, make_pod, name_of, wait_for


def _cm(
    name: str, labels: dict[str, str] | None = None, data: dict[str, str] | None = None
) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data or {"k": "v"})


def test_discovery_lists_groups_and_resources(api_client: client.ApiClient) -> None:
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"batch", "networking.k8s.io", "metrics.k8s.io"} <= groups
    core_resources = {r.name for r in client.CoreV1Api(api_client).get_api_resources().resources}
    assert {"pods", "pods/log", "namespaces", "services", "events", "resourcequotas"} <= core_resources
    assert "jobs" in {r.name for r in client.BatchV1Api(api_client).get_api_resources().resources}
    assert client.VersionApi(api_client).get_code().major == "1"


def test_create_get_update_delete_configmap(core: client.CoreV1Api, ns: str) -> None:
    created = core.create_namespaced_config_map(ns, _cm("one"))
    created_rv = created.metadata.resource_version
    assert created.metadata.uid and created_rv is not None and int(created_rv) > 0
    assert created.metadata.creation_timestamp is not None
    created.data = {"k": "v2"}
    updated = core.replace_namespaced_config_map("one", ns, created)
    updated_rv = updated.metadata.resource_version
    assert updated_rv is not None and int(updated_rv) > int(created_rv)
    assert core.read_namespaced_config_map("one", ns).data == {"k": "v2"}
    core.delete_namespaced_config_map("one", ns)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("one", ns)
    assert err.value.status == 404
    assert error_body(err.value)["reason"] == "NotFound"


def test_create_existing_name_is_409_already_exists(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("dup"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(ns, _cm("dup"))
    assert err.value.status == 409
    assert error_body(err.value)["reason"] == "AlreadyExists"


def test_update_with_stale_resource_version_is_409_conflict(core: client.CoreV1Api, ns: str) -> None:
    first = core.create_namespaced_config_map(ns, _cm("cfl"))
    core.replace_namespaced_config_map("cfl", ns, first)
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cfl", ns, first)
    assert err.value.status == 409
    assert error_body(err.value)["reason"] == "Conflict"


@pytest.mark.parametrize("name", ["Upper", "under_score", "-dash"])
def test_invalid_names_are_422(core: client.CoreV1Api, ns: str, name: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(ns, _cm(name))
    assert err.value.status == 422


def test_pod_without_containers_is_422(core: client.CoreV1Api, ns: str) -> None:
    body = client.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=client.V1ObjectMeta(name="empty"),
        spec=client.V1PodSpec(containers=[]),
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, body)
    assert err.value.status == 422
    assert error_body(err.value)["details"]["causes"][0]["field"] == "spec.containers"


def test_gpu_request_different_from_limit_is_422(core: client.CoreV1Api, ns: str) -> None:
    resources = client.V1ResourceRequirements(
        requests={"nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "2"}
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, make_pod("gpu", ["true"], resources=resources))
    assert err.value.status == 422


def test_create_in_missing_namespace_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("no-such-ns", _cm("x"))
    assert err.value.status == 404


def test_label_selectors_equality_and_set_based(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("a", {"tier": "web", "env": "prod"}))
    core.create_namespaced_config_map(ns, _cm("b", {"tier": "db", "env": "dev"}))
    core.create_namespaced_config_map(ns, _cm("c", {"tier": "web"}))

    def names(selector: str) -> list[str]:
        return sorted(name_of(i) for i in core.list_namespaced_config_map(ns, label_selector=selector).items)

    assert names("tier=web") == ["a", "c"]
    assert names("tier!=web") == ["b", "kube-root-ca.crt"] or names("tier!=web")[0] == "b"
    assert names("env in (prod,dev)") == ["a", "b"]
    assert names("tier,env notin (prod)") == ["b", "c"]
    assert names("!env") == [n for n in names("!env") if n != "a" and n != "b"]
    assert "c" in names("!env")
    assert names("env") == ["a", "b"]


def test_field_selectors_and_unsupported_field_is_400(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("f1"))
    core.create_namespaced_config_map(ns, _cm("f2"))
    found = core.list_namespaced_config_map(ns, field_selector="metadata.name=f2").items
    assert [i.metadata.name for i in found] == ["f2"]
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(ns, field_selector="data.k=v")
    assert err.value.status == 400


def test_list_paging_with_limit_and_continue(core: client.CoreV1Api, ns: str) -> None:
    for i in range(7):
        core.create_namespaced_config_map(ns, _cm(f"page-{i}", {"paged": "yes"}))
    seen, token = [], None
    while True:
        page = core.list_namespaced_config_map(ns, label_selector="paged=yes", limit=3, _continue=token)
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count > 0
    assert seen == [f"page-{i}" for i in range(7)]


def test_list_across_all_namespaces(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("everywhere"))
    items = core.list_config_map_for_all_namespaces(field_selector="metadata.name=everywhere").items
    assert [(i.metadata.namespace, i.metadata.name) for i in items] == [(ns, "everywhere")]


def test_merge_strategic_and_json_patches(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("p", {"a": "1"}, {"x": "1", "y": "2"}))
    merged = core.patch_namespaced_config_map(
        "p", ns, {"data": {"y": None, "z": "3"}}, _content_type="application/merge-patch+json"
    )
    assert merged.data == {"x": "1", "z": "3"}
    strategic = core.patch_namespaced_config_map(
        "p", ns, {"metadata": {"labels": {"b": "2"}}}, _content_type="application/strategic-merge-patch+json"
    )
    assert strategic.metadata.labels == {"a": "1", "b": "2"}
    patched = core.patch_namespaced_config_map(
        "p",
        ns,
        [{"op": "replace", "path": "/data/x", "value": "9"}, {"op": "remove", "path": "/data/z"}],
        _content_type="application/json-patch+json",
    )
    assert patched.data == {"x": "9"}


def test_strategic_merge_patch_merges_containers_by_name(core: client.CoreV1Api, ns: str) -> None:
    pod = make_pod("smp", ["sleep", "30"])
    pod.spec.containers.append(client.V1Container(name="side", image="a", command=["sleep", "30"]))
    core.create_namespaced_pod(ns, pod)
    patch = {"spec": {"containers": [{"name": "side", "image": "b"}]}}
    result = core.patch_namespaced_pod(
        "smp", ns, patch, _content_type="application/strategic-merge-patch+json"
    )
    assert [(c.name, c.image) for c in result.spec.containers] == [("main", "ignored:latest"), ("side", "b")]


def test_status_subresource_is_separate_from_spec(core: client.CoreV1Api, ns: str) -> None:
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="q"), spec=client.V1ResourceQuotaSpec(hard={"pods": "5"})
    )
    core.create_namespaced_resource_quota(ns, quota)
    core.patch_namespaced_resource_quota(
        "q", ns, {"status": {"hard": {"pods": "99"}}}, _content_type="application/merge-patch+json"
    )
    assert core.read_namespaced_resource_quota("q", ns).status.hard != {"pods": "99"}
    patched = core.patch_namespaced_resource_quota_status(
        "q",
        ns,
        {"spec": {"hard": {"pods": "1"}}, "status": {"used": {"pods": "7"}}},
        _content_type="application/merge-patch+json",
    )
    assert patched.spec.hard == {"pods": "5"}


def test_generation_increments_only_on_spec_change(core: client.CoreV1Api, ns: str) -> None:
    svc = client.V1Service(
        metadata=client.V1ObjectMeta(name="svc"),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)]),
    )
    created = core.create_namespaced_service(ns, svc)
    assert created.spec.cluster_ip.startswith("10.96.")
    labelled = core.patch_namespaced_service(
        "svc", ns, {"metadata": {"labels": {"l": "1"}}}, _content_type="application/merge-patch+json"
    )
    assert labelled.metadata.generation == created.metadata.generation
    changed = core.patch_namespaced_service(
        "svc", ns, {"spec": {"ports": [{"port": 81}]}}, _content_type="application/merge-patch+json"
    )
    assert changed.metadata.generation == created.metadata.generation + 1


def test_namespace_delete_cascades_through_terminating(core: client.CoreV1Api, sim: KubeSim) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="doomed")))
    core.create_namespaced_config_map("doomed", _cm("inside"))
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('armed', flush=True); "
        "time.sleep(60)"
    )
    core.create_namespaced_pod("doomed", make_pod("sleeper", ["python", "-c", stubborn]))
    wait_for(lambda: core.read_namespaced_pod("sleeper", "doomed").status.phase == "Running")
    wait_for(lambda: "armed" in core.read_namespaced_pod_log("sleeper", "doomed"))
    core.delete_namespace("doomed")
    assert core.read_namespace("doomed").status.phase == "Terminating"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("doomed", _cm("late"))
    assert err.value.status == 403

    def gone() -> bool:
        try:
            core.read_namespace("doomed")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=15)


def test_network_policies_are_stored(api_client: client.ApiClient, ns: str) -> None:
    net = client.NetworkingV1Api(api_client)
    policy = client.V1NetworkPolicy(
        metadata=client.V1ObjectMeta(name="deny"),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(match_labels={"a": "b"}), policy_types=["Ingress"]
        ),
    )
    net.create_namespaced_network_policy(ns, policy)
    assert net.read_namespaced_network_policy("deny", ns).spec.policy_types == ["Ingress"]

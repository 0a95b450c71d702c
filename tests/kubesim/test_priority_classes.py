"""PriorityClasses and the Priority admission plugin: a pod naming a missing class is refused at creation,
as kube-apiserver refuses it, and a known class's value is written into the pod."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import error_body, make_pod


@pytest.fixture(scope="module")
def scheduling(api_client: client.ApiClient) -> client.SchedulingV1Api:
    return client.SchedulingV1Api(api_client)


@pytest.fixture
def class_name(scheduling: client.SchedulingV1Api) -> Iterator[str]:
    """A unique name for a PriorityClass the test creates; deleted afterwards."""
    name = f"pc-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        scheduling.delete_priority_class(name)
    except ApiException as exc:
        assert exc.status == 404


def _class(
    name: str, value: int, *, global_default: bool | None = None, preemption_policy: str | None = None
) -> client.V1PriorityClass:
    return client.V1PriorityClass(
        metadata=client.V1ObjectMeta(name=name),
        value=value,
        global_default=global_default,
        preemption_policy=preemption_policy,
    )


def test_every_cluster_has_the_two_system_classes(scheduling: client.SchedulingV1Api) -> None:
    classes = {c.metadata.name: c.value for c in scheduling.list_priority_class().items}
    assert classes["system-cluster-critical"] == 2_000_000_000
    assert classes["system-node-critical"] == 2_000_001_000


def test_a_pod_naming_a_missing_class_is_refused_with_403(core: client.CoreV1Api, ns: str) -> None:
    pod = make_pod("p", ["true"])
    pod.spec.priority_class_name = "no-such-class"
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(ns, pod)
    assert refused.value.status == 403
    assert error_body(refused.value)["message"] == (
        'pods "p" is forbidden: no PriorityClass with name no-such-class was found'
    )
    assert core.list_namespaced_pod(ns).items == []


def test_a_known_class_sets_the_pods_priority_and_policy(
    core: client.CoreV1Api, ns: str, scheduling: client.SchedulingV1Api, class_name: str
) -> None:
    scheduling.create_priority_class(_class(class_name, 1000, preemption_policy="Never"))
    pod = make_pod("p", ["true"])
    pod.spec.priority_class_name = class_name
    created = core.create_namespaced_pod(ns, pod)
    assert (created.spec.priority, created.spec.preemption_policy) == (1000, "Never")


def test_a_pod_without_a_class_gets_priority_zero_or_the_global_default(
    core: client.CoreV1Api, ns: str, scheduling: client.SchedulingV1Api, class_name: str
) -> None:
    plain = core.create_namespaced_pod(ns, make_pod("plain", ["true"]))
    assert (plain.spec.priority, plain.spec.priority_class_name) == (0, None)
    scheduling.create_priority_class(_class(class_name, 7, global_default=True))
    defaulted = core.create_namespaced_pod(ns, make_pod("defaulted", ["true"]))
    assert (defaulted.spec.priority, defaulted.spec.priority_class_name) == (7, class_name)


def test_a_pod_may_not_bring_its_own_priority(
    core: client.CoreV1Api, ns: str, scheduling: client.SchedulingV1Api, class_name: str
) -> None:
    scheduling.create_priority_class(_class(class_name, 50))
    pod = make_pod("p", ["true"])
    pod.spec.priority_class_name = class_name
    pod.spec.priority = 99
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(ns, pod)
    assert refused.value.status == 403
    assert "the integer value of priority (99) must not be provided" in error_body(refused.value)["message"]


def test_class_rules_reserved_names_ceiling_one_default_and_a_fixed_value(
    scheduling: client.SchedulingV1Api, class_name: str
) -> None:
    with pytest.raises(ApiException) as reserved:
        scheduling.create_priority_class(_class("system-mine", 10))
    assert reserved.value.status == 422
    with pytest.raises(ApiException) as too_high:
        scheduling.create_priority_class(_class(class_name, 1_000_000_001))
    assert too_high.value.status == 422
    assert "maximum allowed value of a user defined priority" in error_body(too_high.value)["message"]
    scheduling.create_priority_class(_class(class_name, 10, global_default=True))
    second = f"pc-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApiException) as two_defaults:
        scheduling.create_priority_class(_class(second, 20, global_default=True))
    assert two_defaults.value.status == 403
    assert (
        f"PriorityClass {class_name} is already marked as default"
        in error_body(two_defaults.value)["message"]
    )
    with pytest.raises(ApiException) as changed:
        scheduling.patch_priority_class(class_name, {"value": 11})
    assert changed.value.status == 422
    assert scheduling.read_priority_class(class_name).value == 10

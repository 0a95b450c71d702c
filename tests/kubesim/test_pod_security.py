"""Pod Security admission through the official client: a namespace's `pod-security.kubernetes.io/enforce` level
refuses pods with the apiserver's 403 and words, and the platform's own learner pods pass `restricted`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from clusterio.builders import ArtifactSpec, JobPodsSpec, S3Fetch, VolumeSpec, make_learner_pod
from tests.kubesim.conftest import error_body, make_pod, wait_for, wait_phase

ENFORCE = "pod-security.kubernetes.io/enforce"
HARDENED: dict[str, Any] = {
    "run_as_non_root": True,
    "run_as_user": 1000,
    "allow_privilege_escalation": False,
    "capabilities": client.V1Capabilities(drop=["ALL"]),
    "seccomp_profile": client.V1SeccompProfile(type="RuntimeDefault"),
}
ROOT_POD = (
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "main" must set '
    'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "main" must set '
    'securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "main" must set '
    'securityContext.runAsNonRoot=true), seccompProfile (pod or container "main" must set '
    'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")'
)


@pytest.fixture
def labelled(core: client.CoreV1Api) -> Iterator[Callable[[str | None], str]]:
    """Make namespaces enforcing a level (None: no label); deleted after the test."""
    made: list[str] = []

    def make(level: str | None) -> str:
        name = f"psa-{uuid.uuid4().hex[:8]}"
        labels = {ENFORCE: level} if level else None
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


def _pod(name: str, *, security: dict[str, Any] | None = None, **spec: Any) -> client.V1Pod:
    """A pod whose one container is hardened for `restricted` except for what `security` overrides."""
    context = client.V1SecurityContext(**{**HARDENED, **(security or {})})
    pod = make_pod(name, ["sleep", "30"], security_context=context)
    for key, value in spec.items():
        setattr(pod.spec, key, value)
    return pod


def _host_volume(tmp_path: Path) -> dict[str, Any]:
    return {
        "volumes": [client.V1Volume(name="host", host_path=client.V1HostPathVolumeSource(path=str(tmp_path)))]
    }


def _refusal(core: client.CoreV1Api, ns: str, pod: client.V1Pod) -> str:
    """The message of the 403 that creating `pod` gets (and that nothing was stored)."""
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, pod)
    assert err.value.status == 403
    body = error_body(err.value)
    assert body["reason"] == "Forbidden" and body["details"]["kind"] == "pods"
    assert pod.metadata.name not in [p.metadata.name for p in core.list_namespaced_pod(ns).items]
    message: str = body["message"]
    prefix = f'pods "{pod.metadata.name}" is forbidden: '
    assert message.startswith(prefix)
    return message[len(prefix) :]


def test_restricted_refuses_a_pod_that_runs_as_root_with_every_reason(
    core: client.CoreV1Api, labelled: Callable[[str | None], str]
) -> None:
    ns = labelled("restricted")
    assert _refusal(core, ns, make_pod("root", ["true"])) == ROOT_POD
    explicit = _pod("uid0", security={"run_as_non_root": None, "run_as_user": 0})
    assert _refusal(core, ns, explicit) == (
        'violates PodSecurity "restricted:latest": runAsNonRoot != true (pod or container "main" must set '
        'securityContext.runAsNonRoot=true), runAsUser=0 (container "main" must not set runAsUser=0)'
    )


def test_restricted_refuses_a_privileged_container(
    core: client.CoreV1Api, labelled: Callable[[str | None], str]
) -> None:
    ns = labelled("restricted")
    pod = _pod("priv", security={"privileged": True, "allow_privilege_escalation": None})
    assert _refusal(core, ns, pod) == (
        'violates PodSecurity "restricted:latest": privileged (container "main" must not set '
        'securityContext.privileged=true), allowPrivilegeEscalation != false (container "main" must set '
        "securityContext.allowPrivilegeEscalation=false)"
    )


def test_restricted_refuses_host_path_volumes(
    core: client.CoreV1Api, labelled: Callable[[str | None], str], tmp_path: Path
) -> None:
    ns = labelled("restricted")
    assert _refusal(core, ns, _pod("hostpath", **_host_volume(tmp_path))) == (
        'violates PodSecurity "restricted:latest": restricted volume types (volume "host" uses restricted '
        'volume type "hostPath")'
    )


def test_restricted_checks_init_containers_for_allow_privilege_escalation(
    core: client.CoreV1Api, labelled: Callable[[str | None], str]
) -> None:
    ns = labelled("restricted")
    lax = client.V1SecurityContext(**{**HARDENED, "allow_privilege_escalation": None})
    init = client.V1Container(name="setup", image="ignored:latest", command=["true"], security_context=lax)
    assert _refusal(core, ns, _pod("escalates", init_containers=[init])) == (
        'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "setup" must '
        "set securityContext.allowPrivilegeEscalation=false)"
    )
    admin = client.V1Capabilities(drop=["ALL"], add=["SYS_ADMIN"])
    adds = _pod("adds", security={"capabilities": admin})
    assert _refusal(core, ns, adds) == (
        'violates PodSecurity "restricted:latest": unrestricted capabilities (container "main" must not '
        'include "SYS_ADMIN" in securityContext.capabilities.add)'
    )


def test_restricted_admits_a_hardened_pod_which_runs(
    core: client.CoreV1Api, labelled: Callable[[str | None], str]
) -> None:
    ns = labelled("restricted")
    bind = client.V1Capabilities(drop=["ALL"], add=["NET_BIND_SERVICE"])
    core.create_namespaced_pod(ns, _pod("hardened", security={"capabilities": bind}))
    wait_phase(core, ns, "hardened", ("Running", "Succeeded"))


def test_baseline_admits_what_only_restricted_refuses_but_not_host_paths_or_privileges(
    core: client.CoreV1Api, labelled: Callable[[str | None], str], tmp_path: Path
) -> None:
    ns = labelled("baseline")
    core.create_namespaced_pod(ns, make_pod("root", ["true"]))
    core.create_namespaced_pod(
        ns, _pod("chown", security={"capabilities": client.V1Capabilities(add=["CHOWN"])})
    )
    assert _refusal(core, ns, _pod("hostpath", **_host_volume(tmp_path))) == (
        'violates PodSecurity "baseline:latest": hostPath volumes (volume "host")'
    )
    privileged = _pod("priv", security={"privileged": True, "allow_privilege_escalation": None})
    assert _refusal(core, ns, privileged) == (
        'violates PodSecurity "baseline:latest": privileged (container "main" must not set '
        "securityContext.privileged=true)"
    )
    host = _pod("hostnet", host_network=True, host_pid=True)
    assert _refusal(core, ns, host) == (
        'violates PodSecurity "baseline:latest": host namespaces (hostNetwork, hostPID)'
    )
    admin = _pod("admin", security={"capabilities": client.V1Capabilities(add=["SYS_ADMIN", "NET_RAW"])})
    assert _refusal(core, ns, admin) == (
        'violates PodSecurity "baseline:latest": non-default capabilities (container "main" must not include '
        '"NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add)'
    )


def test_privileged_or_no_label_admits_everything(
    core: client.CoreV1Api, labelled: Callable[[str | None], str], tmp_path: Path
) -> None:
    for level in ("privileged", None):
        ns = labelled(level)
        core.create_namespaced_pod(ns, make_pod("root", ["true"]))
        wild = _pod(
            "wild",
            security={"privileged": True, "allow_privilege_escalation": None, "run_as_user": 0},
            host_pid=True,
            **_host_volume(tmp_path),
        )
        core.create_namespaced_pod(ns, wild)
        wait_phase(core, ns, "root", ("Succeeded",))


def test_a_label_change_leaves_existing_pods_but_checks_new_ones_and_image_changes(
    core: client.CoreV1Api, labelled: Callable[[str | None], str]
) -> None:
    ns = labelled(None)
    core.create_namespaced_pod(ns, make_pod("before", ["sleep", "30"]))
    wait_phase(core, ns, "before", ("Running",))
    core.patch_namespace(ns, {"metadata": {"labels": {ENFORCE: "restricted"}}})
    assert _refusal(core, ns, make_pod("after", ["true"])).startswith(
        'violates PodSecurity "restricted:latest"'
    )
    assert core.read_namespaced_pod("before", ns).status.phase == "Running"
    core.patch_namespaced_pod("before", ns, {"metadata": {"labels": {"seen": "yes"}}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "before", ns, {"spec": {"containers": [{"name": "main", "image": "other:2"}]}}
        )
    assert err.value.status == 403
    assert error_body(err.value)["message"] == f'pods "before" is forbidden: {ROOT_POD}'
    core.delete_namespaced_pod("before", ns, grace_period_seconds=0)


def test_pod_security_labels_must_parse(
    core: client.CoreV1Api, labelled: Callable[[str | None], str]
) -> None:
    name = f"psa-{uuid.uuid4().hex[:8]}"
    bad = client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={ENFORCE: "strict"}))
    with pytest.raises(ApiException) as err:
        core.create_namespace(bad)
    assert err.value.status == 422
    cause = error_body(err.value)["details"]["causes"][0]
    assert cause["field"] == f"metadata.labels[{ENFORCE}]"
    assert cause["message"] == 'Invalid value: "strict": must be one of privileged, baseline, restricted'
    ns = labelled("baseline")
    version = {"metadata": {"labels": {f"{ENFORCE}-version": "1.30"}}}
    with pytest.raises(ApiException) as err:
        core.patch_namespace(ns, version)
    assert err.value.status == 422
    core.patch_namespace(ns, {"metadata": {"labels": {f"{ENFORCE}-version": "v1.30"}}})


def test_a_job_in_a_restricted_namespace_is_stored_but_its_pods_are_refused(
    core: client.CoreV1Api, batch: client.BatchV1Api, labelled: Callable[[str | None], str]
) -> None:
    ns = labelled("restricted")
    template = make_pod("unused", ["true"])
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="rooted"),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "rooted"}), spec=template.spec
            ),
        ),
    )
    batch.create_namespaced_job(ns, job)

    def refused() -> bool:
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=rooted").items
        return any(e.reason == "FailedCreate" and "violates PodSecurity" in (e.message or "") for e in events)

    wait_for(refused)
    assert not core.list_namespaced_pod(ns).items
    batch.delete_namespaced_job("rooted", ns, propagation_policy="Background")


# -- the platform's own pods ---------------------------------------------------------------------------------


def _learner_spec(ns: str, **overrides: Any) -> JobPodsSpec:
    fields: dict[str, Any] = {
        "job_id": 42,
        "attempt": 1,
        "tenant": "acme",
        "namespace": ns,
        "image": "registry.example/train:1",
        "command": ["python", "train.py"],
        "learners": 2,
        "gpus": 0,
        "cpu_millis": 500,
        "memory_mib": 512,
        "checkpoint_dir": "/checkpoints",
        "data_dir": "/data",
        "result_dir": "/results",
    }
    fields.update(overrides)
    return JobPodsSpec(**fields)


CODE = ArtifactSpec(
    code_url="http://trainyard.example/api/v1/artifacts/42/1/code",
    code_sha256="ab" * 32,
    results_url="http://trainyard.example/api/v1/artifacts/42/1/{learner}/results",
    fetch_image="registry.example/trainyard:1",
)
CODE_AND_DATA = replace(
    CODE, s3_fetch=(S3Fetch(bucket="acme-data", target="/raw", endpoint="https://s3.example"),)
)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {
            "artifacts": CODE_AND_DATA,
            "volumes": [VolumeSpec(name="raw", kind="s3", mount_path="/raw", bucket="acme")],
        },
        {"artifacts": CODE, "checkpoint_claim": "ckpt", "gpus": 1},
    ],
    ids=["plain", "fetch-init-container", "claim-and-gpu"],
)
def test_the_platforms_learner_pods_pass_restricted(
    core: client.CoreV1Api, labelled: Callable[[str | None], str], overrides: dict[str, Any]
) -> None:
    ns = labelled("restricted")
    pod = make_learner_pod(_learner_spec(ns, **overrides), 0)
    created = core.create_namespaced_pod(ns, pod, dry_run="All")
    expected = ["fetch"] if "artifacts" in overrides else []
    assert [c.name for c in created.spec.init_containers or []] == expected


def test_a_checkpoint_host_folder_needs_the_privileged_level(
    core: client.CoreV1Api, labelled: Callable[[str | None], str], tmp_path: Path
) -> None:
    spec = {"checkpoint_host_path": str(tmp_path / "acme" / "42")}
    for level, reason in (
        (
            "restricted",
            'restricted volume types (volume "checkpoint" uses restricted volume type "hostPath")',
        ),
        ("baseline", 'hostPath volumes (volume "checkpoint")'),
    ):
        ns = labelled(level)
        pod = make_learner_pod(_learner_spec(ns, **spec), 0)
        assert _refusal(core, ns, pod) == f'violates PodSecurity "{level}:latest": {reason}'
    ns = labelled("privileged")
    core.create_namespaced_pod(ns, make_learner_pod(_learner_spec(ns, **spec), 0), dry_run="All")

"""Private registries: a container whose image is on a private host starts only when its pod names a
dockerconfigjson pull secret for that host (with the login the host accepts, when it checks one); otherwise
it waits in ErrImagePull, then ImagePullBackOff, with the registry's 401 in the message, and never runs."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.cli import build_parser
from kubesim.registries import PrivateRegistries, image_host, parse_registry
from kubesim.testing import KubeSim
from tests.kubesim.conftest import make_pod, wait_phase
from tests.kubesim.test_disruption import _waiting_reasons

HOST = "registry.example.com"


def _pull_secret(core: client.CoreV1Api, ns: str, name: str, key: str, user: str, password: str) -> None:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = json.dumps({"auths": {key: {"auth": auth}}})
    core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=name),
            type="kubernetes.io/dockerconfigjson",
            string_data={".dockerconfigjson": config},
        ),
    )


def _pod(name: str, image: str, *secrets: str) -> client.V1Pod:
    pod = make_pod(name, ["sh", "-c", "echo pulled"], image=image)
    pod.spec.image_pull_secrets = [client.V1LocalObjectReference(name=s) for s in secrets] or None
    return pod


def test_a_private_registry_pulls_only_with_a_pull_secret_for_its_host(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    sim.add_private_registry(HOST, "robot", "s3cret")
    try:
        image = f"{HOST}/team/train:1"
        core.create_namespaced_pod(ns, _pod("anonymous", image))
        seen = _waiting_reasons(core, ns, "anonymous", {"ErrImagePull", "ImagePullBackOff"})
        assert "401 Unauthorized" in seen["ErrImagePull"].message and image in seen["ErrImagePull"].message

        _pull_secret(core, ns, "wrong", HOST, "robot", "guess")
        core.create_namespaced_pod(ns, _pod("wrong-login", image, "wrong"))
        seen = _waiting_reasons(core, ns, "wrong-login", {"ErrImagePull"})
        assert "incorrect username or password" in seen["ErrImagePull"].message

        _pull_secret(core, ns, "other-host", "ghcr.io", "robot", "s3cret")
        _pull_secret(core, ns, "right", f"https://{HOST}/v1/", "robot", "s3cret")
        core.create_namespaced_pod(ns, _pod("with-secret", image, "missing", "other-host", "right"))
        assert wait_phase(core, ns, "with-secret", ("Succeeded",)).status.phase == "Succeeded"
        assert core.read_namespaced_pod_log("with-secret", ns) == "pulled\n"
        reasons = {e.reason for e in core.list_namespaced_event(ns).items}
        assert "FailedToRetrieveImagePullSecret" in reasons  # "missing" names no Secret

        core.create_namespaced_pod(ns, _pod("public", "ghcr.io/team/train:1"))
        assert wait_phase(core, ns, "public", ("Succeeded",)).status.phase == "Succeeded"
        assert core.read_namespaced_pod(name="anonymous", namespace=ns).status.phase == "Pending"
    finally:
        sim.remove_private_registry(HOST)
    # Public again: the waiting container starts at its next retry.
    assert wait_phase(core, ns, "anonymous", ("Succeeded",), timeout=30).status.phase == "Succeeded"


def test_registry_hosts_are_read_as_a_container_runtime_does() -> None:
    assert image_host("python:3.11") == "docker.io" and image_host("me/app:1") == "docker.io"
    assert image_host("Registry.Example.com:5000/a/b") == "registry.example.com:5000"
    assert image_host("localhost/app") == "localhost"
    assert parse_registry("index.docker.io=me:pw:with:colons") == ("docker.io", ("me", "pw:with:colons"))
    registries = PrivateRegistries(["docker.io"])
    hub = base64.b64encode(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": "bWU6cHc="}}}).encode()
    )
    secret = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": hub.decode()}}
    assert registries.pull_error("python:3.11", []) is not None
    assert registries.pull_error("python:3.11", [secret]) is None
    assert registries.pull_error("ghcr.io/a/b", []) is None
    args = build_parser().parse_args(
        ["serve", "--state-dir", "/tmp/x", "--kubeconfig", "/tmp/k", "--private-registry", f"{HOST}=u:p"]
    )
    assert args.private_registry == [f"{HOST}=u:p"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["serve", "--state-dir", "/x", "--kubeconfig", "/k", "--private-registry", "https://h/v2"]
        )


def test_a_docker_config_secret_without_valid_json_is_refused(core: client.CoreV1Api, ns: str) -> None:
    for data, reason in (
        ({}, "Required value"),
        ({".dockerconfigjson": "{not json"}, "secret contents redacted"),
    ):
        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name="bad"), type="kubernetes.io/dockerconfigjson", string_data=data
        )
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_secret(ns, body)
        assert refused.value.status == 422 and reason in refused.value.body
        assert "{not json" not in refused.value.body

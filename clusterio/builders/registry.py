"""The image pull Secret of one attempt: a `kubernetes.io/dockerconfigjson` Secret its learner pods name in
`imagePullSecrets`, so the kubelet authenticates to a private registry with the tenant's credentials."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass

from kubernetes import client

from clusterio import names

DOCKER_CONFIG_TYPE = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_KEY = ".dockerconfigjson"
# The key Docker Hub's credentials have in a docker config (what `docker login` and
# `kubectl create secret docker-registry` write); images name the registry docker.io.
DOCKER_HUB_KEY = "https://index.docker.io/v1/"


@dataclass(frozen=True)
class RegistryLogin:
    """Pull credentials for one registry `host` (as images name it: `registry.example.com:5000`, `docker.io`)."""

    host: str
    username: str
    password: str

    def __post_init__(self) -> None:
        if not self.host or "/" in self.host:
            raise ValueError(f"a registry host without scheme or path, got {self.host!r}")
        if ":" in self.username:
            raise ValueError("a registry username cannot contain ':'")

    def __repr__(self) -> str:
        return f"RegistryLogin(host={self.host!r}, username={self.username!r}, password=...)"


def docker_config(login: RegistryLogin) -> str:
    """The `.dockerconfigjson` document for `login`: `auths` keyed by the registry, with `auth` the base64
    of `username:password` (what the kubelet reads) besides the fields themselves."""
    key = DOCKER_HUB_KEY if login.host == "docker.io" else login.host
    auth = base64.b64encode(f"{login.username}:{login.password}".encode()).decode()
    entry = {"username": login.username, "password": login.password, "auth": auth}
    return json.dumps({"auths": {key: entry}}, sort_keys=True)


def make_pull_secret(
    namespace: str, name: str, labels: Mapping[str, str], login: RegistryLogin
) -> client.V1Secret:
    """Build the attempt's image pull Secret (labelled like the attempt's other objects, so teardown and
    reconcile find it); the pods name it in `imagePullSecrets`, never carry its content."""
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        type=DOCKER_CONFIG_TYPE,
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, labels={**labels, names.LABEL_MANAGED_BY: names.MANAGED_BY}
        ),
        string_data={DOCKER_CONFIG_KEY: docker_config(login)},
    )

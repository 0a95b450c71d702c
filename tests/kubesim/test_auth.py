"""Authentication: kubesim answers only the bearer token of its kubeconfig, as kube-apiserver with
``--anonymous-auth=false`` and a token authenticator."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim, running_kubesim

UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
PATHS = (
    ("GET", "/api/v1/secrets"),
    ("GET", "/api/v1/namespaces/default/pods?watch=true"),
    ("POST", "/api/v1/namespaces/default/configmaps"),
    ("DELETE", "/api/v1/namespaces/default"),
    ("GET", "/api"),
    ("GET", "/apis"),
    ("GET", "/version"),
    ("GET", "/healthz"),
    ("GET", "/livez"),
    ("GET", "/readyz"),
    ("GET", "/openapi/v2"),
    ("GET", "/nothing/here"),
    ("GET", "/kubesim/faults"),
    ("POST", "/kubesim/faults"),
    ("POST", "/kubesim/nodes/kubesim-node/lose"),
)


def _request(sim: KubeSim, method: str, path: str, authorization: str | None = None) -> httpx.Response:
    """A raw HTTPS request to kubesim (trusting its CA) with the given ``Authorization``, if any."""
    headers = {"Authorization": authorization} if authorization is not None else {}
    return httpx.request(
        method,
        sim.url + path,
        headers=headers,
        content=b'{"path": "x"}',
        verify=sim.ssl_context(),
        timeout=30,
    )


def _unauthorized(answer: httpx.Response) -> bool:
    return (
        answer.status_code == 401
        and answer.headers["content-type"] == "application/json"
        and answer.json() == UNAUTHORIZED
    )


@pytest.mark.parametrize(("method", "path"), PATHS)
def test_anonymous_requests_get_401_on_every_path(sim: KubeSim, method: str, path: str) -> None:
    assert _unauthorized(_request(sim, method, path))


@pytest.mark.parametrize(
    "authorization", ["Bearer", "Bearer wrong-token", "Basic a3ViZTpzaW0=", "wrong-token", "Token abc"]
)
def test_a_wrong_or_malformed_authorization_gets_401(sim: KubeSim, authorization: str) -> None:
    assert _unauthorized(_request(sim, "GET", "/api/v1/secrets", authorization))


def test_the_kubeconfig_token_is_accepted_and_a_tampered_one_is_not(sim: KubeSim) -> None:
    answer = _request(sim, "GET", "/healthz", f"bearer {sim.token}")
    assert answer.status_code == 200, "the scheme is read case-insensitively, as the apiserver does"
    assert _unauthorized(_request(sim, "GET", "/healthz", f"Bearer {sim.token}x"))


def test_the_api_is_served_over_tls_only(sim: KubeSim) -> None:
    assert sim.url.startswith("https://127.0.0.1:")
    plain = sim.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):
        httpx.get(plain + "/api/v1/secrets", headers=sim.auth_headers(), timeout=10)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(sim.url + "/healthz", headers=sim.auth_headers(), timeout=10)
    assert _request(sim, "GET", "/healthz", f"Bearer {sim.token}").text == '"ok"'


def test_official_client_from_the_kubeconfig_works_and_without_token_gets_401(sim: KubeSim) -> None:
    written = yaml.safe_load(sim.kubeconfig_path.read_text())
    assert written["users"][0]["user"] == {"token": sim.token}
    assert stat.S_IMODE(sim.kubeconfig_path.stat().st_mode) == 0o600
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig_path)))
    assert core.list_namespace().items
    anonymous = client.Configuration()
    anonymous.host = sim.url
    anonymous.ssl_ca_cert = str(sim.tls.ca_cert)
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(client.ApiClient(anonymous)).list_namespace()
    assert err.value.status == 401 and json.loads(err.value.body or "") == UNAUTHORIZED


def test_the_token_and_ca_are_random_per_cluster_and_kept_across_restarts(tmp_path: Path) -> None:
    with running_kubesim(tmp_path / "one", use_cgroups=False) as one:
        first, first_ca = one.token, one.tls.ca_cert.read_bytes()
        for secret in ("token", "ca.key", "apiserver.key"):
            assert stat.S_IMODE((tmp_path / "one" / secret).stat().st_mode) == 0o600, secret
        one.restart()
        assert one.token == first
        assert _request(one, "GET", "/healthz", f"Bearer {first}").status_code == 200
    with running_kubesim(tmp_path / "one", use_cgroups=False) as again:
        assert again.token == first, "a new process on the same state dir keeps the token"
        assert again.tls.ca_cert.read_bytes() == first_ca
    with running_kubesim(tmp_path / "two", use_cgroups=False) as two:
        assert two.token != first and len(two.token) >= 40
        assert two.tls.ca_cert.read_bytes() != first_ca
        assert _unauthorized(_request(two, "GET", "/api/v1/namespaces", f"Bearer {first}"))

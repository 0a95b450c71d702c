"""kubesim's OpenAPI documents (v2 JSON and protobuf, v3) and server-side field validation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import httpx
import pytest
from kubernetes import client

from kubesim import resources
from kubesim.openapi import fields
from kubesim.openapi.gnostic import PROTOBUF_CONTENT_TYPE
from kubesim.testing import KubeSim
from tests.kubesim.conftest import make_pod, wait_for, wait_phase

PROTOBUF_ACCEPT = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def fetch(sim: KubeSim, path: str, **headers: str) -> tuple[int, httpx.Headers, bytes]:
    """A raw GET from kubesim: status, headers and body."""
    headers = {**sim.auth_headers(), **headers}
    response = httpx.get(sim.url + path, headers=headers, verify=sim.ssl_context(), timeout=30)
    return response.status_code, response.headers, response.content


def send(sim: KubeSim, method: str, path: str, body: Any, content_type: str = "application/json") -> Any:
    """A write with a JSON body: status, the Warning headers and the decoded answer."""
    headers = {**sim.auth_headers(), "Content-Type": content_type}
    response = httpx.request(
        method,
        sim.url + path,
        content=json.dumps(body),
        headers=headers,
        verify=sim.ssl_context(),
        timeout=30,
    )
    return response.status_code, response.headers.get_list("Warning"), response.json()


def test_openapi_v2_json_defines_served_kinds_with_their_group_version_kind(sim: KubeSim) -> None:
    status, headers, body = fetch(sim, "/openapi/v2", Accept="application/json")
    assert status == 200 and headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["swagger"] == "2.0" and doc["info"]["version"] == "v1.32.0"
    defs = doc["definitions"]
    for name, gvk in (
        ("io.k8s.api.core.v1.Pod", {"group": "", "version": "v1", "kind": "Pod"}),
        ("io.k8s.api.core.v1.PodList", {"group": "", "version": "v1", "kind": "PodList"}),
        ("io.k8s.api.batch.v1.Job", {"group": "batch", "version": "v1", "kind": "Job"}),
        (
            "io.k8s.api.networking.v1.NetworkPolicy",
            {"group": "networking.k8s.io", "version": "v1", "kind": "NetworkPolicy"},
        ),
    ):
        assert defs[name]["x-kubernetes-group-version-kind"] == [gvk]
    pod = defs["io.k8s.api.core.v1.Pod"]
    assert pod["type"] == "object" and pod["properties"]["apiVersion"] == {
        "description": pod["properties"]["apiVersion"]["description"],
        "type": "string",
    }
    assert pod["properties"]["spec"]["$ref"] == "#/definitions/io.k8s.api.core.v1.PodSpec"
    assert defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] == {
        "type": "string",
        "format": "int-or-string",
    }
    assert "io.k8s.api.apps.v1.Deployment" not in defs  # kubesim serves no Deployments
    refs = {v for v in _values(doc, "$ref")}
    assert refs and all(ref.removeprefix("#/definitions/") in defs for ref in refs)
    patch = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}


def _values(doc: Any, key: str) -> list[Any]:
    if isinstance(doc, dict):
        found = [v for k, v in doc.items() if k == key]
        return found + [x for v in doc.values() for x in _values(v, key)]
    if isinstance(doc, list):
        return [x for v in doc for x in _values(v, key)]
    return []


def _wire_fields(data: bytes) -> list[tuple[int, Any]]:
    """A generic protobuf wire-format reader (written from the encoding spec, not from kubesim's writer)."""
    fields: list[tuple[int, Any]] = []
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.append((number, varint()))
        elif wire == 1:
            fields.append((number, data[i : i + 8]))
            i += 8
        elif wire == 2:
            size = varint()
            fields.append((number, data[i : i + size]))
            i += size
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return fields


def _field(data: bytes, number: int) -> list[Any]:
    return [value for n, value in _wire_fields(data) if n == number]


def test_openapi_v2_protobuf_answers_kubectls_accept_header_and_decodes(sim: KubeSim) -> None:
    status, headers, body = fetch(sim, "/openapi/v2", Accept=PROTOBUF_ACCEPT)
    assert status == 200 and headers["content-type"] == PROTOBUF_CONTENT_TYPE
    # openapi.v2.Document: swagger = 1, info = 2 (title 1, version 2), definitions = 9.
    assert _field(body, 1) == [b"2.0"]
    assert _field(_field(body, 2)[0], 2) == [b"v1.32.0"]
    named = {bytes(_field(entry, 1)[0]): _field(entry, 2)[0] for entry in _field(_field(body, 9)[0], 1)}
    pod = named[b"io.k8s.api.core.v1.Pod"]
    # Schema: description = 4, type = 22 (TypeItem.value = 1), vendor_extension = 31 (NamedAny: name, Any.yaml = 2).
    assert _field(_field(pod, 22)[0], 1) == [b"object"]
    extensions = {bytes(_field(e, 1)[0]): _field(_field(e, 2)[0], 2)[0] for e in _field(pod, 31)}
    assert b"kind: Pod" in extensions[b"x-kubernetes-group-version-kind"]
    assert fetch(sim, "/swagger-2.0.0.pb-v1")[2] == body
    again = fetch(sim, "/openapi/v2", Accept=PROTOBUF_ACCEPT, **{"If-None-Match": headers["etag"]})
    assert again[0] == 304


def test_openapi_v3_discovery_leads_to_group_version_documents(sim: KubeSim) -> None:
    status, _, body = fetch(sim, "/openapi/v3")
    assert status == 200
    listing = json.loads(body)["paths"]
    assert set(listing) == {
        "api/v1",
        "apis/batch/v1",
        "apis/networking.k8s.io/v1",
        "apis/scheduling.k8s.io/v1",
        "apis/storage.k8s.io/v1",
    }
    url = listing["apis/batch/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/batch/v1?hash=")
    status, headers, body = fetch(sim, url)
    assert status == 200 and headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc["openapi"].startswith("3.0")
    job = doc["components"]["schemas"]["io.k8s.api.batch.v1.Job"]
    assert job["x-kubernetes-group-version-kind"] == [{"group": "batch", "version": "v1", "kind": "Job"}]
    assert job["properties"]["spec"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.api.batch.v1.JobSpec"}
    ]
    patch = doc["paths"]["/apis/batch/v1/namespaces/{namespace}/jobs/{name}"]["patch"]
    assert {"name": "fieldValidation", "in": "query"}.items() <= next(
        p for p in patch["parameters"] if p["name"] == "fieldValidation"
    ).items()
    assert fetch(sim, "/openapi/v3/apis/apps/v1")[0] == 404


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "command": ["true"], **spec.pop("container", {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }


def test_strict_field_validation_refuses_unknown_fields_naming_them(sim: KubeSim, ns: str) -> None:
    pods = f"/api/v1/namespaces/{ns}/pods"
    status, _, body = send(
        sim, "POST", pods + "?fieldValidation=Strict", _pod("s", foo=1, container={"bar": 2})
    )
    assert status == 400 and body["reason"] == "BadRequest"
    assert body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].bar", unknown field "spec.foo"'
    )
    assert send(sim, "POST", pods + "?fieldValidation=Strict", _pod("s"))[0] == 201
    patched = send(
        sim,
        "PATCH",
        f"{pods}/s?fieldValidation=Strict",
        {"spec": {"nope": True}},
        "application/merge-patch+json",
    )
    assert patched[0] == 400 and patched[2]["message"] == 'strict decoding error: unknown field "spec.nope"'
    assert send(sim, "POST", pods + "?fieldValidation=Sometimes", _pod("t"))[0] == 400


def test_warn_is_the_default_and_drops_unknown_fields_with_a_warning(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    pods = f"/api/v1/namespaces/{ns}/pods"
    status, warnings, body = send(sim, "POST", pods, _pod("w", foo=1))
    assert status == 201 and warnings == ['299 - "unknown field \\"spec.foo\\""']
    assert "foo" not in body["spec"]
    status, warnings, body = send(sim, "POST", pods + "?fieldValidation=Ignore", _pod("i", foo=1))
    assert status == 201 and warnings == [] and "foo" not in body["spec"]
    assert core.read_namespaced_pod("w", ns).spec.containers[0].name == "c"


KUBECTL_1_20 = Path(__file__).resolve().parents[2] / "var/tools/kubectl-1.20/usr/bin/kubectl"


def _working(path: str | None) -> bool:
    if not path:
        return False
    try:
        done = subprocess.run([path, "version", "--client"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.fixture(
    params=[
        pytest.param(shutil.which("kubectl"), id="kubectl"),
        pytest.param(str(KUBECTL_1_20), id="kubectl-1.20"),
    ]
)
def kubectl(
    request: pytest.FixtureRequest, sim: KubeSim, tmp_path: Path
) -> Callable[..., CompletedProcess[str]]:
    """Run a kubectl (the installed one, or Debian's 1.20 that ``make tools`` unpacks) against kubesim."""
    path = request.param
    if not _working(path):
        pytest.skip(f"{request.node.callspec.id} is not available (for 1.20: make tools)")
    env = dict(os.environ, KUBECONFIG=str(sim.kubeconfig_path))

    def run(*args: str) -> CompletedProcess[str]:
        command = [path, "--cache-dir", str(tmp_path / "cache"), *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)

    return run


def _manifest(tmp_path: Path, name: str, extra: str = "") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{extra}  restartPolicy: Never\n"
        "  containers:\n  - name: c\n    image: busybox\n    command: [python3, -c, 'print(42)']\n"
    )
    return str(path)


def test_kubectl_apply_validates_against_the_schema_and_creates_the_pod(
    kubectl: Callable[..., CompletedProcess[str]], core: client.CoreV1Api, ns: str, tmp_path: Path
) -> None:
    done = kubectl("apply", "-n", ns, "-f", _manifest(tmp_path, "valid"))
    assert done.returncode == 0, done.stderr
    assert "pod/valid created" in done.stdout
    assert core.read_namespaced_pod("valid", ns).spec.containers[0].image == "busybox"


def test_kubectl_apply_refuses_a_manifest_with_an_unknown_field_naming_it(
    kubectl: Callable[..., CompletedProcess[str]], core: client.CoreV1Api, ns: str, tmp_path: Path
) -> None:
    done = kubectl("apply", "-n", ns, "-f", _manifest(tmp_path, "typo", "  restartPolicyy: Never\n"))
    assert done.returncode != 0
    # kubectl 1.20 checks the manifest itself; newer ones send fieldValidation=Strict and kubesim refuses it.
    assert (
        'unknown field "restartPolicyy" in io.k8s.api.core.v1.PodSpec' in done.stderr
        or 'strict decoding error: unknown field "spec.restartPolicyy"' in done.stderr
    ), done.stderr
    assert "typo" not in {p.metadata.name for p in core.list_namespaced_pod(ns).items}


def test_kubectl_explain_prints_field_descriptions(kubectl: Callable[..., CompletedProcess[str]]) -> None:
    done = kubectl("explain", "pod.spec.containers")
    assert done.returncode == 0, done.stderr
    assert "List of containers belonging to the pod." in done.stdout
    assert "imagePullPolicy" in done.stdout
    done = kubectl("explain", "jobs.spec.backoffLimit")
    assert done.returncode == 0, done.stderr
    assert "Specifies the number of retries before marking this job failed." in done.stdout


def test_objects_kubesim_writes_itself_stay_within_the_published_schema(
    sim: KubeSim, core: client.CoreV1Api, batch: client.BatchV1Api, ns: str
) -> None:
    """A field kubesim adds that the schema lacks would come back as a warning on every later patch."""
    core.create_namespaced_pod(ns, make_pod("inside", ["python", "-c", "print(1)"]))
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="inside-job"),
        spec=client.V1JobSpec(template=client.V1PodTemplateSpec(spec=make_pod("x", ["true"]).spec)),
    )
    batch.create_namespaced_job(ns, job)
    wait_phase(core, ns, "inside", ("Succeeded",))
    wait_for(lambda: (batch.read_namespaced_job("inside-job", ns).status.succeeded or 0) >= 1)
    checked: dict[str, int] = {}
    for res in (r for r in resources.RESOURCES if r.stored):
        prefix = f"/apis/{res.group}/{res.version}" if res.group else "/api/v1"
        items = json.loads(fetch(sim, f"{prefix}/{res.plural}")[2])["items"]
        for item in items:
            assert fields.prune(res, item)[1] == [], (res.plural, item["metadata"]["name"])
        checked[res.plural] = len(items)
    assert all(checked[p] for p in ("pods", "jobs", "events", "nodes", "namespaces", "serviceaccounts"))


def test_dry_run_writes_are_checked_and_answered_but_not_stored(
    sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    pods = f"/api/v1/namespaces/{ns}/pods"
    status, _, body = send(sim, "POST", pods + "?dryRun=All", _pod("dry"))
    assert status == 201 and body["metadata"]["name"] == "dry" and body["status"]["phase"] == "Pending"
    assert core.list_namespaced_pod(ns).items == []
    assert send(sim, "POST", pods + "?dryRun=All", {**_pod("dry"), "spec": {"containers": []}})[0] == 422
    assert send(sim, "POST", pods, _pod("real"))[0] == 201
    labelled = {"metadata": {"labels": {"dry": "yes"}}}
    status, _, body = send(sim, "PATCH", f"{pods}/real?dryRun=All", labelled, "application/merge-patch+json")
    assert status == 200 and body["metadata"]["labels"] == {"dry": "yes"}
    assert core.read_namespaced_pod("real", ns).metadata.labels is None
    assert send(sim, "DELETE", f"{pods}/real?dryRun=All", {})[0] == 200
    assert core.read_namespaced_pod("real", ns).metadata.deletion_timestamp is None
    assert send(sim, "POST", pods + "?dryRun=Maybe", _pod("dry"))[0] == 400


def test_kubectl_server_dry_run_changes_nothing(
    kubectl: Callable[..., CompletedProcess[str]], core: client.CoreV1Api, ns: str, tmp_path: Path
) -> None:
    done = kubectl("apply", "--dry-run=server", "-n", ns, "-f", _manifest(tmp_path, "rehearsal"))
    assert done.returncode == 0, done.stderr
    assert "pod/rehearsal created (server dry run)" in done.stdout
    assert core.list_namespaced_pod(ns).items == []

"""FfDL's own manifests translate or are refused by name; every FfDL framework has its learner image;
`mount_volume` data stores become host (or pvc) volumes under the tenant's host-path policy."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.core import ffdl
from jobs.core.policy import policy_problems
from jobs.core.spec import ParsedSpec, SpecError, parse_spec
from jobs.models import Job
from jobs.services import JobRejected, job_submit
from tests.conftest import FFDL_MANIFESTS
from tests.factories import allow, make_tenant, member

REPO_MANIFESTS = sorted((Path(__file__).parent / "data" / "ffdl").glob("*.y*ml"))
# The two FfDL samples whose `auth_url` is a placeholder, not a URL: refused on that field, by name.
REFUSED = {
    "converter--sample-FfDL.yaml": {
        "data_stores[0].connection.auth_url": ["must be an http:// or https:// URL without credentials in it"]
    },
    "tf-model--manifest-for-test.yml": {
        "data_stores[0].connection.auth_url": ["must be an http:// or https:// URL without credentials in it"]
    },
}
HOST_MANIFEST = {
    "name": "tf-hostmount",
    "cpus": 0.25,
    "memory": "1Gb",
    "data_stores": [
        {
            "id": "hostmount",
            "type": "mount_volume",
            "training_data": {"container": "train-data"},
            "training_results": {"container": "results"},
            "connection": {"type": "host_mount", "name": "host-mount", "path": "/cosdata"},
        }
    ],
    "framework": {"name": "tensorflow", "version": "1.5.0-py3", "command": "python3 train.py"},
}


@dataclass(frozen=True)
class Policy:
    host_path_prefixes: tuple[str, ...] = ()
    image_registries: tuple[str, ...] = ()
    datastore_hosts: tuple[str, ...] = ()
    max_priority: int = 100
    job_claims: str = "none"


def test_the_repository_holds_fffdls_example_manifests() -> None:
    names = {path.name for path in REPO_MANIFESTS}
    assert len(names) >= 20
    assert {"caffe2-model--manifest.yml", "FfDL-H2Oai--h2o-model--manifest-h2o.yml"} <= names
    assert "tf-model--manifest-hostmount.yml" in names


@pytest.mark.parametrize("path", REPO_MANIFESTS + FFDL_MANIFESTS, ids=lambda p: p.name)
def test_every_ffdl_manifest_translates_or_is_refused_by_name(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    if path.name in REFUSED:
        with pytest.raises(SpecError) as refused:
            parse_spec(path.read_bytes())
        assert refused.value.errors == REFUSED[path.name]
        return
    parsed = parse_spec(path.read_bytes())

    assert parsed.source == "ffdl"
    name, version = raw["framework"]["name"].lower(), str(raw["framework"]["version"])
    assert parsed.spec["image"] == ffdl.FRAMEWORK_IMAGES[name].format(version=version)
    assert parsed.spec["command"][:2] == ["/bin/sh", "-c"]
    assert len(parsed.spec["volumes"]) == sum(
        ("training_data" in store) + ("training_results" in store) for store in raw["data_stores"]
    )
    assert parse_spec(parsed.spec).spec == parsed.spec


@pytest.mark.parametrize(
    ("name", "version", "image"),
    [
        ("h2o3", "latest", "opsh2oai/h2o3-ffdl:latest"),
        ("caffe2", "c2v0.8.1.cpu.full.ubuntu14.04", "caffe2ai/caffe2:c2v0.8.1.cpu.full.ubuntu14.04"),
        ("pytorchmpi", "0925mpi", "tomcli/pytorch:0925mpi"),
        ("H2O3", "3.20", "opsh2oai/h2o3-ffdl:3.20"),
    ],
)
def test_each_ffdl_framework_runs_ffdls_learner_image(name: str, version: str, image: str) -> None:
    manifest = copy.deepcopy(HOST_MANIFEST)
    command = "./h2o3-cluster.sh;\n  python train.py --target response\n"
    manifest["framework"] = {"name": name, "version": version, "command": command}

    spec = parse_spec(manifest).spec

    assert spec["image"] == image
    assert spec["framework"] == {"name": name.lower(), "version": version}
    assert spec["command"] == ["/bin/sh", "-c", "./h2o3-cluster.sh; python train.py --target response"]


@pytest.mark.parametrize("name", ["torch", "mxnet", "Torch"])
def test_a_framework_ffdl_had_no_image_for_is_refused_with_the_reason(name: str) -> None:
    manifest = copy.deepcopy(HOST_MANIFEST)
    manifest["framework"]["name"] = name

    with pytest.raises(SpecError) as refused:
        parse_spec(manifest)

    reason = ffdl.REFUSED_FRAMEWORKS[name.lower()]
    assert refused.value.errors == {"framework.name": [f"'{name.lower()}' is not supported: {reason}"]}


def test_unknown_framework_lists_every_ffdl_framework() -> None:
    manifest = copy.deepcopy(HOST_MANIFEST)
    manifest["framework"]["name"] = "theano"

    with pytest.raises(SpecError) as refused:
        parse_spec(manifest)

    message = refused.value.errors["framework.name"][0]
    assert all(name in message for name in ("h2o3", "caffe2", "pytorchmpi", "custom"))


def test_host_mount_store_becomes_host_volumes_of_the_containers_under_its_path() -> None:
    parsed = parse_spec(HOST_MANIFEST)

    assert parsed.spec["volumes"] == [
        {
            "name": "data-hostmount",
            "kind": "data",
            "type": "host",
            "mount_path": "/mnt/data/hostmount",
            "read_only": True,
            "path": "/cosdata/train-data",
        },
        {
            "name": "results-hostmount",
            "kind": "results",
            "type": "host",
            "mount_path": "/mnt/results/hostmount",
            "read_only": False,
            "path": "/cosdata/results",
        },
    ]
    assert parsed.secrets == {}
    assert parsed.field_name("volumes[1].path") == "data_stores[0].connection.path"


def policy_errors(parsed: ParsedSpec, policy: Policy) -> dict[str, list[str]]:
    """What submit reports: the policy's problems under the names the manifest used."""
    problems = policy_problems(parsed.spec, policy, tenant="acme", resolve=lambda host: [])
    return {parsed.field_name(path): messages for path, messages in problems.items()}


def test_host_mount_is_allowed_under_the_tenants_host_path_prefixes() -> None:
    parsed = parse_spec(HOST_MANIFEST)

    assert policy_errors(parsed, Policy(host_path_prefixes=("/cosdata",))) == {}
    assert policy_errors(parsed, Policy(host_path_prefixes=("/cosdata/train-data", "/cosdata/results"))) == {}


def test_host_mount_the_policy_forbids_is_refused_on_the_ffdl_field() -> None:
    parsed = parse_spec(HOST_MANIFEST)

    assert policy_errors(parsed, Policy()) == {
        "data_stores[0].connection.path": [
            "host folders are not allowed for tenant acme; a platform admin can allow some in the tenant's "
            "policy (or use a pvc or s3 volume)"
        ]
    }
    assert policy_errors(parsed, Policy(host_path_prefixes=("/srv",))) == {
        "data_stores[0].connection.path": [
            "/cosdata/results is not under the folders tenant acme may mount: /srv"
        ]
    }


def test_mount_volume_with_a_claim_becomes_pvc_volumes() -> None:
    manifest = copy.deepcopy(HOST_MANIFEST)
    manifest["data_stores"][0]["connection"] = {"type": "host_mount", "claim": "datasets"}

    parsed = parse_spec(manifest)

    assert [(v["type"], v["claim"], v["mount_path"]) for v in parsed.spec["volumes"]] == [
        ("pvc", "datasets", "/mnt/data/hostmount"),
        ("pvc", "datasets", "/mnt/results/hostmount"),
    ]
    assert policy_errors(parsed, Policy()) == {}


def errors_with_connection(connection: Any, store_type: str = "mount_volume", **store: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(HOST_MANIFEST)
    manifest["data_stores"][0].update(type=store_type, connection=connection, **store)
    with pytest.raises(SpecError) as refused:
        parse_spec(manifest)
    return refused.value.errors


@pytest.mark.parametrize(
    ("connection", "path", "fragment"),
    [
        (None, "data_stores[0].connection", "required for mount_volume"),
        ({"type": "host_mount"}, "data_stores[0].connection.path", "required for a host_mount"),
        ({"type": "nfs", "path": "/d"}, "data_stores[0].connection.type", "must be 'host_mount'"),
        ({"path": "/d", "claim": "c"}, "data_stores[0].connection.claim", "not both"),
        ({"path": "/d", "auth_url": "http://s3"}, "data_stores[0].connection.auth_url", "no endpoint"),
        ({"path": "/d", "password": "pw-xyz"}, "data_stores[0].connection.password", "no endpoint"),
        ({"path": "/proc"}, "data_stores[0].connection.path", "system path"),
        ({"path": "data"}, "data_stores[0].connection.path", "absolute path"),
        ({"path": "/d", "claim": "Bad Claim"}, "data_stores[0].connection.claim", "not both"),
        ({"claim": "Bad Claim"}, "data_stores[0].connection.claim", "PersistentVolumeClaim"),
        ({"path": "/d", "project_id": "p"}, "data_stores[0].connection.project_id", "Swift"),
    ],
)
def test_bad_mount_volume_connection_is_refused_on_its_ffdl_field(
    connection: Any, path: str, fragment: str
) -> None:
    errors = errors_with_connection(connection)

    assert path in errors, errors
    assert any(fragment in message for message in errors[path]), errors[path]
    assert all("pw-xyz" not in message for messages in errors.values() for message in messages)


def test_a_missing_node_folder_is_reported_once() -> None:
    assert errors_with_connection(None) == {
        "data_stores[0].connection": [
            "required for mount_volume: `type: host_mount` and `path: <node folder>` (or `claim`)"
        ]
    }
    assert errors_with_connection({"type": "host_mount"}) == {
        "data_stores[0].connection.path": [
            "required for a host_mount: the node folder the containers are folders of"
        ]
    }
    assert errors_with_connection({"path": 5}) == {
        "data_stores[0].connection.path": ["must be an absolute path like '/data', got 5"]
    }


def test_mount_volume_container_must_stay_under_the_node_folder() -> None:
    errors = errors_with_connection(
        {"path": "/cosdata"}, training_data={"container": "../etc"}, training_results={"container": "/abs"}
    )

    assert "relative path without '..'" in errors["data_stores[0].training_data.container"][0]
    assert "relative path without '..'" in errors["data_stores[0].training_results.container"][0]


@pytest.mark.parametrize("key", ["path", "name", "claim"])
def test_mount_keys_on_an_s3_store_are_refused_by_name(key: str) -> None:
    connection = {"auth_url": "https://s3.example.com", key: "x"}

    errors = errors_with_connection(connection, store_type="mount_cos")

    assert errors == {f"data_stores[0].connection.{key}": [f"not accepted here: {ffdl.mapping.MOUNT_ONLY}"]}


@pytest.mark.parametrize("store_type", sorted(ffdl.REFUSED_STORE_TYPES))
def test_ffdls_other_data_store_types_are_refused_with_the_reason(store_type: str) -> None:
    errors = errors_with_connection({"auth_url": "https://s3.example.com"}, store_type=store_type)

    reason = ffdl.REFUSED_STORE_TYPES[store_type]
    assert errors == {"data_stores[0].type": [f"'{store_type}' is not supported: {reason}"]}


def test_region_goes_to_the_secrets_with_the_credentials() -> None:
    connection = {"auth_url": "https://s3.example.com", "user_name": "u", "password": "p", "region": "eu-de"}

    manifest = copy.deepcopy(HOST_MANIFEST)
    manifest["data_stores"][0].update(type="mount_cos", connection=connection)
    parsed = parse_spec(manifest)

    assert parsed.secrets == {
        "hostmount": {"access_key_id": "u", "secret_access_key": "p", "region": "eu-de"}
    }
    assert "eu-de" not in str(parsed.spec)
    bad = errors_with_connection({**connection, "region": "EU DE"}, store_type="mount_cos")
    assert "S3 region name" in bad["data_stores[0].connection.region"][0]


def test_ffdl_regex_extractor_scalars_become_the_groups_values() -> None:
    manifest = copy.deepcopy(HOST_MANIFEST)
    manifest["evaluation_metrics"] = {
        "type": "regex_extractor",
        "image_tag": "latest",
        "in": "$JOB_STATE_DIR/logs/training-log.txt",
        "line_lookahead": 4,
        "eventTypes": ["ERROR"],
        "groups": {
            "train": {
                "regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.]+), acc = (?P<acc>[0-9.]+)",
                "meta": {"time": "$iteration"},
                "scalars": {"loss": {"type": "REAL", "value": "$loss"}, "accuracy": {"value": "$acc"}},
                "etimes": {"iteration": {"type": "INT", "value": "$iteration"}},
            }
        },
    }

    metrics = parse_spec(manifest).spec["evaluation_metrics"]

    assert metrics["groups"]["train"]["values"] == ["loss", "acc"]
    assert metrics["groups"]["train"]["meta"] == {"time": "iteration"}
    manifest["evaluation_metrics"]["groups"]["train"]["scalars"]["loss"]["value"] = "loss + 1"
    with pytest.raises(SpecError) as refused:
        parse_spec(manifest)
    assert list(refused.value.errors) == ["evaluation_metrics.groups.train.scalars.loss.value"]


@pytest.mark.django_db
def test_submitting_a_host_mount_manifest_follows_the_tenants_policy() -> None:
    tenant = make_tenant(slug="vision")
    user = member(tenant)
    document = yaml.safe_dump(HOST_MANIFEST)

    with pytest.raises(JobRejected) as caught:
        job_submit(tenant=tenant, user=user, document=document)

    assert list(caught.value.errors) == ["data_stores[0].connection.path"]
    assert (
        "host folders are not allowed for tenant vision"
        in caught.value.errors["data_stores[0].connection.path"][0]
    )
    assert not Job.objects.filter(tenant=tenant).exists()
    allow(tenant, host_path_prefixes=["/cosdata"], pod_security="privileged")
    job = job_submit(tenant=tenant, user=user, document=document)
    assert [v["path"] for v in job.spec["volumes"]] == ["/cosdata/train-data", "/cosdata/results"]

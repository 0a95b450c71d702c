"""FfDL manifests: every shared sample translates, credentials never leak, FfDL mistakes read clearly."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from jobs.core.ffdl import FRAMEWORK_IMAGES, looks_like_ffdl
from jobs.core.spec import SpecError, parse_spec
from tests.conftest import SHARED_DATA

MANIFESTS = SHARED_DATA / "ffdl-manifests"
PASSWORD = "s3cr3t-Pa55w0rd-do-not-leak"
USER = "AKIA-unique-user-name"

EXPECTED = {
    "c10d-native-parallelism-manifest.yml": {
        "learners": 2, "gpus": 1, "cpu_millis": 16000, "memory_mib": 16384,
        "image": "tomcli/pytorch:0925mpi", "command": "python -u train_dist_parallel.py --batch_size 1024",
    },
    "caffe-model-manifest.yml": {
        "learners": 1, "gpus": 0, "cpu_millis": 500, "memory_mib": 300,
        "image": "bvlc/caffe:cpu", "command": "caffe train -solver lenet_solver.prototxt",
    },
    "horovod-manifest_tfmnist.yml": {
        "learners": 2, "gpus": 0, "cpu_millis": 1000, "memory_mib": 1024,
        "image": "uber/horovod:0.13.10-tf1.9.0-torch0.4.0-py3.5", "command": "python tensorflow_mnist.py",
    },
    "pytorch-model-manifest.yml": {
        "learners": 1, "gpus": 0, "cpu_millis": 1000, "memory_mib": 1000,
        "image": "pytorch/pytorch:latest", "command": "python mnist.py --epochs 5",
    },
    "tf-model-manifest.yml": {
        "learners": 1, "gpus": 0, "cpu_millis": 500, "memory_mib": 1024,
        "image": "tensorflow/tensorflow:1.5.0-py3",
        "command": "python3 convolutional_network.py --trainImagesFile ${DATA_DIR}/train-images-idx3-ubyte.gz"
        " --trainLabelsFile ${DATA_DIR}/train-labels-idx1-ubyte.gz"
        " --testImagesFile ${DATA_DIR}/t10k-images-idx3-ubyte.gz"
        " --testLabelsFile ${DATA_DIR}/t10k-labels-idx1-ubyte.gz --learningRate 0.001 --trainingIters 2000",
    },
}  # fmt: skip

MANIFEST = {
    "name": "mnist",
    "version": "1.0",
    "gpus": 1,
    "cpus": 2,
    "memory": "2Gb",
    "learners": 2,
    "data_stores": [
        {
            "id": "store",
            "type": "mount_cos",
            "training_data": {"container": "in-bucket"},
            "training_results": {"container": "out-bucket"},
            "connection": {"auth_url": "http://s3.local", "user_name": USER, "password": PASSWORD},
        }
    ],
    "framework": {"name": "pytorch", "version": "2.3.0", "command": "python train.py\n"},
}


def manifest_with(**changes: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(MANIFEST))
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return document


def errors_of(document: Any) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(document)
    return caught.value.errors


def test_the_shared_folder_holds_the_five_expected_manifests() -> None:
    assert sorted(path.name for path in MANIFESTS.glob("*.yml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_ffdl_manifest_translates(name: str) -> None:
    parsed = parse_spec((MANIFESTS / name).read_bytes())
    spec, expected = parsed.spec, EXPECTED[name]

    assert parsed.source == "ffdl"
    assert spec["learners"] == expected["learners"]
    assert spec["resources"]["gpus"] == expected["gpus"]
    assert spec["resources"]["cpu_millis"] == expected["cpu_millis"]
    assert spec["resources"]["memory_mib"] == expected["memory_mib"]
    assert spec["image"] == expected["image"]
    assert spec["command"] == ["/bin/sh", "-c", expected["command"]]
    assert [(v["kind"], v["mount_path"], v["read_only"]) for v in spec["volumes"]] == [
        ("data", f"/mnt/data/{v['secret']}", True) if v["kind"] == "data" else
        ("results", f"/mnt/results/{v['secret']}", False) for v in spec["volumes"]
    ]  # fmt: skip
    assert "DATA_DIR" not in spec["env"] and "RESULT_DIR" not in spec["env"]
    assert parse_spec(spec).spec == spec


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_manifest_credentials_go_only_to_secrets(name: str) -> None:
    raw = yaml.safe_load((MANIFESTS / name).read_text())
    for store in raw["data_stores"]:
        store["connection"]["user_name"] = USER
        store["connection"]["password"] = PASSWORD

    parsed = parse_spec(yaml.safe_dump(raw))

    dumped = json.dumps(parsed.spec)
    assert PASSWORD not in dumped and USER not in dumped
    assert "password" not in dumped and "user_name" not in dumped
    store_id = raw["data_stores"][0]["id"]
    assert parsed.secrets == {store_id: {"access_key_id": USER, "secret_access_key": PASSWORD}}
    assert {v["secret"] for v in parsed.spec["volumes"]} == {store_id}


def test_data_store_becomes_read_only_data_and_writable_results_s3_volumes() -> None:
    volumes = parse_spec(MANIFEST).spec["volumes"]

    assert volumes == [
        {
            "name": "data-store",
            "kind": "data",
            "type": "s3",
            "mount_path": "/mnt/data/store",
            "read_only": True,
            "bucket": "in-bucket",
            "prefix": "",
            "endpoint": "http://s3.local",
            "secret": "store",
        },
        {
            "name": "results-store",
            "kind": "results",
            "type": "s3",
            "mount_path": "/mnt/results/store",
            "read_only": False,
            "bucket": "out-bucket",
            "prefix": "",
            "endpoint": "http://s3.local",
            "secret": "store",
        },
    ]


def test_credentials_never_appear_in_error_messages() -> None:
    bad = manifest_with(gpus=1.5, framework={"name": "nope", "command": "x"})
    bad["data_stores"][0]["connection"] = {
        "auth_url": PASSWORD,
        "user_name": USER,
        "password": ["x", PASSWORD],
    }
    bad["data_stores"][0]["training_data"] = {"container": PASSWORD}

    with pytest.raises(SpecError) as caught:
        parse_spec(bad)

    text = json.dumps(caught.value.errors) + str(caught.value)
    assert PASSWORD not in text and USER not in text
    assert "data_stores[0].connection.password" in caught.value.errors


def test_manifest_without_framework_is_a_clean_error_on_framework() -> None:
    errors = errors_of(manifest_with(framework=None))

    assert list(errors) == ["framework"]
    assert "required" in errors["framework"][0]


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"gpus": -1}, "gpus", "got -1"),
        ({"gpus": 1.5}, "gpus", "got 1.5"),
        ({"learners": 1.5}, "learners", "got 1.5"),
        ({"learners": "two"}, "learners", "got a string 'two'"),
        ({"memory": "16Xb"}, "memory", "unknown unit 'Xb'"),
        ({"cpus": "many"}, "cpus", "cannot read 'many'"),
        (
            {"framework": {"name": "theano", "version": "1", "command": "x"}},
            "framework.name",
            "unknown framework",
        ),
        (
            {"framework": {"name": "pytorch", "version": 1.1, "command": "x"}},
            "framework.version",
            "in quotes",
        ),
        ({"framework": {"name": "pytorch", "version": "1"}}, "framework.command", "required"),
        (
            {"framework": {"name": "custom", "version": "Bad Image", "command": "x"}},
            "framework.version",
            "image",
        ),
        (
            {"framework": {"name": "pytorch", "version": "1", "command": "x", "gpus": 1}},
            "framework.gpus",
            "unknown",
        ),
        ({"data_stores": {"id": "x"}}, "data_stores", "must be a list"),
        ({"extra_key": 1}, "extra_key", "unknown field in an FfDL manifest"),
    ],
)
def test_bad_manifest_field_is_reported_under_its_ffdl_name(
    changes: dict[str, Any], path: str, fragment: str
) -> None:
    errors = errors_of(manifest_with(**changes))

    assert path in errors, errors
    assert any(fragment in message for message in errors[path]), errors[path]


def test_data_store_problems_point_at_the_data_store() -> None:
    store = {
        "id": "s",
        "type": "nfs",
        "training_data": {"container": "bad bucket"},
        "connection": {"auth_url": "ftp://x", "user_name": USER, "region": "eu", "domain_name": "d", "x": 1},
    }

    errors = errors_of(manifest_with(data_stores=[store, {**store, "id": "s"}]))

    assert "unsupported data store type" in errors["data_stores[0].type"][0]
    assert "bucket name" in errors["data_stores[0].training_data.container"][0]
    assert "http" in errors["data_stores[0].connection.auth_url"][0]
    assert "goes with the credentials" in errors["data_stores[0].connection.region"][0]
    assert "Swift" in errors["data_stores[0].connection.domain_name"][0]
    assert "unknown field" in errors["data_stores[0].connection.x"][0]
    assert "both user_name and password" in errors["data_stores[0].connection"][0]
    assert "duplicate data store id" in errors["data_stores[1].id"][0]


def test_framework_images_follow_the_documented_table() -> None:
    for name, template in FRAMEWORK_IMAGES.items():
        version = "team/trainer:1" if name == "custom" else "1.2.3"
        framework = {"name": name.upper(), "version": version, "command": "run"}

        spec = parse_spec(manifest_with(framework=framework)).spec

        assert spec["image"] == template.format(version=version)
        assert spec["framework"] == {"name": name, "version": version}


def test_folded_command_continuation_lines_join_into_one_shell_line() -> None:
    framework = {
        "name": "pytorch",
        "version": "1",
        "command": "python a.py --x 1\n  --y 2 \\\n  --z 3\nnext\n",
    }

    command = parse_spec(manifest_with(framework=framework)).spec["command"]

    assert command == ["/bin/sh", "-c", "python a.py --x 1 --y 2 \\\n  --z 3\nnext"]


HEREDOC = """python -u - <<'EOF'
import sys
for step in range(3):
    if step:
        print(f"step {step}")
print("done", file=sys.stdout)
EOF
"""


def test_a_command_with_a_heredoc_is_kept_byte_for_byte() -> None:
    for command in (HEREDOC, HEREDOC.replace("<<'EOF'", "<<-EOF"), "cat << END\n  a\n    b\nEND\n"):
        framework = {"name": "pytorch", "version": "1", "command": command}
        shell = parse_spec(manifest_with(framework=framework)).spec["command"]
        assert shell == ["/bin/sh", "-c", command.rstrip("\n")], (
            "as written (the spec drops the last newline)"
        )


def test_a_here_string_or_a_shift_is_no_heredoc() -> None:
    for command in ("cat <<<word\n  --x", "python -c 'print(1<<2)'\n  --x"):
        framework = {"name": "pytorch", "version": "1", "command": command}
        shell = parse_spec(manifest_with(framework=framework)).spec["command"][2]
        assert "\n" not in shell, "folded as any command without a here-document"


def test_manifest_detection_tells_ffdl_from_trainyard() -> None:
    assert looks_like_ffdl({"name": "x", "framework": {}})
    assert looks_like_ffdl({"name": "x", "gpus": 1})
    assert not looks_like_ffdl({"name": "x", "image": "a", "command": "b", "gpus": 1})
    assert not looks_like_ffdl({"name": "x", "learners": 2})

"""Trainyard job specs: normalization, field errors, limits, and robustness against any input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.core.ffdl import FFDL_KEYS
from jobs.core.spec import (
    Demand,
    ParsedSpec,
    SpecError,
    parse_cpu_millis,
    parse_duration_seconds,
    parse_memory_mib,
    parse_spec,
    spec_demand,
)
from jobs.core.spec.fields import TOP_LEVEL_KEYS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"

MINIMAL = """
name: mnist
image: pytorch/pytorch:2.3.0
command: python train.py
"""


def spec_with(**fields: Any) -> dict[str, Any]:
    return {"name": "mnist", "image": "pytorch/pytorch:2.3.0", "command": ["python", "train.py"], **fields}


def errors_of(document: Any, **kwargs: Any) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(document, **kwargs)
    return caught.value.errors


def test_minimal_spec_gets_every_key_with_defaults() -> None:
    parsed = parse_spec(MINIMAL)

    assert parsed.source == "trainyard"
    assert parsed.secrets == {}
    assert parsed.spec == {
        "name": "mnist",
        "description": "",
        "image": "pytorch/pytorch:2.3.0",
        "command": ["/bin/sh", "-c", "python train.py"],
        "learners": 1,
        "resources": {"gpus": 0, "cpu_millis": 1000, "memory_mib": 1024, "gpu_type": None},
        "env": {},
        "volumes": [],
        "checkpoint_dir": "/checkpoints",
        "max_runtime_seconds": None,
        "retries": 2,
        "priority": 0,
        "tuning": None,
        "evaluation_metrics": None,
        "framework": None,
        "experiment": "",
        "tags": [],
        "hyperparameters": {},
    }


def test_json_text_bytes_and_mapping_give_the_same_spec() -> None:
    document = spec_with(learners=2, resources={"gpus": 1, "cpu": "500m", "memory": "4Gi"})

    from_json = parse_spec(json.dumps(document)).spec
    from_bytes = parse_spec(json.dumps(document).encode()).spec
    from_mapping = parse_spec(document).spec

    assert from_json == from_bytes == from_mapping
    assert from_json["resources"] == {"gpus": 1, "cpu_millis": 500, "memory_mib": 4096, "gpu_type": None}


def test_normalized_spec_parses_to_itself() -> None:
    parsed = parse_spec((EXAMPLES / "pytorch-two-learners.yaml").read_text())

    assert parse_spec(parsed.spec).spec == parsed.spec


@pytest.mark.parametrize(
    ("value", "millis"),
    [(2, 2000), (0.5, 500), ("500m", 500), ("2", 2000), ("0.25", 250), ("1500m", 1500)],
)
def test_cpu_accepts_cores_and_millicores(value: Any, millis: int) -> None:
    assert parse_cpu_millis(value) == millis


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("512Mi", 512),
        ("4Gi", 4096),
        ("1G", 954),
        ("1Gb", 1024),
        ("16GB", 16384),
        ("16Gb", 16384),
        ("300MiB", 300),
        ("1000MiB", 1000),
        ("2gb", 2048),
        ("1.5Gi", 1536),
        (512, 512),
        ("2048", 2048),
        ("1Ti", 1024 * 1024),
    ],
)
def test_memory_reads_kubernetes_and_ffdl_units(value: Any, mib: int) -> None:
    assert parse_memory_mib(value) == mib


@pytest.mark.parametrize(
    ("value", "seconds"), [(3600, 3600), ("90m", 5400), ("2h", 7200), ("1d", 86400), ("1h30m", 5400)]
)
def test_max_runtime_reads_seconds_and_durations(value: Any, seconds: int) -> None:
    assert parse_duration_seconds(value) == seconds
    assert parse_spec(spec_with(max_runtime=value)).spec["max_runtime_seconds"] == seconds


def test_env_list_form_equals_mapping_form() -> None:
    as_list = parse_spec(spec_with(env=[{"name": "A", "value": "1"}, {"name": "B", "value": 2}])).spec["env"]
    as_mapping = parse_spec(spec_with(env={"A": "1", "B": 2})).spec["env"]

    assert as_list == as_mapping == {"A": "1", "B": "2"}


def test_spec_demand_multiplies_per_learner_resources() -> None:
    spec = parse_spec(spec_with(learners=4, resources={"gpus": 2, "cpu": 3, "memory": "8Gi"})).spec

    demand = spec_demand(spec)

    assert demand == Demand(learners=4, gpus=2, cpu_millis=3000, memory_mib=8192)
    assert (demand.total_gpus, demand.total_cpu_millis, demand.total_memory_mib) == (8, 12000, 32768)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_specs_parse_cleanly(path: Path) -> None:
    parsed = parse_spec(path.read_text())

    assert parsed.source == "trainyard"


def test_example_specs_exist_with_one_and_two_learners() -> None:
    single = parse_spec((EXAMPLES / "pytorch-single.yaml").read_text()).spec
    double = parse_spec((EXAMPLES / "pytorch-two-learners.yaml").read_text()).spec

    assert single["learners"] == 1
    assert double["learners"] == 2
    assert "DistributedDataParallel" in " ".join(double["command"])


@pytest.mark.parametrize(
    ("fields", "path", "fragment"),
    [
        ({"resources": {"gpus": -1}}, "resources.gpus", "got -1"),
        ({"resources": {"gpus": 1.5}}, "resources.gpus", "whole number from 0 to 16, got 1.5"),
        ({"resources": {"gpus": 17}}, "resources.gpus", "from 0 to 16"),
        ({"learners": 1.5}, "learners", "whole number from 1 to 64, got 1.5"),
        ({"learners": "2"}, "learners", "got a string '2'"),
        ({"learners": 0}, "learners", "from 1 to 64"),
        ({"resources": {"memory": "4Xb"}}, "resources.memory", "unknown unit 'Xb'; use Mi, Gi"),
        ({"resources": {"memory": "512m"}}, "resources.memory", "means milli"),
        ({"resources": {"memory": "8Ti"}}, "resources.memory", "from 16Mi to 2Ti"),
        ({"resources": {"cpu": "0.1m"}}, "resources.cpu", "whole number of millicores"),
        ({"resources": {"cpu": "lots"}}, "resources.cpu", "cannot read 'lots'"),
        ({"resources": {"cpu": 1000}}, "resources.cpu", "to 256 cores"),
        ({"resources": {"gpu_type": "A100"}}, "resources.gpu_type", "gpus is 0"),
        ({"env": {"A": ["x"]}}, "env.A", "must be a string"),
        ({"env": {"1BAD": "x"}}, "env.1BAD", "bad variable name"),
        ({"env": {"A": "x" * 5000}}, "env.A", "at most 4096"),
        ({"env": {f"V{i}": "x" for i in range(101)}}, "env", "at most 100"),
        ({"tuning": {"learners": [2, 4]}}, "tuning.learners", "must contain the job's own value 1"),
        ({"tuning": {"cpu": [2, 1]}}, "tuning.cpu", "min must not be above max"),
        ({"tuning": {"threads": "many"}}, "tuning.threads", "'auto' or 'off'"),
        ({"name": "a\x07b"}, "name", "control characters"),
        ({"name": "x" * 101}, "name", "at most 100"),
        ({"image": "Not An Image!"}, "image", "is not an image reference"),
        ({"command": []}, "command", "must not be empty"),
        ({"command": ["python", 3]}, "command[1]", "must be a string"),
        ({"checkpoint_dir": "relative/dir"}, "checkpoint_dir", "absolute path"),
        ({"max_runtime": "soon"}, "max_runtime", "like '90m'"),
        ({"retries": 11}, "retries", "from 0 to 10"),
        ({"priority": -101}, "priority", "from -100 to 100"),
        ({"resources": {"cpu": 1, "cpu_millis": 1000}}, "resources.cpu_millis", "not both"),
    ],
)
def test_bad_field_is_reported_under_its_path(fields: dict[str, Any], path: str, fragment: str) -> None:
    errors = errors_of(spec_with(**fields))

    assert path in errors, errors
    assert any(fragment in message for message in errors[path]), errors[path]


def test_missing_required_fields_are_each_reported() -> None:
    errors = errors_of({"description": "nothing else"})

    assert set(errors) == {"name", "image", "command"}


def test_unknown_fields_are_rejected_at_top_level_and_nested() -> None:
    errors = errors_of(
        spec_with(
            colour="blue",
            resources={"gpus": 1, "tpus": 2},
            tuning={"threads": "auto", "speed": "max"},
            volumes=[
                {"name": "d", "kind": "data", "type": "pvc", "claim": "c", "mount_path": "/d", "size": 1}
            ],
        )
    )

    assert "unknown field" in errors["colour"][0]
    assert "unknown field" in errors["resources.tpus"][0]
    assert "unknown field" in errors["tuning.speed"][0]
    assert "unknown field" in errors["volumes[0].size"][0]


def test_unknown_field_suggests_the_nearby_name() -> None:
    errors = errors_of(spec_with(learner=2, gpus=1))

    assert errors["learner"] == ["unknown field; did you mean 'learners'?"]
    assert errors["gpus"] == ["unknown field; did you mean 'resources.gpus'?"]


def test_several_errors_are_reported_at_once() -> None:
    errors = errors_of(
        spec_with(learners=1.5, resources={"gpus": -1, "memory": "1Qb"}, env={"1BAD": "1"}, bogus=True)
    )

    assert {"learners", "resources.gpus", "resources.memory", "env.1BAD", "bogus"} <= set(errors)


def test_a_one_megabyte_command_is_rejected_as_too_long() -> None:
    command = "echo " + "x" * 1024 * 1024

    errors = errors_of(spec_with(command=command), max_bytes=4 * 1024 * 1024)

    assert errors["command"] == [f"is {len(command) + 1 + len('/bin/sh') + 1 + 3} bytes long; at most 16384"]


def test_a_document_over_max_bytes_is_rejected_whole() -> None:
    document = MINIMAL + "description: " + "x" * 70_000 + "\n"

    assert errors_of(document) == {"spec": ["document is larger than 65536 bytes"]}
    assert errors_of(document.encode()) == {"spec": ["document is larger than 65536 bytes"]}
    assert errors_of(spec_with(description="x" * 70_000)) == {"spec": ["document is larger than 65536 bytes"]}


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ("name: [unclosed\n", "is not valid YAML or JSON"),
        ("{", "is not valid YAML or JSON"),
        (b"\xff\xfe\x00garbage", "is not UTF-8 text"),
        ("- a\n- b\n", "must be a mapping of fields, got a list"),
        ("42", "must be a mapping of fields, got a number"),
        ("", "is empty"),
        ("a: &x [1]\nb: *x\n", "anchors and aliases"),
        ("name: a\nname: b\n", "duplicate field 'name'"),
        ('{"name": "a", "name": "b"}', "duplicate field 'name'"),
        ("[" * 5000, "nested deeper than"),
        ("name: " + "9" * 5000, "a number in it is too long"),
    ],
)
def test_unreadable_documents_are_whole_spec_errors(document: str | bytes, fragment: str) -> None:
    errors = errors_of(document)

    assert list(errors) == ["spec"]
    assert fragment in errors["spec"][0], errors


def test_yaml_bomb_is_rejected_quickly() -> None:
    lines = ['a0: ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: [*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1},*a{i - 1}]" for i in range(1, 10)]
    bomb = "\n".join(
        f"{line.split(':')[0]}: &{line.split(':')[0]} {line.split(': ', 1)[1]}" for line in lines
    )

    assert "anchors and aliases" in errors_of(bomb)["spec"][0]


def test_volumes_need_distinct_mount_paths_and_names() -> None:
    volumes = [
        {"name": "a", "kind": "data", "type": "pvc", "claim": "c", "mount_path": "/data"},
        {"name": "a", "kind": "results", "type": "host", "path": "/srv/out", "mount_path": "/data/"},
        {"name": "c", "kind": "results", "type": "s3", "bucket": "b", "mount_path": "/checkpoints"},
    ]

    errors = errors_of(spec_with(volumes=volumes))

    assert errors["volumes[1].mount_path"] == ["same mount path as volumes[0].mount_path: '/data'"]
    assert errors["volumes[1].name"] == ["same name as volumes[0]"]
    assert "checkpoint_dir" in errors["volumes[2].mount_path"][0]


def test_volume_types_normalize_to_their_own_fields() -> None:
    volumes = [
        {
            "name": "in",
            "kind": "data",
            "type": "s3",
            "bucket": "ds",
            "mount_path": "/in",
            "secret": "team-s3",
        },
        {"name": "out", "kind": "results", "type": "pvc", "claim": "out-claim", "mount_path": "/out/"},
        {"name": "ref", "kind": "data", "type": "host", "path": "/srv/ref", "mount_path": "/ref"},
    ]

    result = parse_spec(spec_with(volumes=volumes)).spec["volumes"]

    assert result == [
        {
            "name": "in",
            "kind": "data",
            "type": "s3",
            "mount_path": "/in",
            "read_only": True,
            "bucket": "ds",
            "prefix": "",
            "endpoint": None,
            "secret": "team-s3",
        },
        {
            "name": "out",
            "kind": "results",
            "type": "pvc",
            "mount_path": "/out",
            "read_only": False,
            "claim": "out-claim",
        },
        {
            "name": "ref",
            "kind": "data",
            "type": "host",
            "mount_path": "/ref",
            "read_only": True,
            "path": "/srv/ref",
        },
    ]


def test_results_volume_cannot_be_read_only() -> None:
    volume = {
        "name": "o",
        "kind": "results",
        "type": "pvc",
        "claim": "c",
        "mount_path": "/o",
        "read_only": True,
    }

    assert errors_of(spec_with(volumes=[volume])) == {
        "volumes[0].read_only": ["a results volume must be writable"]
    }


def test_tuning_ranges_are_normalized_to_millis_and_learners() -> None:
    tuning = parse_spec(spec_with(learners=2, tuning={"cpu": ["500m", 4], "learners": [1, 8]})).spec["tuning"]

    assert tuning == {"threads": "auto", "cpu_millis": [500, 4000], "learners": [1, 8]}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)
spec_keys = st.sampled_from(sorted({*TOP_LEVEL_KEYS, *FFDL_KEYS}))
spec_like = st.dictionaries(spec_keys, json_values, max_size=10)


def assert_valid_result(result: ParsedSpec) -> None:
    assert result.source in ("trainyard", "ffdl")
    json.dumps(result.spec, allow_nan=False)
    assert parse_spec(result.spec).spec == result.spec


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300) | st.binary(max_size=300))
def test_any_text_gives_spec_error_or_valid_spec(document: str | bytes) -> None:
    try:
        result = parse_spec(document)
    except SpecError as exc:
        assert exc.errors and all(isinstance(m, str) for ms in exc.errors.values() for m in ms)
    else:
        assert_valid_result(result)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(json_values | spec_like)
def test_any_json_value_gives_spec_error_or_valid_spec(value: Any) -> None:
    for document in (value, json.dumps(value)):
        try:
            result = parse_spec(document)
        except SpecError as exc:
            assert exc.errors
        else:
            assert_valid_result(result)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["gpus", "cpu", "memory", "gpu_type"]), json_values), json_values)
def test_any_resources_and_learners_give_spec_error_or_valid_spec(resources: Any, learners: Any) -> None:
    try:
        result = parse_spec(spec_with(resources=resources, learners=learners))
    except SpecError:
        return
    assert_valid_result(result)


# -- evaluation_metrics: FfDL's regex_extractor groups ------------------------------------------------


def test_regex_extractor_groups_are_normalized_with_default_values() -> None:
    metrics = {
        "type": "regex_extractor",
        "line_lookahead": 4,
        "groups": {
            "train": {
                "regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>\S+)",
                "meta": {"time": "iteration"},
            }
        },
    }
    parsed = parse_spec(spec_with(evaluation_metrics=metrics))
    assert parsed.spec["evaluation_metrics"] == {
        "type": "regex_extractor",
        "in": "",
        "line_lookahead": 4,
        "groups": {
            "train": {
                "regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>\S+)",
                "meta": {"time": "iteration"},
                "values": ["loss"],
            }
        },
    }


@pytest.mark.parametrize(
    ("metrics", "field", "fragment"),
    [
        ({"type": "regex_extractor"}, "evaluation_metrics.groups", "required for type regex_extractor"),
        (
            {"type": "regex_extractor", "groups": {"g": {"regex": "(unclosed"}}},
            "evaluation_metrics.groups.g.regex",
            "not a valid",
        ),
        (
            {"type": "regex_extractor", "groups": {"g": {"regex": r"loss (\d+)"}}},
            "evaluation_metrics.groups.g.regex",
            "named captures",
        ),
        (
            {
                "type": "regex_extractor",
                "groups": {"g": {"regex": r"(?P<loss>\d+)", "meta": {"time": "step"}}},
            },
            "evaluation_metrics.groups.g.meta.time",
            "does not capture",
        ),
        (
            {"type": "regex_extractor", "groups": {"g": {"regex": r"(?P<loss>\d+)", "values": ["acc"]}}},
            "evaluation_metrics.groups.g.values",
            "'acc'",
        ),
        (
            {"type": "regex_extractor", "groups": {"g": {"regex": "x" * 501}}},
            "evaluation_metrics.groups.g.regex",
            "at most 500",
        ),
        ({"type": "tensorboard", "colour": "red"}, "evaluation_metrics.colour", "unknown"),
        ("tensorboard", "evaluation_metrics", "must be a mapping"),
    ],
)
def test_bad_evaluation_metrics_get_field_errors(metrics: Any, field: str, fragment: str) -> None:
    errors = errors_of(spec_with(evaluation_metrics=metrics))
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors[field]

"""`experiment`, `tags` and `hyperparameters` in a spec: field-level errors, normalization, and the
hyperparameters reaching the learner's environment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clusterio.builders import learner_env
from jobs.cluster import pods_spec
from jobs.core.compare import (
    MetricChoice,
    best_mode,
    differing,
    format_duration,
    metric_family,
    parse_job_ids,
    parse_metric_choices,
)
from jobs.core.spec import SpecError, parse_spec
from jobs.core.spec.labels import hyperparameter_env
from jobs.models import Job
from tests.factories import make_tenant

BASE = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}


def errors_of(**fields: Any) -> dict[str, list[str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(BASE | fields)
    return caught.value.errors


def test_labels_are_optional_and_normalized() -> None:
    spec = parse_spec(BASE).spec
    assert (spec["experiment"], spec["tags"], spec["hyperparameters"]) == ("", [], {})
    spec = parse_spec(
        BASE
        | {
            "experiment": "  resnet sweep ",
            "tags": ["baseline", "lr-search", "baseline", "v1.2"],
            "hyperparameters": {"lr": 0.001, "batch_size": 64, "optimizer": "adam", "amp": True},
        }
    ).spec
    assert spec["experiment"] == "resnet sweep"
    assert spec["tags"] == ["baseline", "lr-search", "v1.2"]
    assert spec["hyperparameters"] == {"lr": 0.001, "batch_size": 64, "optimizer": "adam", "amp": True}
    assert parse_spec(spec).spec == spec, "a normalized spec reads back as itself"
    assert parse_spec(BASE | {"tags": "a, b,,a"}).spec["tags"] == ["a", "b"]


@pytest.mark.parametrize(
    ("fields", "path", "fragment"),
    [
        ({"experiment": "two\nlines"}, "experiment", "one line"),
        ({"experiment": "x" * 101}, "experiment", "at most 100"),
        ({"experiment": 5}, "experiment", "must be a string"),
        ({"tags": "bad tag!"}, "tags[0]", "is not a tag"),
        ({"tags": ["ok", 3]}, "tags[1]", "must be a string"),
        ({"tags": ["x" * 41]}, "tags[0]", "1 to 40 characters"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags", "at most 20"),
        ({"tags": {"a": 1}}, "tags", "list of short labels"),
        ({"hyperparameters": [1, 2]}, "hyperparameters", "mapping of name: value"),
        ({"hyperparameters": {"1lr": 1}}, "hyperparameters.1lr", "bad name"),
        ({"hyperparameters": {"lr": [1, 2]}}, "hyperparameters.lr", "number, a string or a boolean"),
        ({"hyperparameters": {"lr": float("inf")}}, "hyperparameters.lr", "finite"),
        ({"hyperparameters": {"note": "a\nb"}}, "hyperparameters.note", "one line"),
        ({"hyperparameters": {"lr": 1, "LR": 2}}, "hyperparameters.LR", "differ only in case"),
        ({"hyperparameters": {f"h{i}": i for i in range(65)}}, "hyperparameters", "at most 64"),
        ({"hyperparameters": {"lr": 1}, "env": {"HP_LR": "2"}}, "env.HP_LR", "hyperparameters.lr"),
    ],
)
def test_bad_labels_are_field_errors(fields: dict[str, Any], path: str, fragment: str) -> None:
    errors = errors_of(**fields)
    assert path in errors, errors
    assert any(fragment in message for message in errors[path]), errors[path]


@pytest.mark.django_db
def test_hyperparameters_reach_the_learners_environment() -> None:
    hyper = {"lr": 0.001, "batch_size": 64, "optimizer": "adam", "amp": True, "decay": 1e-05}
    spec = parse_spec(BASE | {"hyperparameters": hyper, "env": {"MY_VAR": "x"}}).spec
    job = Job(id="hpjob", tenant=make_tenant(), spec=spec, attempt=1)
    env = {item.name: item.value or "" for item in learner_env(pods_spec(job, credentials={}), 0)}
    assert env["HP_LR"] == "0.001" and env["HP_BATCH_SIZE"] == "64" and env["HP_OPTIMIZER"] == "adam"
    assert env["HP_AMP"] == "true" and env["HP_DECAY"] == "1e-05" and env["MY_VAR"] == "x"
    assert json.loads(env["TRAINYARD_HYPERPARAMETERS"]) == hyper
    plain = Job(id="plain", tenant=job.tenant, spec=parse_spec(BASE).spec, attempt=1)
    names = {item.name for item in learner_env(pods_spec(plain, credentials={}), 0)}
    assert "TRAINYARD_HYPERPARAMETERS" not in names and not any(n.startswith("HP_") for n in names)
    assert hyperparameter_env({"amp": False}) == {"HP_AMP": "false"}


def test_metric_choices_best_modes_and_families() -> None:
    assert parse_metric_choices("loss, accuracy,val_error,bleu:min,loss") == [
        MetricChoice("loss", "min"),
        MetricChoice("accuracy", "max"),
        MetricChoice("val_error", "min"),
        MetricChoice("bleu", "min"),
    ]
    assert best_mode("Perplexity") == "min" and best_mode("f1") == "max"
    for bad, fragment in (
        ("loss:best", "min or max"),
        (":min", "not a metric name"),
        (",".join("abcdefghi"), "at most 8"),
    ):
        with pytest.raises(ValueError, match=fragment):
            parse_metric_choices(bad)
    assert metric_family("val_loss") == ("loss", "val")
    assert metric_family("train/accuracy") == ("accuracy", "train")
    assert metric_family("loss_eval") == ("loss", "val")
    assert metric_family("loss") == ("loss", "")
    assert differing([1, 1, None]) and not differing(["a", "a"])
    assert format_duration(None) == "—" and format_duration(3725) == "1h 02m" and format_duration(42) == "42s"


def test_job_ids_are_bounded_and_checked() -> None:
    assert parse_job_ids("a1,b2, a1 ,c3") == ["a1", "b2", "c3"]
    with pytest.raises(ValueError, match="at most 10"):
        parse_job_ids(",".join(f"j{i}" for i in range(11)))
    with pytest.raises(ValueError, match="name the jobs"):
        parse_job_ids(" , ")
    with pytest.raises(ValueError, match="is not a job id"):
        parse_job_ids("ok,../etc")

"""Fuzzing the three ways a spec comes in (issue 14): the spec parser, the FfDL translator and the REST API,
with more than 10,000 generated inputs per run: near-valid specs and manifests with any field replaced by
any JSON value, and arbitrary bodies. Whatever comes in, the answer is a valid spec or field errors (a 4xx
from the API), never a crash or a 5xx."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.core.spec import ParsedSpec, SpecError, parse_spec
from tests.factories import make_tenant, member

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
# Values chosen to reach corners: paths, units, huge and negative numbers, odd characters.
TRICKY = st.sampled_from(
    [
        "", "/", "//proc", "/scratch", "/dev/shm", "../x", "/a/../b", "\x00", "é", "1e30", "-1", "0.1", "500m",
        "4Gi", "1Qb", 10**30, -(10**30), 2**63, float("nan"), float("inf"), [], {}, [[[]]], "python:3.11",
        "http://169.254.169.254", "s3.default.svc.cluster.local", "A100", "OMP_NUM_THREADS", "RANK",
        "x" * 5000,
    ]
)  # fmt: skip
# Copied per draw: `[]`, `{}` and `[[[]]]` are single objects, and a later mutation stepping into one would
# change it for every later example (or put a value inside itself, a cycle no JSON body can carry).
ANY = JSON | TRICKY.map(copy.deepcopy)

BASE_SPEC: dict[str, Any] = {
    "name": "fuzz",
    "image": "python:3.11",
    "command": ["python", "-c", "print(1)"],
    "learners": 1,
    "resources": {"cpu": "500m", "memory": "256Mi", "gpus": 0},
    "env": {"A": "1"},
    "volumes": [{"name": "data", "kind": "data", "type": "pvc", "claim": "datasets", "mount_path": "/data"}],
    "checkpoint_dir": "/checkpoints",
    "max_runtime": "1h",
    "retries": 1,
    "priority": 0,
    "tuning": {"threads": "auto"},
    "evaluation_metrics": {"type": "regex_extractor", "groups": {"t": {"regex": "loss=(?P<loss>\\S+)"}}},
}
BASE_FFDL: dict[str, Any] = {
    "name": "fuzz",
    "version": "1.0",
    "gpus": 0,
    "cpus": 1,
    "memory": "1Gb",
    "learners": 1,
    "data_stores": [
        {
            "id": "store",
            "type": "mount_cos",
            "training_data": {"container": "in"},
            "training_results": {"container": "out"},
            "connection": {"auth_url": "https://s3.example.com", "user_name": "u", "password": "p"},
        }
    ],
    "framework": {"name": "pytorch", "version": "2.3.0", "command": "python train.py"},
    "evaluation_metrics": {"type": "tensorboard"},
}


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `document` (dict keys and list indexes)."""
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


def _mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`base` with a few of its values (at any depth) replaced, dropped, or extra keys added."""
    paths = _paths(base)

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        document = copy.deepcopy(base)
        for _ in range(draw(st.integers(1, 4))):
            path = draw(st.sampled_from(paths))
            parent: Any = document
            try:
                for step in path[:-1]:
                    parent = parent[step]
                if draw(st.booleans()) or not isinstance(parent, dict):
                    parent[path[-1]] = draw(ANY)
                else:
                    parent.pop(path[-1], None)
            except (KeyError, IndexError, TypeError):
                continue
        if draw(st.integers(0, 9)) == 0:
            document[draw(st.text(max_size=12))] = draw(ANY)
        return document

    return build()


def _check(document: Any) -> None:
    try:
        result = parse_spec(document)
    except SpecError as exc:
        assert exc.errors and all(isinstance(m, str) and m for ms in exc.errors.values() for m in ms)
        return
    assert isinstance(result, ParsedSpec)
    json.dumps(result.spec, allow_nan=False)
    assert parse_spec(result.spec).spec == result.spec, "a normalized spec reads back as itself"


# Examples per fuzz test: 1,500 for the parsers (and 1,000 through the API) in every run; a deeper search
# for a change to the spec or the translator: FUZZ_EXAMPLES=20000 pytest tests/jobs/test_fuzz.py.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1500"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(_mutated(BASE_SPEC))
def test_the_spec_parser_answers_every_near_valid_spec_with_a_spec_or_field_errors(document: Any) -> None:
    _check(document)
    _check(json.dumps(document, allow_nan=True))


@FUZZ
@given(_mutated(BASE_FFDL))
def test_the_ffdl_translator_answers_every_near_valid_manifest_with_a_spec_or_field_errors(
    document: Any,
) -> None:
    _check(document)


@pytest.fixture
def fuzz_client(db: None) -> tuple[Client, str]:
    """A member's client and tenant, shared by every example of the API fuzzing."""
    tenant = make_tenant(max_queued_jobs=100000)
    client = Client(raise_request_exception=False)
    client.force_login(member(tenant))
    return client, tenant.slug


BODIES = (
    _mutated(BASE_SPEC).map(lambda d: ("application/json", json.dumps({"spec": d}, allow_nan=True)))
    | _mutated(BASE_FFDL).map(
        lambda d: ("application/json", json.dumps({"spec": json.dumps(d)}, allow_nan=True))
    )
    | JSON.map(lambda v: ("application/json", json.dumps(v, allow_nan=True)))
    | st.text(max_size=300).map(lambda t: ("application/yaml", t))
    | st.binary(max_size=200).map(lambda b: ("application/json", b))
)


@settings(
    max_examples=EXAMPLES * 2 // 3, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
@given(BODIES)
def test_the_api_answers_every_submission_with_a_4xx_or_a_job(
    fuzz_client: Any, body: tuple[str, Any]
) -> None:
    client, slug = fuzz_client
    content_type, data = body
    response = client.post(f"/api/v1/jobs/?tenant={slug}", data, content_type=content_type)
    assert response.status_code in (201, 400, 413, 415, 429), (response.status_code, response.content[:300])
    answer = response.json()
    if response.status_code != 201:
        assert answer["detail"] and isinstance(answer["errors"], dict)


@pytest.mark.parametrize("base", [BASE_SPEC, BASE_FFDL], ids=["trainyard", "ffdl"])
def test_a_nul_in_free_text_is_a_field_error_not_a_stored_spec(base: dict[str, Any]) -> None:
    """Found by the API fuzzing: `evaluation_metrics.type: "\\u0000"` passed the parser, and PostgreSQL then
    refused to store the spec (a 500). Every text of a normalized spec, values and keys, must be storable."""
    document = copy.deepcopy(base)
    document["evaluation_metrics"] = {"type": "\x00"}
    with pytest.raises(SpecError) as refused:
        parse_spec(document)
    assert refused.value.errors == {
        "evaluation_metrics.type": ["must not contain NUL characters or invalid Unicode"]
    }
    document["evaluation_metrics"] = {"type": "tensorboard", "in": "logs\x00"}
    with pytest.raises(SpecError) as refused:
        parse_spec(document)
    assert refused.value.errors == {
        "evaluation_metrics.in": ["must not contain NUL characters or invalid Unicode"]
    }

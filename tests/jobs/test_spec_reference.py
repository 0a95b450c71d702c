"""The spec's JSON Schema, docs/spec.md and the FfDL mapping, all generated from jobs/core/spec/schema/:
the examples validate, known-bad specs fail where the validator fails them, the committed docs are current,
and the FfDL table is shown (tests/jobs/test_ffdl_keys.py walks its keys)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from django.core.management import CommandError, call_command

from jobs.core import ffdl
from jobs.core.spec import SpecError, parse_spec
from jobs.core.spec.json_schema import json_schema
from jobs.core.spec.reference import FFDL_MAPPING, REGENERATE, markdown, rows
from jobs.core.spec.schema import MISSING, walk
from jobs.management.commands import spec as spec_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "specs").glob("*.y*ml"))
VALIDATOR = jsonschema.Draft202012Validator(json_schema())
BASE = {"name": "x", "image": "pytorch/pytorch:2.3.0", "command": ["python", "train.py"]}


def schema_errors(document: Any) -> list[str]:
    return [error.json_path for error in VALIDATOR.iter_errors(document)]


def test_the_generated_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_spec_and_its_normalized_form_validate_against_the_schema(path: Path) -> None:
    document = yaml.safe_load(path.read_text())
    parsed = parse_spec(path.read_bytes())
    if not ffdl.looks_like_ffdl(document):
        assert schema_errors(document) == []
    assert schema_errors(parsed.spec) == []


BAD = [
    ({"image": "pytorch/pytorch:2.3.0", "command": ["python"]}, "name"),
    ({**BASE, "resources": {"gpus": "lots"}}, "resources.gpus"),
    ({**BASE, "resources": {"gpus": 17}}, "resources.gpus"),
    ({**BASE, "learners": 0}, "learners"),
    ({**BASE, "gpus": 1}, "gpus"),
    ({**BASE, "resources": {"cpu": 1, "cpu_millis": 1000}}, "resources.cpu_millis"),
    ({**BASE, "resources": {"memory": "4Gb!"}}, "resources.memory"),
    ({**BASE, "image": "Not An Image"}, "image"),
    ({**BASE, "command": []}, "command"),
    ({**BASE, "env": {"1BAD": "x"}}, "env.'1BAD'"),
    ({**BASE, "max_runtime": "2 weeks"}, "max_runtime"),
    ({**BASE, "tuning": {"threads": "sometimes"}}, "tuning.threads"),
    ({**BASE, "volumes": [{"name": "d", "kind": "data", "type": "nfs", "mount_path": "/d"}]}, "volumes[0].type"),
    ({**BASE, "volumes": [{"name": "d", "kind": "data", "type": "pvc", "mount_path": "/d"}]}, "volumes[0].claim"),
    (
        {**BASE, "volumes": [{"name": "d", "kind": "data", "type": "pvc", "claim": "c", "bucket": "b",
                              "mount_path": "/d"}]},
        "volumes[0].bucket",
    ),
    ({**BASE, "volumes": [{"name": "D!", "kind": "data", "type": "pvc", "claim": "c", "mount_path": "/d"}]},
     "volumes[0].name"),
    ({**BASE, "evaluation_metrics": {"type": "regex_extractor"}}, "evaluation_metrics.groups"),
    ({**BASE, "framework": {"name": "pytorch"}}, "framework.version"),
]  # fmt: skip


@pytest.mark.parametrize(("document", "path"), BAD, ids=[p for _, p in BAD])
def test_known_bad_specs_fail_the_schema_where_the_validator_fails_them(document: Any, path: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec(document)
    assert path.replace("'", "") in {p.replace("'", "") for p in refused.value.errors}
    assert schema_errors(document), f"the JSON Schema accepts {document}"


def test_the_committed_docs_are_the_generated_ones() -> None:
    committed = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    assert committed == markdown(), f"docs/spec.md is out of date: run `{REGENERATE}`"


def test_the_docs_name_every_field_with_its_type_default_and_example() -> None:
    text = markdown()
    for row in rows():
        assert f"`{row.display}`" in text
        assert row.type_text in text
        if row.field.example is not MISSING:
            assert row.example_text in text
    assert "volumes[].secret" in text


def test_the_docs_show_every_ffdl_row_and_framework_image() -> None:
    text = markdown()
    for row in FFDL_MAPPING:
        assert f"| `{row.ffdl}` |" in text and row.note in text
    for name, image in ffdl.FRAMEWORK_IMAGES.items():
        assert f"| `{name}` | `{image}` |" in text
    for name, reason in ffdl.REFUSED_FRAMEWORKS.items():
        assert f"- `{name}`: {reason}." in text


def _manage(*args: str) -> str:
    out = io.StringIO()
    call_command("spec", *args, stdout=out)
    return out.getvalue()


def test_manage_spec_schema_prints_the_schema_and_spec_docs_the_docs(
    tmp_path: Path, monkeypatch: Any
) -> None:
    assert json.loads(_manage("schema")) == json.loads(json.dumps(json_schema()))
    assert _manage("docs") == markdown()
    assert "is up to date" in _manage("docs", "--check")
    stale = tmp_path / "spec.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(spec_command, "DOCS_PATH", stale)
    with pytest.raises(CommandError, match="spec docs --write"):
        _manage("docs", "--check")
    _manage("docs", "--write")
    assert stale.read_text() == markdown()


def test_the_schema_covers_every_declared_field() -> None:
    schema = json_schema()
    for path, _, variant in walk():
        node: Any = schema
        for part in path.replace("[]", ".[]").split("."):
            if part == "[]":
                node = node["items"]
            elif part == "*":
                node = node["additionalProperties"]
            elif part in node.get("properties", {}):
                node = node["properties"][part]
            else:
                thens = [rule["then"] for rule in node["allOf"] if "then" in rule]
                node = next(t["properties"][part] for t in thens if part in t.get("properties", {}))
        assert node["description"], path
        assert (
            variant
            or "properties" not in node
            or node.get("additionalProperties") is False
            or node.get("unevaluatedProperties") is False
        )

"""The declared spec (jobs/core/spec/schema/) and the validator agree: every declared field is accepted
with its example, nothing undeclared is accepted, declared defaults are what the validator fills in,
declared bounds, lengths, patterns, enums and nullability are the validator's."""

from __future__ import annotations

import copy
import re
from typing import Any, cast

import pytest

from jobs.core.spec import SpecError, metrics, parse_spec, schema, values
from jobs.core.spec.schema import MISSING, SPEC, Field, field_at, walk

BASE = {"name": "schema-check", "image": "pytorch/pytorch:2.3.0", "command": ["python", "train.py"]}
FIELDS = [(path, field, variant) for path, field, variant in walk()]
LEAVES = [(p, f, v) for p, f, v in FIELDS if not p.endswith(("[]", ".*"))]


def _parent_value(field: Field, variant: str) -> Any:
    """A valid value of a container field, to put a child in: its example (a variant's own for a volume)."""
    if variant:
        return copy.deepcopy(field.variant_examples[variant])
    return copy.deepcopy(field.example)


def document_with(path: str, value: Any, *, variant: str = "", drop: bool = False) -> dict[str, Any]:
    """The base spec with `value` at `path` (or the field left out, with `drop`), inside its containers'
    examples; `[]` is the first item of a list, `*` the first entry of a mapping."""
    document = copy.deepcopy(BASE)
    parts = schema._split(path)
    container: Any = document
    node = SPEC
    for i, part in enumerate(parts[:-1]):
        following = parts[i + 1]
        if part == "[]":
            node = node.items  # type: ignore[assignment]
            container = container[0]
            continue
        if part == "*":
            node = node.values  # type: ignore[assignment]
            container = container[next(iter(container))]
            continue
        node = node.child(part)
        if part not in container or container[part] is None or isinstance(container[part], str):
            container[part] = _parent_value(node, "")
        if following == "[]" and node.items is not None:
            item_variant = variant if i + 2 == len(parts) - 1 or variant else ""
            container[part] = [
                _parent_value(node.items, item_variant)
                if node.items.variant_examples and item_variant
                else copy.deepcopy(node.items.example)
            ]
        container = container[part]
    leaf = parts[-1]
    leaf_field = field_at(path)
    if leaf_field.exclusive and isinstance(container, dict):
        container.pop(leaf_field.exclusive, None)
    if drop:
        container.pop(leaf, None)
    else:
        container[leaf] = copy.deepcopy(value)
    return document


def errors_of(document: Any) -> dict[str, list[str]]:
    try:
        parse_spec(document)
    except SpecError as exc:
        return exc.errors
    return {}


def _paths_under(errors: dict[str, list[str]], concrete: str) -> list[str]:
    return [p for p in errors if p == concrete or p.startswith((concrete + ".", concrete + "["))]


def _container(document: Any, path: str) -> Any:
    for part in schema._split(path):
        document = (
            document[0] if part == "[]" else document[next(iter(document))] if part == "*" else document[part]
        )
    return document


def _concrete(path: str, document: dict[str, Any]) -> str:
    """The path as the validator names it: `volumes[0].bucket`, `evaluation_metrics.groups.train.regex`."""
    out, container = "", cast(Any, document)
    for part in schema._split(path):
        if part == "[]":
            out += "[0]"
            container = container[0]
        elif part == "*":
            key = next(iter(container))
            out += f".{key}"
            container = container[key]
        else:
            out = f"{out}.{part}" if out else part
            container = container.get(part) if isinstance(container, dict) else None
    return out


@pytest.mark.parametrize(("path", "field", "variant"), LEAVES, ids=[p for p, _, _ in LEAVES])
def test_every_declared_field_is_accepted_with_its_example(path: str, field: Field, variant: str) -> None:
    assert field.example is not MISSING, f"{path} has no example"
    document = document_with(path, field.example, variant=variant)
    assert errors_of(document) == {}, document


@pytest.mark.parametrize(("path", "field", "variant"), FIELDS, ids=[p for p, _, _ in FIELDS])
def test_every_container_example_is_a_valid_value(path: str, field: Field, variant: str) -> None:
    if path.endswith(("[]", ".*")):
        return  # the items' and entries' examples are checked through their fields
    for example in [field.example, *field.variant_examples.values()]:
        assert errors_of(document_with(path, example, variant=variant)) == {}


def test_the_whole_specs_example_is_valid() -> None:
    assert errors_of(SPEC.example) == {}
    assert [f.name for f in SPEC.fields if f.required] == list(SPEC.example)


@pytest.mark.parametrize(
    "path",
    ["", "resources", "env[]", "volumes[]", "tuning", "evaluation_metrics", "evaluation_metrics.groups.*",
     "evaluation_metrics.groups.*.meta", "framework"],
)  # fmt: skip
def test_an_undeclared_key_is_refused_wherever_keys_are_declared(path: str) -> None:
    document: dict[str, Any] = copy.deepcopy(BASE)
    if path:
        child = f"{path}.{schema.keys(path)[0]}"
        document = document_with(child, field_at(child).example)
        _container(document, path)["surely_not_a_field"] = 1
    else:
        document["surely_not_a_field"] = 1
    concrete = _concrete(path, document) if path else ""
    bad = f"{concrete}.surely_not_a_field" if concrete else "surely_not_a_field"
    errors = errors_of(document)
    if path == "evaluation_metrics.groups.*.meta":
        assert _concrete(path, document) in errors  # meta names the step only
    else:
        assert "unknown field" in " ".join(errors.get(bad, [])), errors


def test_the_validators_key_lists_are_the_schemas() -> None:
    from jobs.core.spec import fields, volumes

    assert tuple(f.name for f in SPEC.fields) == fields.TOP_LEVEL_KEYS
    assert schema.keys("resources") == fields._RESOURCE_KEYS
    assert schema.keys("volumes[]") == volumes._VOLUME_KEYS
    assert schema.variant_keys("volumes[]") == volumes._VOLUME_TYPE_KEYS
    assert set(volumes._VOLUME_TYPE_KEYS) == set(field_at("volumes[].type").enum)
    assert schema.keys("evaluation_metrics") == metrics._KEYS
    assert schema.keys("evaluation_metrics.groups.*") == metrics._GROUP_KEYS


def _normalized_keys(value: Any, path: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            out.add(where)
            out |= _normalized_keys(item, where)
    elif isinstance(value, list):
        for item in value:
            out |= _normalized_keys(item, f"{path}[]")
    return out


def _schema_path(path: str) -> str:
    return re.sub(
        r"^(evaluation_metrics\.groups)\.[^.]+", r"\1.*", re.sub(r"^env\.[A-Za-z_0-9]+$", "env", path)
    )


@pytest.mark.parametrize("example", ["demo-train.yaml", "pytorch-single.yaml", "pytorch-two-learners.yaml",
                                     "ffdl-manifest.yml"])  # fmt: skip
def test_every_field_the_validator_stores_is_declared(example: str) -> None:
    from pathlib import Path

    spec = parse_spec((Path("examples/specs") / example).read_bytes()).spec
    full = document_with("evaluation_metrics", field_at("evaluation_metrics").example)
    stored = _normalized_keys(spec) | _normalized_keys(parse_spec(full).spec)
    declared = {path for path, _, _ in walk()}
    assert {_schema_path(p) for p in stored} - declared == set()


WITH_DEFAULT = [(p, f, v) for p, f, v in LEAVES if f.default is not MISSING]


@pytest.mark.parametrize(("path", "field", "variant"), WITH_DEFAULT, ids=[p for p, _, _ in WITH_DEFAULT])
def test_each_declared_default_is_what_the_validator_fills_in(path: str, field: Field, variant: str) -> None:
    given = parse_spec(document_with(path, field.default, variant=variant)).spec
    left_out = parse_spec(document_with(path, None, variant=variant, drop=True)).spec
    assert given == left_out


def test_defaults_told_in_words_hold() -> None:
    data = document_with("volumes[].read_only", None, variant="s3", drop=True)
    assert parse_spec(data).spec["volumes"][0]["read_only"] is True
    data["volumes"][0]["kind"] = "results"
    assert parse_spec(data).spec["volumes"][0]["read_only"] is False
    group = document_with("evaluation_metrics.groups.*.values", None, drop=True)
    group["evaluation_metrics"]["groups"]["train"]["meta"] = {"time": "iteration"}
    assert parse_spec(group).spec["evaluation_metrics"]["groups"]["train"]["values"] == ["loss"]


BOUNDED = [(p, f, v) for p, f, v in LEAVES if f.types == ("integer",) and f.minimum is not None]


@pytest.mark.parametrize(("path", "field", "variant"), BOUNDED, ids=[p for p, _, _ in BOUNDED])
def test_declared_integer_bounds_are_the_validators(path: str, field: Field, variant: str) -> None:
    assert field.minimum is not None and field.maximum is not None
    low, high = int(field.minimum), int(field.maximum)
    for good in (low, high):
        assert errors_of(document_with(path, good, variant=variant)) == {}, good
    for bad in (low - 1, high + 1):
        document = document_with(path, bad, variant=variant)
        assert _paths_under(errors_of(document), _concrete(path, document)), bad


def test_declared_bounds_are_the_validators_constants() -> None:
    assert field_at("learners").maximum == values.MAX_LEARNERS
    assert field_at("resources.gpus").maximum == values.MAX_GPUS_PER_LEARNER
    assert (field_at("resources.cpu_millis").minimum, field_at("resources.cpu_millis").maximum) == (
        values.CPU_MILLIS_RANGE
    )
    assert (field_at("resources.memory_mib").minimum, field_at("resources.memory_mib").maximum) == (
        values.MEMORY_MIB_RANGE
    )
    assert field_at("max_runtime_seconds").maximum == values.MAX_RUNTIME_SECONDS
    assert field_at("env").max_entries == values.MAX_ENV_ENTRIES
    assert field_at("env[].value").max_length == values.MAX_ENV_VALUE
    assert field_at("volumes").max_items == values.MAX_VOLUMES
    assert field_at("evaluation_metrics.groups").max_entries == metrics.MAX_GROUPS
    assert field_at("evaluation_metrics.groups.*.regex").max_length == metrics.MAX_PATTERN


def test_friendly_quantity_bounds_are_the_validators() -> None:
    cpu, memory = field_at("resources.cpu"), field_at("resources.memory")
    for path, field in (("resources.cpu", cpu), ("resources.memory", memory)):
        assert errors_of(document_with(path, field.minimum)) == {}
        assert errors_of(document_with(path, field.maximum)) == {}
    assert "resources.cpu" in errors_of(document_with("resources.cpu", 0.009))
    assert "resources.cpu" in errors_of(document_with("resources.cpu", 256.001))
    assert "resources.memory" in errors_of(document_with("resources.memory", 15))
    assert "resources.memory" in errors_of(document_with("resources.memory", memory.maximum + 1))


# Fields with a length limit, and a value of that length the validator takes (the example padded).
_OWN_LENGTH_TEST = {"image", "evaluation_metrics.type", "evaluation_metrics.groups.*.regex"}
LENGTHS = [(p, f, v) for p, f, v in LEAVES if f.max_length is not None and p not in _OWN_LENGTH_TEST]


def _padded(field: Field, length: int) -> str:
    text = str(field.example)
    return text + "a" * (length - len(text))


@pytest.mark.parametrize(("path", "field", "variant"), LENGTHS, ids=[p for p, _, _ in LENGTHS])
def test_declared_lengths_are_the_validators(path: str, field: Field, variant: str) -> None:
    assert field.max_length is not None
    assert errors_of(document_with(path, _padded(field, field.max_length), variant=variant)) == {}
    document = document_with(path, _padded(field, field.max_length + 1), variant=variant)
    assert _paths_under(errors_of(document), _concrete(path, document))


def test_lengths_of_the_image_the_metrics_type_and_a_regex_are_the_validators() -> None:
    assert errors_of(document_with("image", "a" * 255)) == {}
    assert "image" in errors_of(document_with("image", "a" * 256))
    assert errors_of(document_with("evaluation_metrics.type", "t" * 64)) == {}
    assert "evaluation_metrics.type" in errors_of(document_with("evaluation_metrics.type", "t" * 65))
    longest = "(?P<loss>[0-9])" + "x" * (metrics.MAX_PATTERN - 15)
    assert len(longest) == field_at("evaluation_metrics.groups.*.regex").max_length
    document = document_with("evaluation_metrics.groups", {"train": {"regex": longest}})
    assert errors_of(document) == {}
    document["evaluation_metrics"]["groups"]["train"] = {"regex": longest + "x"}
    assert "evaluation_metrics.groups.train.regex" in errors_of(document)


PATTERNED = [(p, f, v) for p, f, v in LEAVES if f.pattern is not None]


@pytest.mark.parametrize(("path", "field", "variant"), PATTERNED, ids=[p for p, _, _ in PATTERNED])
def test_declared_patterns_accept_the_example_and_the_validator_refuses_what_they_refuse(
    path: str, field: Field, variant: str
) -> None:
    assert field.pattern is not None
    if isinstance(field.example, str):
        assert re.fullmatch(field.pattern, field.example)
    bad = "Not Valid!*"
    assert not re.fullmatch(field.pattern, bad)
    document = document_with(path, bad, variant=variant)
    assert _paths_under(errors_of(document), _concrete(path, document))


@pytest.mark.parametrize(
    ("pattern", "parse", "texts"),
    [
        (schema.CPU_TEXT, values.parse_cpu_millis, ["2", "0.5", "500m", " 1 ", ".5", "250 m", "2k", "1Gi", "m", ""]),
        (schema.MEMORY_TEXT, values.parse_memory_mib,
         ["512", "4Gi", "1G", "16GB", "300MiB", "1gb", "2Ti", "64k", "1m", "4X", "Gi", "3 Mi", "1.5Gi", "1KiB"]),
        (schema.DURATION_TEXT, values.parse_duration_seconds,
         ["90", "90m", "2h", "1d", "1h30m", " 5s ", "1w", "h", ""]),
    ],
)  # fmt: skip
def test_quantity_text_patterns_read_what_the_parsers_read(
    pattern: str, parse: Any, texts: list[str]
) -> None:
    for text in texts:
        try:
            parse(text)
            parsed = True
        except ValueError:
            parsed = False
        assert bool(re.fullmatch(pattern, text)) == parsed, text


ENUMS = [(p, f, v) for p, f, v in LEAVES if f.enum and p != "volumes[].type"]


@pytest.mark.parametrize(("path", "field", "variant"), ENUMS, ids=[p for p, _, _ in ENUMS])
def test_declared_enums_are_what_the_validator_accepts(path: str, field: Field, variant: str) -> None:
    for value in field.enum:
        assert errors_of(document_with(path, value, variant=variant)) == {}, value
    document = document_with(path, "bogus", variant=variant)
    assert _paths_under(errors_of(document), _concrete(path, document))


def test_each_volume_type_takes_its_own_fields_only() -> None:
    for variant, example in field_at("volumes[]").variant_examples.items():
        assert errors_of({**BASE, "volumes": [example]}) == {}
        others = [f for v, fs in field_at("volumes[]").variants if v != variant for f in fs]
        for other in others:
            volume = {**example, other.name: other.example}
            assert f"volumes[0].{other.name}" in errors_of({**BASE, "volumes": [volume]}), (
                variant,
                other.name,
            )


@pytest.mark.parametrize(("path", "field", "variant"), LEAVES, ids=[p for p, _, _ in LEAVES])
def test_declared_nullability_and_requiredness_are_the_validators(
    path: str, field: Field, variant: str
) -> None:
    if path in {"volumes[].type"} or field.required_when:
        return  # null there is an unknown type, covered by the enum; conditional ones: below
    document = document_with(path, None, variant=variant)
    concrete = _concrete(path, document)
    errors = errors_of(document)
    # A list entry without its required name is refused as a whole (env[0]: "a mapping with name and value").
    refused = bool(_paths_under(errors, concrete)) or (
        field.required and concrete.rsplit(".", 1)[0] in errors
    )
    assert refused == (not field.nullable), document
    if field.required:
        dropped = document_with(path, None, variant=variant, drop=True)
        errors = errors_of(dropped)
        assert _paths_under(errors, concrete) or concrete.rsplit(".", 1)[0] in errors


def test_conditionally_required_fields_are_required_under_their_condition_only() -> None:
    for path, field, _ in LEAVES:
        if field.required_when is None:
            continue
        sibling, value = field.required_when
        parent = path.rsplit(".", 1)[0]
        document = document_with(path, None, drop=True)
        _container(document, parent)[sibling] = value
        assert _paths_under(errors_of(document), _concrete(path, document))
        _container(document, parent)[sibling] = "something-else"
        assert errors_of(document) == {}

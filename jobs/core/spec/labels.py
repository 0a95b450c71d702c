"""`experiment`, `tags` and `hyperparameters`: how people group, find and compare runs.

    experiment: resnet-sweep          # one short line; jobs of one experiment are compared together
    tags: [baseline, lr-search]       # short labels, deduplicated in order
    hyperparameters: {lr: 0.001, batch_size: 64, optimizer: adam, amp: true}

Hyperparameters reach the command as environment variables: `HP_<NAME>` per entry (the name in upper
case; a number as Python writes it, a boolean as `true`/`false`) and all of them as one JSON object in
`TRAINYARD_HYPERPARAMETERS`. The experiment and tags are copied onto the job at submit and may be changed
afterwards (the job's page, `PATCH /api/v1/jobs/<id>/`); the hyperparameters stay as submitted.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from jobs.core.spec.values import Errors, clean_text, join, show, type_name

MAX_EXPERIMENT = 100
MAX_TAGS = 20
MAX_TAG = 40
MAX_HYPERPARAMETERS = 64
MAX_HYPERPARAMETER_NAME = 64
MAX_HYPERPARAMETER_TEXT = 256
HYPERPARAMETER_ENV_PREFIX = "HP_"
HYPERPARAMETERS_ENV = "TRAINYARD_HYPERPARAMETERS"
_TAG = re.compile(r"[\w][\w.:/+=@-]*")
_HP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

HyperValue = int | float | str | bool


def validate_experiment(value: Any, errors: Errors, path: str = "experiment") -> str:
    """The experiment's name: one line of at most MAX_EXPERIMENT characters, "" when absent."""
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.add(path, f"must be a string, got {type_name(value)}")
        return ""
    text = value.strip()
    if len(text) > MAX_EXPERIMENT:
        errors.add(path, f"is {len(text)} characters long; at most {MAX_EXPERIMENT}")
    elif not clean_text(text) or not text.isprintable():
        errors.add(path, "must be one line without control characters")
    return text


def validate_tags(value: Any, errors: Errors, path: str = "tags") -> list[str]:
    """The tags, deduplicated in the order given (a comma-separated string is read as a list too)."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, list | tuple):
        errors.add(path, f"must be a list of short labels, got {type_name(value)}")
        return []
    tags: list[str] = []
    for index, tag in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(tag, str):
            errors.add(where, f"must be a string, got {type_name(tag)}")
            continue
        tag = tag.strip()
        if not tag or len(tag) > MAX_TAG:
            errors.add(where, f"must be 1 to {MAX_TAG} characters long, got {len(tag)}")
        elif not clean_text(tag) or not _TAG.fullmatch(tag):
            errors.add(
                where,
                f"{show(tag)} is not a tag: use letters, digits and . : / + = @ - _ (no spaces), "
                "starting with a letter or digit",
            )
        elif tag not in tags:
            tags.append(tag)
    if len(tags) > MAX_TAGS:
        errors.add(path, f"has {len(tags)} different tags; at most {MAX_TAGS}")
    return tags


def validate_hyperparameters(
    value: Any, errors: Errors, path: str = "hyperparameters"
) -> dict[str, HyperValue]:
    """A flat mapping of name to number, string or boolean; names are env-friendly identifiers and no two
    may differ in case only (both would be one `HP_` variable)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.add(
            path, f"must be a mapping of name: value (numbers, strings, booleans), got {type_name(value)}"
        )
        return {}
    if len(value) > MAX_HYPERPARAMETERS:
        errors.add(path, f"has {len(value)} entries; at most {MAX_HYPERPARAMETERS}")
        return {}
    result: dict[str, HyperValue] = {}
    upper: dict[str, str] = {}
    for name, item in value.items():
        where = join(path, name)
        if not isinstance(name, str) or not _HP_NAME.fullmatch(name) or len(name) > MAX_HYPERPARAMETER_NAME:
            errors.add(
                where,
                f"bad name {show(name)}; use letters, digits and '_', not starting with a digit, "
                f"at most {MAX_HYPERPARAMETER_NAME} characters",
            )
            continue
        if name.upper() in upper:
            errors.add(
                where, f"{name} and {upper[name.upper()]} differ only in case (both are HP_{name.upper()})"
            )
            continue
        checked = _hyper_value(item, where, errors)
        if checked is not None:
            upper[name.upper()] = name
            result[name] = checked
    return result


def _hyper_value(value: Any, path: str, errors: Errors) -> HyperValue | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) >= 2**63:
            errors.add(path, "is too large a number; at most 19 digits")
            return None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            errors.add(path, f"must be a finite number, got {value}")
            return None
        return value
    if isinstance(value, str):
        if len(value) > MAX_HYPERPARAMETER_TEXT:
            errors.add(path, f"is {len(value)} characters long; at most {MAX_HYPERPARAMETER_TEXT}")
            return None
        if not clean_text(value) or not value.isprintable():
            errors.add(path, "must be one line without control characters")
            return None
        return value
    errors.add(path, f"must be a number, a string or a boolean, got {type_name(value)}")
    return None


def hyperparameter_text(value: HyperValue) -> str:
    """How a hyperparameter is written into its `HP_` variable: `true`/`false`, a number as Python writes
    it (`0.001`, `1e-05`, `64`), a string as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)


def hyperparameter_env(hyperparameters: Mapping[str, HyperValue]) -> dict[str, str]:
    """The `HP_<NAME>` variables of a job's hyperparameters (none when it has none)."""
    return {
        f"{HYPERPARAMETER_ENV_PREFIX}{name.upper()}": hyperparameter_text(value)
        for name, value in hyperparameters.items()
    }


def hyperparameters_json(hyperparameters: Mapping[str, HyperValue]) -> str:
    """`TRAINYARD_HYPERPARAMETERS`: every hyperparameter as one JSON object, keys sorted."""
    return json.dumps(dict(hyperparameters), sort_keys=True, separators=(",", ":"))


def env_collisions(env: Mapping[str, str], hyperparameters: Mapping[str, HyperValue], errors: Errors) -> None:
    """An `env` entry named like a hyperparameter's `HP_` variable is refused: the two would disagree."""
    derived = {f"{HYPERPARAMETER_ENV_PREFIX}{name.upper()}": name for name in hyperparameters}
    for key in env:
        if key in derived:
            errors.add(
                join("env", key), f"{key} is set from hyperparameters.{derived[key]}; set one or the other"
            )

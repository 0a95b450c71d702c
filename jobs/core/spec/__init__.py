"""Parse and validate job specs, Trainyard's own format and FfDL manifests alike, into one normalized dict.

Pure (no Django): the API, pages, CLI and the `spec` management command all call `parse_spec`, so a
spec means the same everywhere. Every problem is collected and raised at once as a `SpecError`
keyed by field path, with a message that says what was wrong and what is accepted. Units are
described in `jobs.core.spec.values`; the FfDL mapping in `jobs.core.ffdl`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from common.resources import Resources
from jobs.core import ffdl
from jobs.core.spec.fields import validate
from jobs.core.spec.values import (
    Errors,
    parse_cpu_millis,
    parse_duration_seconds,
    parse_memory_mib,
    show,
    type_name,
)

__all__ = [
    "Demand",
    "ParsedSpec",
    "SpecError",
    "parse_cpu_millis",
    "parse_duration_seconds",
    "parse_memory_mib",
    "parse_spec",
    "spec_demand",
]

MAX_DEPTH = 32


class SpecError(Exception):
    """A spec that cannot be accepted; `errors` maps each field path to what is wrong with it.

    Whole-document problems (unreadable text, too large, not a mapping) are under "spec".
    """

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        self.errors: dict[str, list[str]] = {path: list(messages) for path, messages in errors.items()}
        super().__init__(
            "; ".join(f"{path}: {m}" for path, messages in self.errors.items() for m in messages)
        )


@dataclass(frozen=True)
class ParsedSpec:
    """A valid spec: the normalized form, the data-store credentials kept apart, and its format."""

    spec: dict[str, Any]
    secrets: dict[str, dict[str, str]]
    source: str
    paths: Mapping[str, str] = field(default_factory=dict)

    def field_name(self, path: str) -> str:
        """The field the user wrote for a path of the normalized spec (an FfDL manifest's own names)."""
        return _remap(path, self.paths)


@dataclass(frozen=True)
class Demand:
    """What one learner of a job asks for, and how many learners: the scheduler's unit of admission.

    The per-learner amount is kept as three plain fields (``per_learner`` gives it as a ``Resources``): they
    are what a job's submit event records as its demand.
    """

    learners: int
    gpus: int
    cpu_millis: int
    memory_mib: int

    @property
    def per_learner(self) -> Resources:
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)

    @property
    def total(self) -> Resources:
        """What the whole gang holds once admitted: what a tenant's quota is checked against."""
        return self.per_learner * self.learners

    @property
    def total_gpus(self) -> int:
        return self.total.gpus

    @property
    def total_cpu_millis(self) -> int:
        return self.total.cpu_millis

    @property
    def total_memory_mib(self) -> int:
        return self.total.memory_mib


def spec_demand(spec: Mapping[str, Any]) -> Demand:
    """The resources a normalized spec (`ParsedSpec.spec`) asks for, per learner and in total."""
    resources = spec["resources"]
    return Demand(
        learners=int(spec["learners"]),
        gpus=int(resources["gpus"]),
        cpu_millis=int(resources["cpu_millis"]),
        memory_mib=int(resources["memory_mib"]),
    )


def parse_spec(document: str | bytes | Mapping[str, Any], *, max_bytes: int = 65536) -> ParsedSpec:
    """Read a job spec (YAML or JSON text, or a loaded mapping) in Trainyard or FfDL format and validate it.

    Returns the normalized spec, with FfDL credentials moved to `secrets`; raises `SpecError` with
    every problem found, and nothing else, whatever the input.
    """
    data = _load(document, max_bytes)
    if data is None:
        raise SpecError({"spec": ["is empty; expected a mapping of fields such as name, image, command"]})
    if not isinstance(data, Mapping):
        raise SpecError({"spec": [f"must be a mapping of fields, got {type_name(data)}"]})
    if not ffdl.looks_like_ffdl(data):
        errors = Errors()
        spec = validate(data, errors)
        if errors.by_path:
            raise SpecError(errors.by_path)
        return ParsedSpec(spec=spec, secrets={}, source="trainyard")

    translation = ffdl.translate(data)
    errors = Errors()
    spec = validate(translation.document, errors)
    merged = {path: list(messages) for path, messages in translation.errors.items()}
    for path, messages in errors.by_path.items():
        if not any(_under(path, covered) for covered in translation.covered):
            known = merged.setdefault(_remap(path, translation.paths), [])
            known.extend(m for m in messages if m not in known)
    if merged:
        raise SpecError(_redact(merged, translation.secrets))
    return ParsedSpec(spec=spec, secrets=translation.secrets, source="ffdl", paths=translation.paths)


class _Loader(yaml.SafeLoader):
    """SafeLoader minus anchors/aliases, with a depth limit and duplicate-key errors."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (*name) are not accepted", mark
            )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate field {show(key)}", key_node.start_mark
                )
            if isinstance(key, str):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate field {show(key)}")
        result[key] = value
    return result


def _load(document: Any, max_bytes: int) -> Any:
    """The document as Python data, or a SpecError on "spec" when it cannot be read at all."""
    too_large = f"document is larger than {max_bytes} bytes"
    if isinstance(document, Mapping):
        try:
            size = len(json.dumps(document, default=str))
        except (ValueError, TypeError, RecursionError):
            raise SpecError(
                {"spec": ["must be plain JSON-like data (no cycles, not nested too deeply)"]}
            ) from None
        if size > max_bytes:
            raise SpecError({"spec": [too_large]})
        return document
    if isinstance(document, bytes | bytearray | memoryview):
        if len(document) > max_bytes:
            raise SpecError({"spec": [too_large]})
        try:
            text = bytes(document).decode("utf-8-sig")
        except UnicodeDecodeError:
            raise SpecError({"spec": ["is not UTF-8 text"]}) from None
    elif isinstance(document, str):
        try:
            size = len(document.encode("utf-8"))
        except UnicodeEncodeError:
            raise SpecError({"spec": ["contains characters that are not valid Unicode"]}) from None
        if size > max_bytes:
            raise SpecError({"spec": [too_large]})
        text = document.removeprefix("\ufeff")
    else:
        raise SpecError({"spec": [f"must be YAML or JSON text or a mapping, got {type_name(document)}"]})
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError):
        pass
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(
            {"spec": [f"is not valid YAML or JSON: {exc.problem or exc.context}{where}"]}
        ) from None
    except (yaml.YAMLError, ValueError, RecursionError, OverflowError) as exc:
        reason = "a number in it is too long" if isinstance(exc, ValueError) else "it cannot be read"
        raise SpecError({"spec": [f"is not valid YAML or JSON: {reason}"]}) from None


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


def _remap(path: str, paths: Mapping[str, str]) -> str:
    """Rename a Trainyard field path to the FfDL field it was translated from."""
    best = max((prefix for prefix in paths if _under(path, prefix)), key=len, default="")
    return paths[best] + path[len(best) :] if best else path


def _redact(errors: dict[str, list[str]], secrets: Mapping[str, Mapping[str, str]]) -> dict[str, list[str]]:
    """Mask credential values in messages, in case a message quotes a value that equals one."""
    values = sorted(
        (v for creds in secrets.values() for v in creds.values() if len(v) >= 3), key=len, reverse=True
    )
    return {
        path: [_mask(message, values) for message in messages]
        for path, messages in errors.items()
    }  # fmt: skip


def _mask(message: str, values: list[str]) -> str:
    for value in values:
        message = message.replace(value, "***")
    return message

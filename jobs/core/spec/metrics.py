"""`evaluation_metrics`: how a job reports metrics beyond the built-in line formats.

The built-in formats (a JSON object, or `key=value` pairs, see jobs/core/metricparse.py) need no
configuration. For logs in any other shape, FfDL's `regex_extractor` style names groups of regular
expressions whose named captures become metrics:

    evaluation_metrics:
      type: regex_extractor
      groups:
        train:
          regex: 'Iteration (?P<iteration>\\d+), loss = (?P<loss>[0-9.]+)'
          meta: {time: iteration}      # the capture that is the step (optional)
          values: [loss]               # the captures that are metrics (default: all but the step)

`type: tensorboard` with `in: <folder>` has the learners send the TensorBoard event files under that
folder, whose scalars become metrics (docs/jobs.md). Other keys FfDL knew (`line_lookahead`, `eventTypes`)
are accepted and not used. Patterns run on RE2 (jobs/core/userregex.py): linear time, no backreferences or
lookaround, bounded in size; one that RE2 cannot run is refused here, at submit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jobs.core.spec import schema
from jobs.core.spec.values import Errors, check_keys, show, type_name
from jobs.core.userregex import UserPatternError, compile_user_pattern

MAX_GROUPS = schema.MAX_METRIC_GROUPS
MAX_PATTERN = schema.MAX_METRIC_PATTERN
_KEYS = schema.keys("evaluation_metrics")
_GROUP_KEYS = schema.keys("evaluation_metrics.groups.*")
_GROUP_NAME = re.compile(schema.GROUP_NAME)


def validate_evaluation_metrics(value: Any, errors: Errors) -> dict[str, Any] | None:
    """The normalized `evaluation_metrics` mapping, or None when absent; problems go to `errors`."""
    path = "evaluation_metrics"
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.add(
            path, f"must be a mapping with 'type' (and 'groups' for regex_extractor); got {type_name(value)}"
        )
        return None
    check_keys(value, path, _KEYS, errors)
    kind = value.get("type")
    if not isinstance(kind, str) or not kind.strip() or len(kind) > 64:
        errors.add(
            f"{path}.type", f"must be a short name like 'regex_extractor' or 'tensorboard', got {show(kind)}"
        )
        kind = ""
    result: dict[str, Any] = {"type": kind.strip(), "in": _short(value.get("in"), f"{path}.in", errors)}
    lookahead = value.get("line_lookahead")
    if lookahead is not None:
        if isinstance(lookahead, bool) or not isinstance(lookahead, int) or not 0 <= lookahead <= 100:
            errors.add(
                f"{path}.line_lookahead", f"must be a whole number from 0 to 100, got {show(lookahead)}"
            )
        result["line_lookahead"] = lookahead
    groups = value.get("groups")
    if result["type"] == "regex_extractor" and not groups:
        errors.add(f"{path}.groups", "required for type regex_extractor: at least one named regex")
    if groups is not None:
        result["groups"] = _groups(groups, f"{path}.groups", errors)
    return result


def _short(value: Any, path: str, errors: Errors) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 1024:
        errors.add(path, f"must be a string of at most 1024 characters, got {show(value)}")
        return ""
    return value


def _groups(value: Any, path: str, errors: Errors) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping) or not value:
        errors.add(
            path, f"must be a mapping of group name to {{regex, meta, values}}; got {type_name(value)}"
        )
        return {}
    if len(value) > MAX_GROUPS:
        errors.add(path, f"has {len(value)} groups; at most {MAX_GROUPS}")
        return {}
    result = {}
    for name, group in value.items():
        where = f"{path}.{name}"
        if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
            errors.add(path, f"group name {show(name)} must be a short identifier")
            continue
        if not isinstance(group, Mapping):
            errors.add(where, f"must be a mapping with 'regex'; got {type_name(group)}")
            continue
        check_keys(group, where, _GROUP_KEYS, errors)
        checked = _group(group, where, errors)
        if checked is not None:
            result[name] = checked
    return result


def _group(group: Mapping[str, Any], where: str, errors: Errors) -> dict[str, Any] | None:
    pattern = group.get("regex")
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
        errors.add(f"{where}.regex", f"must be a regular expression of at most {MAX_PATTERN} characters")
        return None
    try:
        captures = set(compile_user_pattern(pattern).groupindex)
    except UserPatternError as exc:
        errors.add(f"{where}.regex", str(exc))
        return None
    if not captures:
        errors.add(f"{where}.regex", "needs named captures, like (?P<loss>[0-9.]+)")
        return None
    meta = group.get("meta") or {}
    step = meta.get("time") if isinstance(meta, Mapping) else None
    if not isinstance(meta, Mapping) or set(meta) - {"time"}:
        errors.add(f"{where}.meta", "may only name the step capture, as {time: <capture>}")
    elif step is not None and not isinstance(step, str):
        errors.add(f"{where}.meta.time", "must be the name of a capture")
        return None
    elif step is not None and step not in captures:
        errors.add(f"{where}.meta.time", f"names {show(step)}, which the regex does not capture")
    values = group.get("values")
    if values is None:
        values = sorted(captures - {step})
    elif not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        errors.add(f"{where}.values", "must be a list of capture names")
        return None
    unknown = [v for v in values if v not in captures]
    if unknown:
        errors.add(
            f"{where}.values", f"names {', '.join(map(show, unknown))}, which the regex does not capture"
        )
    return {"regex": pattern, "meta": {"time": step} if step else {}, "values": list(values)}

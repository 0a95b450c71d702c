"""Find the line of a spec's text that an error's field path points at, for the submit editor.

Paths are the validator's (`resources.gpus`, `volumes[1].bucket`, `env.'1 BAD'`, an FfDL manifest's
`data_stores[0].connection.auth_url`). A field that is missing points at its parent's line; "spec"
(the whole document) points at the line a YAML error names, if any.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_TEXT = 256 * 1024
_YAML_LINE = re.compile(r"at line (\d+), column \d+")
_INDEX = re.compile(r"\[(\d+)\]")


def error_lines(text: str, paths: list[str], messages: dict[str, list[str]] | None = None) -> dict[str, int]:
    """The 1-based line of each path that can be found in `text` (YAML or JSON); paths not found are left out.
    Text longer than MAX_TEXT characters is not read (the parser refused it already)."""
    root = None
    if len(text) <= MAX_TEXT and any(path != "spec" for path in paths):
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except (yaml.YAMLError, RecursionError, ValueError):
            root = None
    lines: dict[str, int] = {}
    for path in paths:
        line = None
        if path == "spec":
            line = _yaml_error_line((messages or {}).get(path, []))
        elif root is not None:
            line = _line(root, path)
        if line is not None:
            lines[path] = line
    return lines


def _yaml_error_line(messages: list[str]) -> int | None:
    for message in messages:
        match = _YAML_LINE.search(message)
        if match:
            return int(match.group(1))
    return None


def _line(root: Any, path: str) -> int | None:
    node, line, rest = root, None, path
    while rest:
        if isinstance(node, yaml.SequenceNode):
            match = _INDEX.match(rest)
            if not match or int(match.group(1)) >= len(node.value):
                break
            node = node.value[int(match.group(1))]
            line, rest = node.start_mark.line + 1, rest[match.end() :]
        elif isinstance(node, yaml.MappingNode):
            found = _key(node, rest.removeprefix("."))
            if found is None:
                break
            key_node, value_node, consumed = found
            node, line = value_node, key_node.start_mark.line + 1
            rest = rest.removeprefix(".")[consumed:]
        else:
            break
    return line if line is not None else (node.start_mark.line + 1 if node is not root else None)


def _key(node: yaml.MappingNode, rest: str) -> tuple[Any, Any, int] | None:
    """The entry of `node` whose key starts `rest` (the longest one: keys may hold dots)."""
    best: tuple[Any, Any, int] | None = None
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        for label in (key_node.value, repr(key_node.value)):
            fits = rest.startswith(label) and rest[len(label) : len(label) + 1] in ("", ".", "[")
            if fits and (best is None or len(label) > best[2]):
                best = (key_node, value_node, len(label))
    return best

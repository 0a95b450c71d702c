"""PATCH bodies: merge patch (RFC 7386), simplified strategic merge patch, JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """A patch that cannot be applied (the server answers 400 or 422)."""


MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "tolerations": "key",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "finalizers": "",
}


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch: maps merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch: like a merge patch, but well-known lists merge by their key.

    Supported directives: ``$patch: delete``/``replace`` on maps and list items, and
    ``$setElementOrder``/``$retainKeys``/``$deleteFromPrimitiveList`` (accepted; order is not enforced).
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _merge_list(result[key], value, MERGE_KEYS[key])
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str) -> list[Any]:
    if not key:
        return current + [v for v in patch if v not in current]
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    result = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            result.append(copy.deepcopy(item))
            continue
        index = next(
            (i for i, c in enumerate(result) if isinstance(c, dict) and c.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[index] = strategic_merge_patch(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        node = _child(node, part)
    return node, parts[-1]


def _child(node: Any, part: str) -> Any:
    try:
        if isinstance(node, list):
            return node[int(part)]
        return node[part]
    except (KeyError, IndexError, ValueError, TypeError):
        raise PatchError(f"path element {part!r} not found") from None


def json_patch(target: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations (add, remove, replace, move, copy, test) to a copy of ``target``."""
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "test":
            if _get(doc, parts) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed")
        elif kind == "remove":
            _remove(doc, parts)
        elif kind in ("add", "replace"):
            if kind == "replace":
                _get(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), replace=kind == "replace")
        elif kind in ("move", "copy"):
            source = _pointer(op["from"])
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, parts, value, replace=False)
        else:
            raise PatchError(f"unknown JSON patch operation {kind!r}")
    return doc


def _get(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts:
        node = _child(node, part)
    return node


def _remove(doc: Any, parts: list[str]) -> None:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent, last = _parent(doc, parts)
    _child(parent, last)
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]


def _add(doc: Any, parts: list[str], value: Any, replace: bool) -> Any:
    if not parts:
        return value
    parent, last = _parent(doc, parts)
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif replace:
            parent[int(last)] = value
        else:
            index = int(last)
            if index > len(parent):
                raise PatchError("index out of range")
            parent.insert(index, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise PatchError(f"cannot add to {parts!r}")
    return doc

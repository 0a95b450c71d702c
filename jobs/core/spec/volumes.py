"""Volumes of a job spec: where data is read from and results are written to.

`host` volumes mount a node path, `pvc` a PersistentVolumeClaim, `s3` a bucket (with `secret`
naming the data store whose credentials the platform holds). Whether a tenant may use a `host` path
or an S3 endpoint is its policy's decision (jobs/core/policy.py), checked at submit.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from jobs.core.spec import schema
from jobs.core.spec.values import MAX_VOLUMES, Errors, check_keys, clean_text, show, type_name

_VOLUME_KEYS = schema.keys("volumes[]")
_VOLUME_TYPE_KEYS = schema.variant_keys("volumes[]")
_FORBIDDEN_MOUNTS = ("/proc", "/sys", "/dev")
_DNS_LABEL = re.compile(schema.DNS_LABEL)
_DNS_SUBDOMAIN = re.compile(schema.DNS_SUBDOMAIN)
_SECRET_ID = re.compile(schema.SECRET_ID)
_BUCKET = re.compile(schema.BUCKET)
_URL = re.compile(schema.URL)


def abs_path(value: Any, path: str, errors: Errors, *, default: str | None = None) -> str | None:
    """A normalized absolute path that may be mounted over (not /, /proc, /sys, /dev), or None on error."""
    if value is None and default is not None:
        return default
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 1024 or not clean_text(value):
        errors.add(path, f"must be an absolute path like '/data', got {show(value)}")
        return None
    if ".." in value.split("/"):
        errors.add(path, "must not contain '..'")
        return None
    # POSIX keeps a leading "//" through normpath ("//proc" stays "//proc"), yet it names "/proc".
    normal = "/" + posixpath.normpath(value).lstrip("/")
    if normal == "/" or any(normal == p or normal.startswith(p + "/") for p in _FORBIDDEN_MOUNTS):
        errors.add(path, f"{show(normal)} is a system path and cannot be used")
        return None
    return "/" + normal.lstrip("/")


def validate_volumes(value: Any, errors: Errors, checkpoint_dir: str | None) -> list[dict[str, Any]]:
    """Normalize the `volumes` list: names and mount paths distinct, type-specific fields checked."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        errors.add("volumes", f"must be a list of volumes, got {type_name(value)}")
        return []
    if len(value) > MAX_VOLUMES:
        errors.add("volumes", f"has {len(value)} volumes; at most {MAX_VOLUMES}")
        return []
    result: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    mounts: dict[str, str] = {}
    for i, volume in enumerate(value):
        path = f"volumes[{i}]"
        if not isinstance(volume, Mapping):
            errors.add(path, f"must be a mapping, got {type_name(volume)}")
            continue
        kind, vtype, name = volume.get("kind"), volume.get("type"), volume.get("name")
        extra = _VOLUME_TYPE_KEYS.get(vtype, ()) if isinstance(vtype, str) else ()
        if not extra:
            errors.add(f"{path}.type", f"must be one of host, pvc, s3; got {show(vtype)}")
            extra = tuple(key for keys in _VOLUME_TYPE_KEYS.values() for key in keys)
        check_keys(volume, path, _VOLUME_KEYS + extra, errors)
        if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
            errors.add(f"{path}.name", "required: lowercase letters, digits and '-', at most 63 characters")
        elif name in names:
            errors.add(f"{path}.name", f"same name as {names[name]}")
        else:
            names[name] = path
        if kind not in ("data", "results"):
            errors.add(f"{path}.kind", f"must be 'data' or 'results', got {show(kind)}")
        mount = abs_path(volume.get("mount_path"), f"{path}.mount_path", errors)
        if mount is not None and mount in mounts:
            errors.add(f"{path}.mount_path", f"same mount path as {mounts[mount]}: {show(mount)}")
        elif mount is not None and mount == checkpoint_dir:
            errors.add(
                f"{path}.mount_path", f"is the checkpoint_dir {show(mount)}; mount the volume elsewhere"
            )
        elif mount is not None:
            mounts[mount] = f"{path}.mount_path"
        read_only = volume.get("read_only", kind == "data")
        if not isinstance(read_only, bool):
            errors.add(f"{path}.read_only", f"must be true or false, got {type_name(read_only)}")
        elif kind == "results" and read_only:
            errors.add(f"{path}.read_only", "a results volume must be writable")
        entry = {"name": name, "kind": kind, "type": vtype, "mount_path": mount, "read_only": read_only}
        entry.update(_volume_source(volume, vtype, path, errors))
        result.append(entry)
    return result


def _volume_source(volume: Mapping[Any, Any], vtype: Any, path: str, errors: Errors) -> dict[str, Any]:
    if vtype == "host":
        return {"path": abs_path(volume.get("path"), f"{path}.path", errors)}
    if vtype == "pvc":
        claim = volume.get("claim")
        if not isinstance(claim, str) or not _DNS_SUBDOMAIN.fullmatch(claim):
            errors.add(
                f"{path}.claim",
                "required: a PersistentVolumeClaim name (lowercase letters, digits, '-', '.')",
            )
        return {"claim": claim}
    if vtype != "s3":
        return {}
    bucket, prefix = volume.get("bucket"), volume.get("prefix") or ""
    endpoint, secret = volume.get("endpoint"), volume.get("secret")
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket):
        errors.add(f"{path}.bucket", "required: a bucket name (letters, digits, '.', '_', '-')")
    if not isinstance(prefix, str) or len(prefix) > 1024 or not clean_text(prefix):
        errors.add(f"{path}.prefix", "must be a key prefix string of at most 1024 characters")
    if endpoint is not None and (
        not isinstance(endpoint, str) or len(endpoint) > 2048 or not _URL.fullmatch(endpoint)
    ):
        errors.add(f"{path}.endpoint", "must be an http:// or https:// URL without credentials in it")
    if secret is not None and (not isinstance(secret, str) or not _SECRET_ID.fullmatch(secret)):
        errors.add(f"{path}.secret", "must be a data-store id (letters, digits, '.', '_', '-') or null")
    return {"bucket": bucket, "prefix": prefix, "endpoint": endpoint, "secret": secret}

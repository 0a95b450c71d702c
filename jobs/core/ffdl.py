"""Translate FfDL `manifest.yml` documents into Trainyard job-spec input.

The translator only restructures: it maps FfDL's keys onto the Trainyard spec's input keys and
leaves value checks (units, ranges, image syntax) to `jobs.core.spec`, which validates the result like
any other spec and reports errors under the FfDL names through `Translation.paths`.

Decisions, so that a user moving from FfDL knows what happens to each key:

- `gpus`, `cpus`, `memory`, `gpu_type` are per learner, as in FfDL; `learners` defaults to 1.
  Memory units keep FfDL's meaning (`Mb`/`Gb`/`MB`/`GB` are MiB/GiB), see `jobs.core.spec.parse_memory_mib`.
- `framework.name` + `framework.version` pick the image from `FRAMEWORK_IMAGES`; for `custom` the
  version is the image itself.
- `framework.command` (a shell string) runs as `/bin/sh -c <command>`. A line break followed by
  indentation is a continuation of the same command line (YAML `>` keeps the breaks before
  more-indented lines, which the shell would otherwise run as separate commands).
- Each data store becomes S3 volumes: `training_data` → kind "data", read-only, at
  `/mnt/data/<id>`; `training_results` → kind "results", writable, at `/mnt/results/<id>`; the
  volume's `secret` is the data-store id and the credentials go to `Translation.secrets` only.
- The model `version` is dropped: Trainyard has no model versions.
- `DATA_DIR`/`RESULT_DIR` are not set here; the platform sets them when it launches the job.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FRAMEWORK_IMAGES: dict[str, str] = {
    "tensorflow": "tensorflow/tensorflow:{version}",
    "pytorch": "pytorch/pytorch:{version}",
    "caffe": "bvlc/caffe:{version}",
    "horovod": "uber/horovod:{version}",
    "custom": "{version}",
}
S3_STORE_TYPES = frozenset({"mount_cos", "s3_datastore"})
DATA_MOUNT_ROOT = "/mnt/data"
RESULTS_MOUNT_ROOT = "/mnt/results"

FFDL_KEYS = (
    "name",
    "description",
    "version",
    "gpus",
    "cpus",
    "memory",
    "gpu_type",
    "learners",
    "data_stores",
    "framework",
    "evaluation_metrics",
)
_MARKER_KEYS = frozenset({"framework", "gpus", "cpus", "memory", "gpu_type", "data_stores", "version"})
_TRAINYARD_MARKER_KEYS = frozenset({"image", "command", "resources"})
_STORE_KEYS = ("id", "type", "training_data", "training_results", "connection")
_CONNECTION_KEYS = ("auth_url", "user_name", "password", "type")
_CONTINUATION = re.compile(r"(?<!\\)\n[ \t]+")
_STORE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_TOP_LEVEL_PATHS = {
    "name": "name",
    "description": "description",
    "learners": "learners",
    "resources.gpus": "gpus",
    "resources.cpu": "cpus",
    "resources.memory": "memory",
    "resources.gpu_type": "gpu_type",
    "resources": "spec",
    "image": "framework.version",
    "command": "framework.command",
    "framework": "framework",
    "evaluation_metrics": "evaluation_metrics",
    "volumes": "data_stores",
}


@dataclass(frozen=True)
class Translation:
    """A translated manifest: Trainyard spec input, the credentials taken out, and FfDL-level errors.

    `paths` maps a Trainyard field path (or path prefix) to the FfDL field it came from, so that
    errors found later on the translated document can be shown under the name the user wrote;
    `covered` names Trainyard fields left out because `errors` already explains why.
    """

    document: dict[str, Any]
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    covered: frozenset[str] = frozenset()


def looks_like_ffdl(document: Mapping[str, Any]) -> bool:
    """Tell an FfDL manifest from a Trainyard spec by its top-level keys.

    A document with `framework`, or with FfDL-only keys (`gpus`, `cpus`, `memory`, `data_stores`,
    ...) and none of the Trainyard keys `image`/`command`/`resources`, is an FfDL manifest; a mixed
    document is treated as a Trainyard spec so that its stray keys are reported as unknown fields.
    """
    keys = {key for key in document if isinstance(key, str)}
    if keys & _TRAINYARD_MARKER_KEYS:
        return False
    return bool(keys & _MARKER_KEYS)


def translate(manifest: Mapping[str, Any]) -> Translation:
    """Turn an FfDL manifest into Trainyard spec input (see the module docstring for the mapping).

    Never raises: structural problems of the manifest come back in `Translation.errors`, keyed by
    FfDL field path; values are passed through unchecked for `jobs.core.spec` to validate.
    """
    errors: dict[str, list[str]] = {}
    secrets: dict[str, dict[str, str]] = {}
    paths = dict(_TOP_LEVEL_PATHS)

    def error(path: str, message: str) -> None:
        errors.setdefault(path, []).append(message)

    for key in manifest:
        if not isinstance(key, str):
            error("spec", f"field names must be strings, got {type(key).__name__}")
        elif key not in FFDL_KEYS:
            error(key, f"unknown field in an FfDL manifest; accepted: {', '.join(FFDL_KEYS)}")

    document: dict[str, Any] = {}
    for ffdl_key, spec_key in (("name", "name"), ("description", "description"), ("learners", "learners")):
        if ffdl_key in manifest:
            document[spec_key] = manifest[ffdl_key]
    resources = {
        spec_key: manifest[ffdl_key]
        for ffdl_key, spec_key in (
            ("gpus", "gpus"),
            ("cpus", "cpu"),
            ("memory", "memory"),
            ("gpu_type", "gpu_type"),
        )
        if ffdl_key in manifest
    }
    if resources:
        document["resources"] = resources
    version = manifest.get("version")
    if version is not None and not isinstance(version, str | int | float):
        error("version", f"must be a string, got {type(version).__name__}")

    _translate_framework(manifest, document, error)
    if "evaluation_metrics" in manifest:
        document["evaluation_metrics"] = manifest["evaluation_metrics"]
    volumes = _translate_data_stores(manifest.get("data_stores"), secrets, paths, error)
    if volumes:
        document["volumes"] = volumes
    covered = frozenset(key for key in ("image", "command") if key not in document)
    return Translation(document=document, secrets=secrets, errors=errors, paths=paths, covered=covered)


def _translate_framework(manifest: Mapping[str, Any], document: dict[str, Any], error: Any) -> None:
    if "framework" not in manifest:
        error(
            "framework",
            "required in an FfDL manifest: give framework.name, framework.version and framework.command",
        )
        return
    framework = manifest["framework"]
    if not isinstance(framework, Mapping):
        error(
            "framework", f"must be a mapping with name, version and command, got {type(framework).__name__}"
        )
        return
    for key in framework:
        if key not in ("name", "version", "command"):
            error(f"framework.{key}", "unknown field; accepted: name, version, command")
    name = framework.get("name")
    version = framework.get("version")
    if "command" in framework:
        command = framework["command"]
        document["command"] = (
            _CONTINUATION.sub(" ", command).rstrip() if isinstance(command, str) else command
        )
    else:
        error("framework.command", "required: the shell command that starts training")
    if not isinstance(name, str) or name.strip().lower() not in FRAMEWORK_IMAGES:
        shown = f"'{name[:40]}'" if isinstance(name, str) else "missing" if name is None else "not a string"
        error("framework.name", f"unknown framework ({shown}); use one of {', '.join(FRAMEWORK_IMAGES)}")
        return
    name = name.strip().lower()
    if isinstance(version, int) and not isinstance(version, bool) and abs(version) < 10**18:
        version = str(version)
    if not isinstance(version, str) or not version.strip():
        hint = ' (write it in quotes, e.g. "1.10")' if isinstance(version, float) else ""
        error("framework.version", f"required: a string{hint}")
        return
    version = version.strip()
    document["image"] = FRAMEWORK_IMAGES[name].format(version=version)
    document["framework"] = {"name": name, "version": version}


def _translate_data_stores(
    stores: Any, secrets: dict[str, dict[str, str]], paths: dict[str, str], error: Any
) -> list[dict[str, Any]]:
    if stores is None:
        return []
    if not isinstance(stores, list):
        error("data_stores", f"must be a list of data stores, got {type(stores).__name__}")
        return []
    volumes: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    for index, store in enumerate(stores):
        path = f"data_stores[{index}]"
        if not isinstance(store, Mapping):
            error(path, f"must be a mapping, got {type(store).__name__}")
            continue
        for key in store:
            if key not in _STORE_KEYS:
                error(f"{path}.{key}", f"unknown field; accepted: {', '.join(_STORE_KEYS)}")
        store_id = store.get("id")
        if not isinstance(store_id, str) or not _STORE_ID.fullmatch(store_id):
            error(
                f"{path}.id",
                "required: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )
            continue
        if store_id in seen_ids:
            error(f"{path}.id", f"duplicate data store id '{store_id}'")
            continue
        seen_ids.add(store_id)
        volumes.extend(_store_volumes(store, store_id, path, len(volumes), secrets, paths, error))
    return volumes


def _store_volumes(
    store: Mapping[str, Any],
    store_id: str,
    path: str,
    first: int,
    secrets: dict[str, dict[str, str]],
    paths: dict[str, str],
    error: Any,
) -> list[dict[str, Any]]:
    """One S3 data store's volumes: its training data (read-only) and its results, if it names them.
    `first` is the index the first of them gets among the spec's volumes (for `paths`, which maps a
    volume's field back to the manifest's, so errors name what the user wrote)."""
    store_type = store.get("type")
    if not isinstance(store_type, str) or store_type not in S3_STORE_TYPES:
        error(f"{path}.type", f"unsupported data store type; use one of {', '.join(sorted(S3_STORE_TYPES))}")
    connection = _translate_connection(
        store.get("connection"), f"{path}.connection", store_id, secrets, error
    )
    if "training_data" not in store and "training_results" not in store:
        error(path, "needs training_data and/or training_results")
    volumes: list[dict[str, Any]] = []
    for part, kind, root in (
        ("training_data", "data", DATA_MOUNT_ROOT),
        ("training_results", "results", RESULTS_MOUNT_ROOT),
    ):
        if part not in store:
            continue
        target = store[part]
        if not isinstance(target, Mapping) or set(target) != {"container"}:
            error(f"{path}.{part}", "must be a mapping with just `container: <bucket name>`")
            continue
        volume_path = f"volumes[{first + len(volumes)}]"
        paths.update(
            {
                volume_path: path,
                f"{volume_path}.bucket": f"{path}.{part}.container",
                f"{volume_path}.endpoint": f"{path}.connection.auth_url",
                f"{volume_path}.mount_path": f"{path}.id",
                f"{volume_path}.name": f"{path}.id",
                f"{volume_path}.secret": f"{path}.id",
            }
        )
        volumes.append(
            {
                "name": _volume_name(kind, store_id),
                "kind": kind,
                "type": "s3",
                "mount_path": f"{root}/{store_id}",
                "read_only": kind == "data",
                "bucket": target["container"],
                "endpoint": connection.get("auth_url"),
                "secret": store_id if store_id in secrets else None,
            }
        )
    return volumes


def _translate_connection(
    connection: Any, path: str, store_id: str, secrets: dict[str, dict[str, str]], error: Any
) -> dict[str, Any]:
    """Split a connection into its endpoint and credentials; messages never show credential values."""
    if connection is None:
        return {}
    if not isinstance(connection, Mapping):
        error(path, f"must be a mapping, got {type(connection).__name__}")
        return {}
    for key in connection:
        if key not in _CONNECTION_KEYS:
            error(
                f"{path}.{key}" if isinstance(key, str) else path,
                "unknown field; accepted: auth_url, user_name, password, type",
            )
    credentials: dict[str, str] = {}
    for key, secret_key in (("user_name", "access_key_id"), ("password", "secret_access_key")):
        value = connection.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
            value = str(value)
        if isinstance(value, str) and value:
            credentials[secret_key] = value
        elif key in connection:
            error(f"{path}.{key}", "must be a non-empty string (its value is not shown)")
    if len(credentials) == 1:
        error(path, "give both user_name and password, or neither")
    elif credentials:
        secrets[store_id] = credentials
    return {"auth_url": connection["auth_url"]} if "auth_url" in connection else {}


def _volume_name(kind: str, store_id: str) -> str:
    """A DNS-1123 label for the volume, stable for a given data-store id."""
    slug = re.sub(r"[^a-z0-9]+", "-", store_id.lower()).strip("-")
    name = f"{kind}-{slug}"
    if name != f"{kind}-{store_id}" or len(name) > 63:
        digest = hashlib.sha256(store_id.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name

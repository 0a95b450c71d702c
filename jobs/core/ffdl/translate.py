"""Translate FfDL `manifest.yml` documents into Trainyard job-spec input.

The translator only restructures: it maps FfDL's keys onto the Trainyard spec's input keys and
leaves value checks (units, ranges, image syntax) to `jobs.core.spec`, which validates the result like
any other spec and reports errors under the FfDL names through `Translation.paths`.

`FFDL_MAPPING` (`jobs.core.ffdl.mapping`) is the one table of every key FfDL's manifest schema allows
(its `ManifestV1` in restapi/api_v1/server/manifest.go, and the `connection` keys its trainer reads): each
is translated, ignored with the reason, or refused with the reason. The translator reads its accepted keys
and its refusals from the table; docs/spec.md and the portal's /spec/ page show it (jobs.core.spec.reference).
In short:

- `gpus`, `cpus`, `memory`, `gpu_type` are per learner, as in FfDL; `learners` defaults to 1.
  Memory units keep FfDL's meaning (`Mb`/`Gb`/`MB`/`GB` are MiB/GiB), see `jobs.core.spec.parse_memory_mib`.
- `framework.name` + `framework.version` pick the image from `FRAMEWORK_IMAGES`, the learner images
  FfDL's LCM ran per framework (lcm/service/lcm/container_helper_extensions.go); for `custom` the
  version is the image itself. Frameworks FfDL named but had no image for are `REFUSED_FRAMEWORKS`.
- `framework.command` (a shell string) runs as `/bin/sh -c <command>`. A line break followed by
  indentation is a continuation of the same command line (YAML `>` keeps the breaks before
  more-indented lines, which the shell would otherwise run as separate commands).
- An S3 data store (`mount_cos`, `s3_datastore`) becomes S3 volumes: `training_data` → kind "data",
  read-only, at `/mnt/data/<id>`; `training_results` → kind "results", writable, at `/mnt/results/<id>`;
  the volume's `secret` is the data-store id and the credentials go to `Translation.secrets` only.
- A `mount_volume` data store with a `host_mount` connection becomes `host` volumes of
  `<connection.path>/<container>` (FfDL mounted the container as a sub-path of the node folder), at the
  same mount paths; the tenant's policy decides at submit whether the folder may be mounted, and its
  refusal names `connection.path`. With `connection.claim` (Trainyard's addition) it is a `pvc` volume.
- The model `version` is dropped: Trainyard has no model versions.
- `DATA_DIR`/`RESULT_DIR` are not set here; the platform sets them when it launches the job.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.core.ffdl.mapping import (
    DATA_MOUNT_ROOT,
    FFDL_KEYS,
    FFDL_MAPPING,
    FRAMEWORK_IMAGES,
    HOST_MOUNT,
    IGNORED,
    MAPPING_BY_PATH,
    MOUNT_ONLY,
    MOUNT_STORE_TYPE,
    REFUSED,
    REFUSED_FRAMEWORKS,
    REFUSED_STORE_TYPES,
    RESULTS_MOUNT_ROOT,
    S3_ONLY,
    S3_STORE_TYPES,
    keys_under,
)

_MARKER_KEYS = frozenset({"framework", "gpus", "cpus", "memory", "gpu_type", "data_stores", "version"})
_TRAINYARD_MARKER_KEYS = frozenset({"image", "command", "resources"})
_FRAMEWORK_KEYS = keys_under("framework")
_STORE_KEYS = keys_under("data_stores[]")
_CONNECTION_KEYS = keys_under("data_stores[].connection")
_CONTINUATION = re.compile(r"(?<!\\)\n[ \t]+")
# A here-document (`<<WORD`, `<<-WORD`, `<< 'WORD'`; not the here-string `<<<`): its lines are the command's
# input, so they are kept as written.
_HEREDOC = re.compile(r"(?<!<)<<-?[ \t]*['\"]?[A-Za-z_][A-Za-z0-9_]*")
_STORE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_REGION = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
_CAPTURE = re.compile(r"\$?([A-Za-z_][A-Za-z0-9_]*)")
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
    for key in ("version", "storage"):
        value = manifest.get(key)
        if value is not None and not isinstance(value, str | int | float):
            error(key, f"must be a string, got {type(value).__name__}")

    _translate_framework(manifest, document, error)
    if "evaluation_metrics" in manifest:
        document["evaluation_metrics"] = _translate_metrics(manifest["evaluation_metrics"], paths, error)
    covered = {key for key in ("image", "command") if key not in document}
    volumes = _translate_data_stores(manifest.get("data_stores"), secrets, paths, covered, error)
    if volumes:
        document["volumes"] = volumes
    return Translation(
        document=document, secrets=secrets, errors=errors, paths=paths, covered=frozenset(covered)
    )


def _refuse_or_reject(
    mapping: Mapping[Any, Any], generic: str, path: str, accepted: tuple[str, ...], error: Any
) -> None:
    """Report keys of `mapping` (at `path`; `generic` is its table path) the table refuses, with the
    table's reason, and keys it does not know, with what is accepted."""
    for key in mapping:
        row = MAPPING_BY_PATH.get(f"{generic}.{key}") if isinstance(key, str) else None
        where = f"{path}.{key}" if isinstance(key, str) else path
        if row is not None and row.handling == REFUSED:
            error(where, row.note)
        elif not isinstance(key, str) or key not in accepted:
            error(where, f"unknown field; accepted: {', '.join(accepted)}")


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
    _refuse_or_reject(framework, "framework", "framework", _FRAMEWORK_KEYS, error)
    name = framework.get("name")
    version = framework.get("version")
    if "command" in framework:
        command = framework["command"]
        document["command"] = _shell_command(command) if isinstance(command, str) else command
    else:
        error("framework.command", "required: the shell command that starts training")
    key = name.strip().lower() if isinstance(name, str) else None
    if key in REFUSED_FRAMEWORKS:
        error("framework.name", f"'{key}' is not supported: {REFUSED_FRAMEWORKS[key]}")
        return
    if key not in FRAMEWORK_IMAGES:
        shown = f"'{name[:40]}'" if isinstance(name, str) else "missing" if name is None else "not a string"
        error("framework.name", f"unknown framework ({shown}); use one of {', '.join(FRAMEWORK_IMAGES)}")
        return
    if isinstance(version, int) and not isinstance(version, bool) and abs(version) < 10**18:
        version = str(version)
    if not isinstance(version, str) or not version.strip():
        hint = ' (write it in quotes, e.g. "1.10")' if isinstance(version, float) else ""
        error("framework.version", f"required: a string{hint}")
        return
    version = version.strip()
    document["image"] = FRAMEWORK_IMAGES[key].format(version=version)
    document["framework"] = {"name": key, "version": version}


def _shell_command(command: str) -> str:
    """FfDL's `framework.command` as the learner's shell line.

    FfDL itself replaced every newline with a space before `eval` (trainer/trainer_impl.go), so a folded
    command (`command: >` whose more-indented lines YAML keeps on their own lines) ran as one line. Here
    indented continuation lines are joined the same way, while lines that start at the margin stay separate
    commands. A command with a here-document is kept byte for byte: its lines (indented Python, say) are
    the input of a command, which joining would break, as it broke on FfDL."""
    if _HEREDOC.search(command):
        return command
    return _CONTINUATION.sub(" ", command).rstrip()


def _translate_metrics(metrics: Any, paths: dict[str, str], error: Any) -> Any:
    """FfDL's `evaluation_metrics` in Trainyard's shape: `image_tag` dropped, each group's `scalars`
    become its `values`, `etimes` dropped, `$` taken off capture names. Anything else is passed on for
    the spec's own checks (which also know Trainyard's `values` and `event_types`)."""
    if not isinstance(metrics, Mapping):
        return metrics
    ignored = {row.ffdl.rsplit(".", 1)[1] for row in FFDL_MAPPING if row.ffdl.count(".") == 1
               and row.ffdl.startswith("evaluation_metrics.") and row.handling == IGNORED}  # fmt: skip
    result = {key: value for key, value in metrics.items() if key not in ignored}
    groups = metrics.get("groups")
    if isinstance(groups, Mapping):
        result["groups"] = {
            name: _translate_group(group, f"evaluation_metrics.groups.{name}", paths, error)
            for name, group in groups.items()
        }
    return result


def _translate_group(group: Any, path: str, paths: dict[str, str], error: Any) -> Any:
    if not isinstance(group, Mapping):
        return group
    result = {key: value for key, value in group.items() if key not in ("scalars", "etimes")}
    meta = group.get("meta")
    if isinstance(meta, Mapping) and isinstance(meta.get("time"), str):
        result["meta"] = {**meta, "time": meta["time"].strip().removeprefix("$")}
    scalars = group.get("scalars")
    if scalars is None:
        return result
    if not isinstance(scalars, Mapping):
        error(f"{path}.scalars", f"must be a mapping of metric names to {{value: $capture}}, got "
              f"{type(scalars).__name__}")  # fmt: skip
        return result
    captures: list[str] = []
    for metric, typed in scalars.items():
        value = typed.get("value") if isinstance(typed, Mapping) else None
        match = _CAPTURE.fullmatch(value.strip()) if isinstance(value, str) else None
        if match is None:
            error(f"{path}.scalars.{metric}.value", "required: `$<capture>`, a named capture of the regex")
        elif match[1] not in captures:
            captures.append(match[1])
    if captures and "values" not in group:
        result["values"] = captures
        paths[f"{path}.values"] = f"{path}.scalars"
    return result


def _translate_data_stores(
    stores: Any, secrets: dict[str, dict[str, str]], paths: dict[str, str], covered: set[str], error: Any
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
        _refuse_or_reject(store, "data_stores[]", path, _STORE_KEYS, error)
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
        volumes.extend(_store_volumes(store, store_id, path, len(volumes), secrets, paths, covered, error))
    return volumes


def _store_volumes(
    store: Mapping[str, Any],
    store_id: str,
    path: str,
    first: int,
    secrets: dict[str, dict[str, str]],
    paths: dict[str, str],
    covered: set[str],
    error: Any,
) -> list[dict[str, Any]]:
    """One data store's volumes: its training data (read-only) and its results, if it names them.
    `first` is the index the first of them gets among the spec's volumes (for `paths`, which maps a
    volume's field back to the manifest's, so errors name what the user wrote); a field whose problem
    is already reported here goes to `covered`, so that the spec's own check does not repeat it."""
    store_type = store.get("type")
    connection = store.get("connection")
    if isinstance(store_type, str) and store_type in REFUSED_STORE_TYPES:
        error(f"{path}.type", f"'{store_type}' is not supported: {REFUSED_STORE_TYPES[store_type]}")
        source: dict[str, Any] = {}
    elif store_type == MOUNT_STORE_TYPE:
        source = _mount_source(connection, f"{path}.connection", error)
    else:
        if not isinstance(store_type, str) or store_type not in S3_STORE_TYPES:
            accepted = ", ".join(sorted({*S3_STORE_TYPES, MOUNT_STORE_TYPE}))
            error(f"{path}.type", f"unsupported data store type; use one of {accepted}")
        source = _s3_source(connection, f"{path}.connection", store_id, secrets, error)
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
            what = "bucket name" if store_type != MOUNT_STORE_TYPE else "folder"
            error(f"{path}.{part}", f"must be a mapping with just `container: <{what}>`")
            continue
        volume_path = f"volumes[{first + len(volumes)}]"
        paths.update(
            {
                volume_path: path,
                f"{volume_path}.bucket": f"{path}.{part}.container",
                f"{volume_path}.endpoint": f"{path}.connection.auth_url",
                f"{volume_path}.path": f"{path}.connection.path",
                f"{volume_path}.claim": f"{path}.connection.claim",
                f"{volume_path}.mount_path": f"{path}.id",
                f"{volume_path}.name": f"{path}.id",
                f"{volume_path}.secret": f"{path}.id",
            }
        )
        volume = {
            "name": _volume_name(kind, store_id),
            "kind": kind,
            "type": source.get("type", "s3"),
            "mount_path": f"{root}/{store_id}",
            "read_only": kind == "data",
        }
        if volume["type"] == "s3":
            volume.update(bucket=target["container"], endpoint=source.get("auth_url"))
            volume["secret"] = store_id if store_id in secrets else None
        elif volume["type"] == "host":
            folder = _folder(target["container"], f"{path}.{part}.container", error)
            node = source.get("path")
            volume["path"] = posixpath.join(node, folder) if isinstance(node, str) else node
            if node is None:
                covered.add(f"{volume_path}.path")
        else:
            _folder(target["container"], f"{path}.{part}.container", error)
            volume["claim"] = source["claim"]
        volumes.append(volume)
    return volumes


def _folder(container: Any, path: str, error: Any) -> str:
    """A `mount_volume` container: a folder under the store's node folder or claim (FfDL's sub-path)."""
    if not isinstance(container, str) or container.startswith("/") or ".." in container.split("/"):
        error(path, "must be a folder under connection.path: a relative path without '..'")
        return ""
    return container


def _mount_source(connection: Any, path: str, error: Any) -> dict[str, Any]:
    """A `mount_volume` store's connection: `type: host_mount` with `path` (a node folder), or `claim`."""
    if not isinstance(connection, Mapping):
        error(path, "required for mount_volume: `type: host_mount` and `path: <node folder>` (or `claim`)")
        return {"type": "host"}
    for key in connection:
        if key in ("auth_url", "user_name", "password", "region"):
            error(f"{path}.{key}", f"not accepted here: {S3_ONLY}")
    _refuse_or_reject(connection, "data_stores[].connection", path, _CONNECTION_KEYS, error)
    kind = connection.get("type", HOST_MOUNT)
    if kind != HOST_MOUNT:
        error(f"{path}.type", f"must be '{HOST_MOUNT}' for a mount_volume data store (FfDL's only kind)")
    if "claim" in connection:
        if "path" in connection:
            error(
                f"{path}.claim", "give `path` (a node folder) or `claim` (a PersistentVolumeClaim), not both"
            )
        return {"type": "pvc", "claim": connection["claim"]}
    if "path" not in connection:
        error(f"{path}.path", "required for a host_mount: the node folder the containers are folders of")
    return {"type": "host", "path": connection.get("path")}


def _s3_source(
    connection: Any, path: str, store_id: str, secrets: dict[str, dict[str, str]], error: Any
) -> dict[str, Any]:
    """Split an S3 connection into its endpoint and credentials; messages never show credential values."""
    if connection is None:
        return {"type": "s3"}
    if not isinstance(connection, Mapping):
        error(path, f"must be a mapping, got {type(connection).__name__}")
        return {"type": "s3"}
    for key in connection:
        if key in ("path", "name", "claim"):
            error(f"{path}.{key}", f"not accepted here: {MOUNT_ONLY}")
    _refuse_or_reject(connection, "data_stores[].connection", path, _CONNECTION_KEYS, error)
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
    region = connection.get("region")
    if region is not None:
        if not isinstance(region, str) or not _REGION.fullmatch(region):
            error(
                f"{path}.region",
                "must be an S3 region name like 'us-east-1' (lowercase letters, digits, '-')",
            )
        elif len(credentials) != 2:
            error(
                f"{path}.region",
                "goes with the credentials: give user_name and password too, or leave it out",
            )
        else:
            credentials["region"] = region
    if len(credentials) >= 2:
        secrets[store_id] = credentials
    source: dict[str, Any] = {"type": "s3"}
    if "auth_url" in connection:
        source["auth_url"] = connection["auth_url"]
    return source


def _volume_name(kind: str, store_id: str) -> str:
    """A DNS-1123 label for the volume, stable for a given data-store id."""
    slug = re.sub(r"[^a-z0-9]+", "-", store_id.lower()).strip("-")
    name = f"{kind}-{slug}"
    if name != f"{kind}-{store_id}" or len(name) > 63:
        digest = hashlib.sha256(store_id.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-')}-{digest}"
    return name

"""FfDL's manifest keys, one table: `FFDL_MAPPING` says for every key FfDL's manifest schema allows (its
`ManifestV1` in restapi/api_v1/server/manifest.go, and the `connection` keys its trainer reads) whether
Trainyard translates it, ignores it or refuses it, and why; with the framework images and the data-store
types the translator (`jobs.core.ffdl.translate`) accepts or refuses. docs/spec.md and the portal's /spec/
page show it (jobs.core.spec.reference).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FRAMEWORK_IMAGES: dict[str, str] = {
    "tensorflow": "tensorflow/tensorflow:{version}",
    "pytorch": "pytorch/pytorch:{version}",
    "caffe": "bvlc/caffe:{version}",
    "caffe2": "caffe2ai/caffe2:{version}",
    "h2o3": "opsh2oai/h2o3-ffdl:{version}",
    "horovod": "uber/horovod:{version}",
    "pytorchmpi": "tomcli/pytorch:{version}",
    "custom": "{version}",
}
REFUSED_FRAMEWORKS: dict[str, str] = {
    "torch": "FfDL named it (lcm constants) but had no learner image for it; use `pytorch`, or `custom` "
    "with a Torch image as the version",
    "mxnet": "FfDL listed it as a native framework but had no learner image for it; use `custom` with an "
    "MXNet image as the version",
}
S3_STORE_TYPES = frozenset({"mount_cos", "s3_datastore"})
MOUNT_STORE_TYPE = "mount_volume"
HOST_MOUNT = "host_mount"
_SWIFT_STORE = (
    "an OpenStack Swift object store; Trainyard reads data over S3 only (use `mount_cos` or `s3_datastore` "
    "with an S3 endpoint and access keys)"
)
REFUSED_STORE_TYPES: dict[str, str] = {
    "swift_datastore": _SWIFT_STORE,
    "softlayer_objectstore": _SWIFT_STORE,
    "bluemix_objectstore": _SWIFT_STORE,
    "inmem_datastore": "FfDL's in-memory store for its own tests; it holds no data a job could read",
}
DATA_MOUNT_ROOT = "/mnt/data"
RESULTS_MOUNT_ROOT = "/mnt/results"
TRANSLATED, IGNORED, REFUSED = "translated", "ignored", "refused"

_SWIFT = (
    "OpenStack Swift (Keystone) credentials; Trainyard reads data over S3 only: give `auth_url`, `user_name` "
    "(access key) and `password` (secret key)"
)
S3_ONLY = "a `mount_volume` data store mounts a node folder or a claim, with no endpoint or credentials"
MOUNT_ONLY = "only for a `mount_volume` data store (`type: mount_volume`)"


@dataclass(frozen=True)
class FfdlKey:
    """One key of FfDL's manifest: whether Trainyard translates, ignores or refuses it, and why.

    `target` names the Trainyard field it becomes; `note` says what happens (for an ignored or refused key,
    the reason: a refusal's error message). `example` is tried by tests in a manifest whose data store is
    of type `store`; `where` is the place in `translate`'s result it lands (`document.<path>` or
    `secrets.<store>.<key>`), `expected` the value there when it is not the example itself.
    """

    ffdl: str
    handling: str
    target: str
    note: str
    example: Any
    where: str = ""
    expected: Any = ...
    store: str = "mount_cos"


FFDL_MAPPING: tuple[FfdlKey, ...] = (
    FfdlKey("name", TRANSLATED, "name", "as is", "ffdl-job", "document.name"),
    FfdlKey("description", TRANSLATED, "description", "as is", "An FfDL job", "document.description"),
    FfdlKey("version", IGNORED, "", "Ignored: checked to be a string and dropped; Trainyard has no model "
            "versions", "1.0"),
    FfdlKey("learners", TRANSLATED, "learners", "as is (default 1)", 2, "document.learners"),
    FfdlKey("gpus", TRANSLATED, "resources.gpus", "per learner, as in FfDL", 2, "document.resources.gpus"),
    FfdlKey("cpus", TRANSLATED, "resources.cpu", "per learner, in cores", 4, "document.resources.cpu"),
    FfdlKey(
        "memory", TRANSLATED, "resources.memory",
        "per learner; FfDL's units keep their meaning (`Mb`, `Gb`, `MB`, `GB` are MiB and GiB)",
        "8Gb", "document.resources.memory",
    ),
    FfdlKey("gpu_type", TRANSLATED, "resources.gpu_type", "as is", "K80", "document.resources.gpu_type"),
    FfdlKey(
        "storage", IGNORED, "",
        "Ignored: FfDL passed it on but never gave a learner the disk (its restapi's TODO); Trainyard has "
        "no per-job disk request", "10Gb",
    ),
    FfdlKey(
        "framework.name", TRANSLATED, "image, framework.name",
        "picks the image (table below); lower-cased", "PyTorch", "document.framework.name", "pytorch",
    ),
    FfdlKey(
        "framework.version", TRANSLATED, "image, framework.version",
        "the image's tag (for `custom`, the whole image)", "2.3.0", "document.image", "pytorch/pytorch:2.3.0",
    ),
    FfdlKey(
        "framework.image_tag", IGNORED, "",
        "Ignored: FfDL's open-source LCM picked the learner image from name and version alone and never "
        "read it", "latest",
    ),
    FfdlKey(
        "framework.command", TRANSLATED, "command",
        "run as `/bin/sh -c <command>`; a line break followed by indentation continues the line (FfDL "
        "joined every line before `eval`: a folded `command: >` with more-indented lines ran as one line); a "
        "command with a here-document (`<<EOF`, `<<-EOF`, `<<'EOF'`) is kept as written, so its indented "
        "lines reach the command that reads them",
        "python train.py\n  --epochs 5", "document.command", "python train.py --epochs 5",
    ),
    FfdlKey(
        "data_stores[].id", TRANSLATED, "volumes[].name, mount_path, secret",
        f"the volumes `data-<id>` at `{DATA_MOUNT_ROOT}/<id>` and `results-<id>` at "
        f"`{RESULTS_MOUNT_ROOT}/<id>`; the data store the credentials belong to",
        "store1", "document.volumes[0].mount_path", f"{DATA_MOUNT_ROOT}/store1",
    ),
    FfdlKey(
        "data_stores[].type", TRANSLATED, "volumes[].type",
        "`mount_cos` and `s3_datastore`: `s3` volumes; `mount_volume`: `host` volumes (or `pvc` with "
        "`connection.claim`); FfDL's Swift stores (`swift_datastore`, `softlayer_objectstore`, "
        "`bluemix_objectstore`) and `inmem_datastore` are refused with the reason",
        "s3_datastore", "document.volumes[0].type", "s3",
    ),
    FfdlKey(
        "data_stores[].training_data.container", TRANSLATED, "volumes[].bucket, path",
        "a `data` volume, read-only: the bucket (S3, downloaded before the command starts) or, for "
        "`mount_volume`, the folder under `connection.path`", "inputs", "document.volumes[0].bucket",
    ),
    FfdlKey(
        "data_stores[].training_results.container", TRANSLATED, "volumes[].bucket, path",
        "a `results` volume, writable: the bucket, or the folder under `connection.path`", "outputs",
        "document.volumes[1].bucket",
    ),
    FfdlKey(
        "data_stores[].connection.auth_url", TRANSLATED, "volumes[].endpoint",
        "the S3 endpoint of both volumes (refused for `mount_volume`: it has no endpoint)",
        "https://s3.example.com", "document.volumes[0].endpoint",
    ),
    FfdlKey(
        "data_stores[].connection.user_name", TRANSLATED, "(credentials)",
        "kept apart from the spec, sealed; learners get it as `<STORE>_ACCESS_KEY_ID`", "AKIAEXAMPLE",
        "secrets.store1.access_key_id",
    ),
    FfdlKey(
        "data_stores[].connection.password", TRANSLATED, "(credentials)",
        "kept apart from the spec, sealed; learners get it as `<STORE>_SECRET_ACCESS_KEY`",
        "example-secret", "secrets.store1.secret_access_key",
    ),
    FfdlKey(
        "data_stores[].connection.region", TRANSLATED, "(credentials)",
        "kept with the credentials (the S3 region the download signs for); needs `user_name` and `password`",
        "eu-west-1", "secrets.store1.region",
    ),
    FfdlKey(
        "data_stores[].connection.type", TRANSLATED, "volumes[].type",
        "for `mount_volume`, `host_mount` (FfDL's only kind): `host` volumes; for S3 stores ignored",
        HOST_MOUNT, "document.volumes[0].type", "host", "mount_volume",
    ),
    FfdlKey(
        "data_stores[].connection.path", TRANSLATED, "volumes[].path",
        "`mount_volume` only: the node folder; each container is a folder under it (FfDL's sub-path). The "
        "tenant's policy (`host_path_prefixes`) must allow it, checked at submit",
        "/srv/datasets", "document.volumes[0].path", "/srv/datasets/inputs", "mount_volume",
    ),
    FfdlKey(
        "data_stores[].connection.name", IGNORED, "",
        "Ignored: the Kubernetes volume name FfDL gave the host folder; Trainyard names volumes "
        "`data-<id>` and `results-<id>`", "host-mount", "", ..., "mount_volume",
    ),
    FfdlKey(
        "data_stores[].connection.claim", TRANSLATED, "volumes[].claim",
        "Trainyard's addition for `mount_volume`, instead of `path`: a PersistentVolumeClaim of the "
        "tenant's namespace, mounted whole (the container is then a folder inside it)",
        "datasets", "document.volumes[0].claim", "datasets", "mount_volume",
    ),
    FfdlKey("data_stores[].connection.domain_name", REFUSED, "", f"Refused: {_SWIFT}", "Default"),
    FfdlKey("data_stores[].connection.project_id", REFUSED, "", f"Refused: {_SWIFT}", "p-1"),
    FfdlKey(
        "evaluation_metrics.type", TRANSLATED, "evaluation_metrics.type",
        "as is: `regex_extractor` reads metrics from log lines, `tensorboard` from event files",
        "tensorboard", "document.evaluation_metrics.type",
    ),
    FfdlKey(
        "evaluation_metrics.in", TRANSLATED, "evaluation_metrics.in",
        "as is (for `tensorboard`, the folder of event files)", "$JOB_STATE_DIR/logs/tb",
        "document.evaluation_metrics.in",
    ),
    FfdlKey(
        "evaluation_metrics.line_lookahead", TRANSLATED, "evaluation_metrics.line_lookahead",
        "accepted and kept", 4, "document.evaluation_metrics.line_lookahead",
    ),
    FfdlKey(
        "evaluation_metrics.eventTypes", TRANSLATED, "evaluation_metrics.eventTypes",
        "accepted and kept; not acted on", ["scalars"], "document.evaluation_metrics.eventTypes",
    ),
    FfdlKey(
        "evaluation_metrics.image_tag", IGNORED, "",
        "Ignored: the tag of FfDL's log-collector image; Trainyard's metric collection is built in",
        "latest",
    ),
    FfdlKey(
        "evaluation_metrics.groups.*.regex", TRANSLATED, "evaluation_metrics.groups.*.regex",
        "as is: named captures become metrics", r"loss = (?P<loss>[0-9.]+)",
        "document.evaluation_metrics.groups.train.regex",
    ),
    FfdlKey(
        "evaluation_metrics.groups.*.meta.time", TRANSLATED, "evaluation_metrics.groups.*.meta.time",
        "the capture that is the step", "$iter", "document.evaluation_metrics.groups.train.meta.time", "iter",
    ),
    FfdlKey(
        "evaluation_metrics.groups.*.scalars.*.value", TRANSLATED, "evaluation_metrics.groups.*.values",
        "`$<capture>`: that capture is a metric", "$loss", "document.evaluation_metrics.groups.train.values",
        ["loss"],
    ),
    FfdlKey(
        "evaluation_metrics.groups.*.scalars.*.type", IGNORED, "",
        "Ignored: FfDL's value type; Trainyard stores every metric as a number", "REAL",
    ),
    FfdlKey(
        "evaluation_metrics.groups.*.etimes.*.value", IGNORED, "",
        "Ignored: FfDL's extra time stamps of a line; Trainyard's step is `meta.time`", "$iter",
    ),
    FfdlKey(
        "evaluation_metrics.groups.*.etimes.*.type", IGNORED, "",
        "Ignored: FfDL's value type of an extra time stamp", "INT",
    ),
)  # fmt: skip
MAPPING_BY_PATH = {row.ffdl: row for row in FFDL_MAPPING}


def keys_under(parent: str) -> tuple[str, ...]:
    """The keys the table has directly under `parent` ("" the manifest, `data_stores[]` a store)."""
    prefix = f"{parent}." if parent else ""
    names = (row.ffdl[len(prefix) :] for row in FFDL_MAPPING if row.ffdl.startswith(prefix))
    return tuple(dict.fromkeys(re.split(r"[.\[]", name)[0] for name in names))


FFDL_KEYS = keys_under("")

"""The Trainyard job spec, declared once: every field with its type, default, limits, an example and what
the platform does with it.

This is the one source of truth the rest is generated from: the validator's lists of accepted keys
(`keys`, `variant_keys`), the JSON Schema (`jobs.core.spec.json_schema`), docs/spec.md and the portal's
/spec/ page (`jobs.core.spec.reference`), and the submit editor's completion. The value checks stay in
the validator (fields.py, volumes.py, metrics.py), whose messages are the users'; tests/jobs/
test_spec_schema.py proves the two agree (keys, defaults, bounds, patterns, enums). Adding a field is one
`Field` here plus its check in the validator. Pure: no Django.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jobs.core.spec.values import (
    CPU_MILLIS_RANGE,
    MAX_ENV_ENTRIES,
    MAX_ENV_VALUE,
    MAX_GPUS_PER_LEARNER,
    MAX_LEARNERS,
    MAX_RUNTIME_SECONDS,
    MAX_VOLUMES,
    MEMORY_MIB_RANGE,
)


class _Missing:
    """No default (or no example): the field is required, or absent means 'not set'."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

# Patterns as the validator writes them (tests compare each with the validator's compiled regex).
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
LABEL_VALUE = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?"
SECRET_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"  # noqa: S105 (a pattern, not a password)
BUCKET = r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}"
URL = r"https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[^\s@]*)?"
GROUP_NAME = r"[A-Za-z_][A-Za-z0-9_.-]{0,63}"
_IMAGE_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_HOST = (
    r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]{1,5})?"
)
IMAGE = (
    rf"(?:{_IMAGE_HOST}/)?{_IMAGE_COMPONENT}(?:/{_IMAGE_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*:[0-9a-fA-F]{32,})?"
)
# The friendly quantities' text forms (values.parse_cpu_millis, parse_memory_mib, parse_duration_seconds).
_NUMBER = r" *(?:[0-9]{1,20}(?:\.[0-9]{1,20})?|\.[0-9]{1,20}) *"
CPU_TEXT = _NUMBER + r"m? *"
MEMORY_TEXT = _NUMBER + r"(?:[KkMmGgTt](?:[Ii][Bb]?|[Bb])|[kKMGT])? *"
DURATION_TEXT = r"\s*(?:[0-9]{1,11}|(?:[0-9]{1,9}[smhd])+)\s*"
MAX_METRIC_GROUPS = 8
MAX_METRIC_PATTERN = 500
MAX_PATH = 1024


@dataclass(frozen=True)
class Field:
    """One field of the spec. `types` are JSON types (empty: any value); the constraints apply to the
    values of their type only, as in JSON Schema (a `pattern` to strings, `minimum` to numbers).

    An object has `fields` (and, for volumes, `variants`: more fields chosen by its `discriminator`); a
    list has `items`; a mapping of free names has `values` (and `key_pattern`). `normalized` names the
    key the validator stores the value under when it differs (`cpu` → `cpu_millis`); `exclusive` names a
    sibling that may not be given with this one; `required_when` (sibling, value) makes it required when
    that sibling has that value. `default_text` says the default in words when it
    depends on other fields.
    """

    name: str
    types: tuple[str, ...]
    description: str
    example: Any = MISSING
    default: Any = MISSING
    default_text: str = ""
    required: bool = False
    null_ok: bool | None = None
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    pattern: str | None = None
    enum: tuple[Any, ...] = ()
    fields: tuple[Field, ...] = ()
    variants: tuple[tuple[str, tuple[Field, ...]], ...] = ()
    discriminator: str = ""
    items: Field | None = None
    min_items: int | None = None
    max_items: int | None = None
    values: Field | None = None
    key_pattern: str | None = None
    max_entries: int | None = None
    normalized: str = ""
    exclusive: str = ""
    units: str = ""
    required_when: tuple[str, Any] | None = None
    variant_examples: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def nullable(self) -> bool:
        """Whether null is taken as 'not given' (true of every optional field unless said otherwise)."""
        return (not self.required) if self.null_ok is None else self.null_ok

    def child(self, name: str) -> Field:
        """The named field of this object, among its common fields and every variant's."""
        for candidate in self.fields + tuple(f for _, fs in self.variants for f in fs):
            if candidate.name == name:
                return candidate
        raise KeyError(name)


def _pair(name: str, item: Field, description: str, example: list[Any], **extra: Any) -> Field:
    return Field(
        name, ("array",), description, example=example, items=item, min_items=2, max_items=2, **extra
    )


_RESOURCES = (
    Field(
        "gpus",
        ("integer",),
        "GPUs per learner. The pod asks for `nvidia.com/gpu` of this count (request = limit); admission "
        "places each learner on a node with that many free GPUs and counts `learners * gpus` against the "
        "tenant's GPU quota. Learners that ask for GPUs tolerate the operator's GPU taints.",
        example=1,
        default=0,
        minimum=0,
        maximum=MAX_GPUS_PER_LEARNER,
    ),
    Field(
        "cpu",
        ("number", "string"),
        'CPU per learner, in cores (`2`, `0.5`) or Kubernetes millicores (`"500m"`); stored as '
        "`cpu_millis`. It is the container's CPU request and limit, sizes the thread pools "
        "(`tuning.threads`) and counts against the tenant's CPU quota.",
        example=4,
        default=1,
        minimum=0.01,
        maximum=256,
        pattern=CPU_TEXT,
        normalized="cpu_millis",
        exclusive="cpu_millis",
        units="cores, or millicores with `m`",
    ),
    Field(
        "cpu_millis",
        ("integer",),
        "CPU per learner in millicores: the normalized form of `cpu` (give one or the other).",
        example=4000,
        minimum=CPU_MILLIS_RANGE[0],
        maximum=CPU_MILLIS_RANGE[1],
        exclusive="cpu",
        units="millicores",
    ),
    Field(
        "memory",
        ("number", "string"),
        'Memory per learner: a quantity (`"16Gi"`, `"512Mi"`, `"16GB"`) or a number of MiB; stored '
        "as `memory_mib`, rounded up. `Ki`/`Mi`/`Gi`/`Ti` and FfDL's `Kb`/`Mb`/`Gb`/`KiB`/`MiB`/`GB`... (any "
        "case) are powers of 1024; `k`/`M`/`G`/`T` are powers of 1000; `m` is refused (milli). The "
        "container's memory request and limit: past it the learner is OOMKilled and the job fails.",
        example="16Gi",
        default="1Gi",
        minimum=MEMORY_MIB_RANGE[0],
        maximum=MEMORY_MIB_RANGE[1],
        pattern=MEMORY_TEXT,
        normalized="memory_mib",
        exclusive="memory_mib",
        units="MiB, or a quantity",
    ),
    Field(
        "memory_mib",
        ("integer",),
        "Memory per learner in MiB: the normalized form of `memory` (give one or the other).",
        example=16384,
        minimum=MEMORY_MIB_RANGE[0],
        maximum=MEMORY_MIB_RANGE[1],
        exclusive="memory",
        units="MiB",
    ),
    Field(
        "gpu_type",
        ("string",),
        "Only nodes of this GPU type: a short name (`A100`, `h100`, any case) or a node's product label, "
        "mapped to the type's canonical name by the operator's alias map. Needs `gpus` of at least 1; a "
        "type no node of the cluster has is refused at submit. Unset: any GPU node.",
        example="A100",
        pattern=LABEL_VALUE,
    ),
)

_VOLUME_COMMON = (
    Field(
        "name",
        ("string",),
        "The volume's name, distinct within the job: the pod volume's name (a DNS-1123 label).",
        example="imagenet",
        required=True,
        pattern=DNS_LABEL,
    ),
    Field(
        "kind",
        ("string",),
        "`data`: input, mounted read-only by default; the first data volume's mount path is the learners' "
        "`DATA_DIR`, and an S3 data volume is downloaded there by the `fetch` init container before the "
        "command starts. `results`: output, writable; the first results volume's mount path is "
        "`RESULT_DIR`.",
        example="data",
        required=True,
        enum=("data", "results"),
    ),
    Field(
        "type",
        ("string",),
        "Where the volume comes from: `host` a folder of the node (hostPath; the tenant's policy must "
        "allow the path), `pvc` a PersistentVolumeClaim of the tenant's namespace, `s3` a bucket (an "
        "emptyDir the `fetch` init container fills for data volumes).",
        example="s3",
        required=True,
        enum=("host", "pvc", "s3"),
    ),
    Field(
        "mount_path",
        ("string",),
        "Where the learners see the volume: an absolute path, distinct among the volumes, not the "
        "`checkpoint_dir`, not a system path (`/`, `/proc`, `/sys`, `/dev`) nor one the platform mounts "
        "itself (scratch, `/dev/shm`, `MODEL_DIR`).",
        example="/data",
        required=True,
        max_length=MAX_PATH,
    ),
    Field(
        "read_only",
        ("boolean",),
        "Mount the volume read-only. A results volume must be writable.",
        default_text="true for `data` volumes, false for `results` volumes",
        example=True,
        null_ok=False,
    ),
)
_VOLUME_VARIANTS = (
    (
        "host",
        (
            Field(
                "path",
                ("string",),
                "The node's folder (absolute). Refused unless it lies under a prefix the tenant's policy "
                "allows (`host_path_prefixes`).",
                example="/srv/datasets/mnist",
                required=True,
                max_length=MAX_PATH,
            ),
        ),
    ),
    (
        "pvc",
        (
            Field(
                "claim",
                ("string",),
                "The name of a PersistentVolumeClaim in the tenant's namespace, mounted by every learner.",
                example="mnist-results",
                required=True,
                pattern=DNS_SUBDOMAIN,
            ),
        ),
    ),
    (
        "s3",
        (
            Field(
                "bucket",
                ("string",),
                "The bucket to read (data) or write (results).",
                example="datasets",
                required=True,
                pattern=BUCKET,
            ),
            Field(
                "prefix",
                ("string",),
                "Only keys under this prefix; a data volume downloads them into `mount_path`.",
                example="imagenet-subset/",
                default="",
                max_length=1024,
            ),
            Field(
                "endpoint",
                ("string",),
                "The S3 endpoint (http:// or https://, no credentials in it); unset means AWS. The tenant's "
                "policy may limit the hosts (`datastore_hosts`).",
                example="https://s3.example.com",
                max_length=2048,
                pattern=URL,
            ),
            Field(
                "secret",
                ("string",),
                "The data store whose credentials the job carries. An FfDL manifest's `connection` credentials "
                "are kept apart from the spec, sealed, under the data store's id, which its volumes name "
                "here; learners get them as `<STORE>_ACCESS_KEY_ID` and `<STORE>_SECRET_ACCESS_KEY` from a "
                "per-attempt Secret, and the data download uses them. A Trainyard spec carries no "
                "credentials itself: unset, or naming a store the job holds none for, the download uses "
                "boto3's default credential chain.",
                example="team-datasets",
                pattern=SECRET_ID,
            ),
        ),
    ),
)

_ENV_VALUE = Field(
    "value",
    ("string", "integer"),
    "The value (whole numbers are turned into text; quote other numbers and booleans).",
    example="WARN",
    default="",
    max_length=MAX_ENV_VALUE,
    null_ok=False,
)

_METRIC_GROUP = Field(
    "group",
    ("object",),
    "A named regular expression; each of its lines' named captures becomes a metric.",
    example={"regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.]+)", "values": ["loss"]},
    fields=(
        Field(
            "regex",
            ("string",),
            "A regular expression with named captures (`(?P<loss>[0-9.]+)`), matched against every line "
            "of the learners' standard output with a time limit per line.",
            example=r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.]+)",
            required=True,
            max_length=MAX_METRIC_PATTERN,
        ),
        Field(
            "meta",
            ("object",),
            "Which capture is the step (the x axis of the job page's charts).",
            example={"time": "iteration"},
            default={},
            fields=(
                Field(
                    "time",
                    ("string",),
                    "The capture that is the step; unset: lines are numbered.",
                    example="iteration",
                ),
            ),
        ),
        Field(
            "values",
            ("array",),
            "The captures that are metrics.",
            default_text="every capture but the step",
            example=["loss"],
            items=Field("capture", ("string",), "A capture name of the regex.", example="loss"),
            min_items=1,
        ),
    ),
)

SPEC = Field(
    "spec",
    ("object",),
    "A Trainyard job spec (YAML or JSON).",
    required=True,
    example={"name": "mnist", "image": "pytorch/pytorch:2.3.0", "command": ["python", "train.py"]},
    fields=(
        Field(
            "name",
            ("string",),
            "The job's name, shown in lists and on its page; need not be unique. One line.",
            example="mnist-pytorch-single",
            required=True,
            max_length=100,
        ),
        Field(
            "description",
            ("string",),
            "Free text shown on the job's page.",
            example="Train a small CNN on MNIST with one GPU.",
            default="",
            max_length=2000,
        ),
        Field(
            "image",
            ("string",),
            "The container image every learner runs (`registry/repo:tag` or `...@sha256:<digest>`). The "
            "tenant's policy may limit the registries.",
            example="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
            required=True,
            max_length=255,
            pattern=IMAGE,
        ),
        Field(
            "command",
            ("array", "string"),
            "What each learner runs: a list of arguments (the first is the program), or a shell command "
            "string, run as `/bin/sh -c <command>`. It runs in `MODEL_DIR` when the job carries code, "
            "wrapped in a small launcher that uploads `RESULT_DIR` when it exits. Its exit code decides "
            "the job: non-zero fails it (no retry).",
            example=["python", "-u", "train.py", "--epochs", "5"],
            required=True,
            items=Field("argument", ("string",), "One argument (quote numbers).", example="train.py"),
            min_items=1,
        ),
        Field(
            "learners",
            ("integer",),
            "How many pods run the command together, as one gang: all are admitted at once or none, each "
            "with `resources`. Each gets `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` for "
            "torch.distributed (and FfDL's `LEARNER_ID`, `NUM_LEARNERS`).",
            example=2,
            default=1,
            minimum=1,
            maximum=MAX_LEARNERS,
        ),
        Field(
            "resources",
            ("object",),
            "What each learner gets (requests = limits), and what admission and the quota count.",
            example={"gpus": 1, "cpu": 4, "memory": "16Gi"},
            default={},
            fields=_RESOURCES,
        ),
        Field(
            "env",
            ("object", "array"),
            "Environment variables of every learner: a mapping `NAME: value` or a list of `{name, value}`. "
            "Names the platform sets itself (`RANK`, `DATA_DIR`, ...) are refused; thread variables "
            "(`OMP_NUM_THREADS`, ...) are overridden while `tuning.threads` is `auto`.",
            example={"NCCL_DEBUG": "WARN"},
            default={},
            values=_ENV_VALUE,
            key_pattern=ENV_NAME,
            max_entries=MAX_ENV_ENTRIES,
            max_items=MAX_ENV_ENTRIES,
            items=Field(
                "variable",
                ("object",),
                "One variable, as `{name, value}`.",
                example={"name": "NCCL_DEBUG", "value": "WARN"},
                fields=(
                    Field(
                        "name",
                        ("string",),
                        "The variable's name.",
                        example="NCCL_DEBUG",
                        required=True,
                        pattern=ENV_NAME,
                    ),
                    _ENV_VALUE,
                ),
            ),
        ),
        Field(
            "volumes",
            ("array",),
            "Data to read and places to write results, mounted into every learner.",
            example=[
                {
                    "name": "imagenet",
                    "kind": "data",
                    "type": "s3",
                    "bucket": "datasets",
                    "mount_path": "/data",
                }
            ],
            default=[],
            max_items=MAX_VOLUMES,
            items=Field(
                "volume",
                ("object",),
                "One volume; its `type` decides which other fields it has.",
                example={
                    "name": "imagenet",
                    "kind": "data",
                    "type": "s3",
                    "bucket": "datasets",
                    "mount_path": "/data",
                },
                fields=_VOLUME_COMMON,
                variants=_VOLUME_VARIANTS,
                discriminator="type",
                variant_examples={
                    "host": {
                        "name": "mnist",
                        "kind": "data",
                        "type": "host",
                        "path": "/srv/datasets/mnist",
                        "mount_path": "/data",
                    },
                    "pvc": {
                        "name": "results",
                        "kind": "results",
                        "type": "pvc",
                        "claim": "mnist-results",
                        "mount_path": "/results",
                    },
                    "s3": {
                        "name": "imagenet",
                        "kind": "data",
                        "type": "s3",
                        "bucket": "datasets",
                        "mount_path": "/data",
                    },
                },
            ),
        ),
        Field(
            "checkpoint_dir",
            ("string",),
            "Where learners write checkpoints (`CHECKPOINT_DIR`): a claim kept across attempts until the "
            "job is deleted (one per learner, or one shared), so a requeued or preempted job resumes "
            "from it.",
            example="/checkpoints",
            default="/checkpoints",
            max_length=MAX_PATH,
        ),
        Field(
            "max_runtime",
            ("integer", "string"),
            "The longest a learner may run: seconds, or a duration like `90m`, `2h`, `1d`, `1h30m`; stored "
            "as `max_runtime_seconds`. It is each pod's `activeDeadlineSeconds`: past it the job fails "
            "(`DeadlineExceeded`). The scheduler also uses it as the job's expected duration. Unset: no "
            "limit.",
            example="2h",
            minimum=1,
            maximum=MAX_RUNTIME_SECONDS,
            pattern=DURATION_TEXT,
            normalized="max_runtime_seconds",
            exclusive="max_runtime_seconds",
            units="seconds, or a duration with s, m, h, d",
        ),
        Field(
            "max_runtime_seconds",
            ("integer",),
            "`max_runtime` in seconds: its normalized form (give one or the other).",
            example=7200,
            minimum=1,
            maximum=MAX_RUNTIME_SECONDS,
            exclusive="max_runtime",
            units="seconds",
        ),
        Field(
            "retries",
            ("integer",),
            "How many times the job goes back to the queue after an infrastructure fault (node lost, pod "
            "evicted, launch failed) before it fails. User errors (non-zero exit, OOMKilled, past "
            "max_runtime) fail it at once; preemption and halts use none.",
            example=3,
            default=2,
            minimum=0,
            maximum=10,
        ),
        Field(
            "priority",
            ("integer",),
            "Order within the tenant's queue: higher runs first. Members may go up to the tenant policy's "
            "ceiling (`max_priority`, 0 unless raised); where the policy allows, a higher-priority job "
            "may preempt the tenant's lower ones.",
            example=0,
            default=0,
            minimum=-100,
            maximum=100,
        ),
        Field(
            "tuning",
            ("object",),
            "Opt in to the tuner (docs/tuning.md): thread pools sized to the CPU limit, and ranges of CPU "
            "and learner counts the tuner may move the running job within, by checkpoint-restart.",
            example={"threads": "auto", "cpu": [1, 4]},
            fields=(
                Field(
                    "threads",
                    ("string",),
                    "`auto`: every learner gets `OMP_NUM_THREADS`, `MKL_NUM_THREADS`, ... sized to its CPU "
                    "limit (rounded up), overriding `env`; `off`: left to you.",
                    example="auto",
                    default="auto",
                    enum=("auto", "off"),
                    null_ok=False,
                ),
                _pair(
                    "cpu",
                    Field(
                        "cores",
                        ("number", "string"),
                        "CPU, like `resources.cpu`.",
                        example=2,
                        pattern=CPU_TEXT,
                    ),
                    "The `[min, max]` CPU per learner the tuner may choose from (cores or millicores, like "
                    "`resources.cpu`); it must contain the job's own CPU. Unset: CPU is never changed.",
                    [1, 4],
                    normalized="cpu_millis",
                    exclusive="cpu_millis",
                ),
                _pair(
                    "cpu_millis",
                    Field(
                        "millicores",
                        ("integer",),
                        "Millicores.",
                        example=2000,
                        minimum=CPU_MILLIS_RANGE[0],
                        maximum=CPU_MILLIS_RANGE[1],
                    ),
                    "`tuning.cpu` in millicores: its normalized form (give one or the other).",
                    [500, 4000],
                    exclusive="cpu",
                ),
                _pair(
                    "learners",
                    Field(
                        "count", ("integer",), "A learner count.", example=1, minimum=1, maximum=MAX_LEARNERS
                    ),
                    "The `[min, max]` learner counts the tuner may choose from; it must contain the job's "
                    "own `learners`. Unset: the gang size is never changed.",
                    [1, 4],
                ),
            ),
        ),
        Field(
            "evaluation_metrics",
            ("object",),
            "How to read metrics from log lines in other shapes than the built-in ones (a JSON object, "
            "or `key=value` pairs, which need nothing). FfDL's `regex_extractor`: named captures of "
            "regular expressions become metrics, stored and charted on the job page.",
            example={"type": "regex_extractor", "groups": {"train": _METRIC_GROUP.example}},
            fields=(
                Field(
                    "type",
                    ("string",),
                    "`regex_extractor` (then `groups` is required), or another FfDL name (e.g. "
                    "`tensorboard`), kept but not acted on.",
                    example="regex_extractor",
                    required=True,
                    max_length=64,
                ),
                Field(
                    "in",
                    ("string",),
                    "FfDL's log file to read; accepted and kept, Trainyard reads the learners' standard "
                    "output.",
                    example="$JOB_STATE_DIR/logs/training-log.txt",
                    default="",
                    max_length=1024,
                ),
                Field(
                    "line_lookahead",
                    ("integer",),
                    "FfDL's lookahead; accepted and kept.",
                    example=4,
                    minimum=0,
                    maximum=100,
                ),
                Field("eventTypes", (), "FfDL's event types; accepted and ignored.", example=["ERROR"]),
                Field(
                    "event_types", (), "`eventTypes`, snake case; accepted and ignored.", example=["ERROR"]
                ),
                Field(
                    "groups",
                    ("object",),
                    "Named regular expressions (at most eight); required for `regex_extractor`.",
                    example={"train": _METRIC_GROUP.example},
                    values=_METRIC_GROUP,
                    key_pattern=GROUP_NAME,
                    max_entries=MAX_METRIC_GROUPS,
                    required_when=("type", "regex_extractor"),
                ),
            ),
        ),
        Field(
            "framework",
            ("object",),
            "The framework and version the image holds, shown on the job's page (an FfDL manifest's "
            "`framework` fills it).",
            example={"name": "pytorch", "version": "2.3.0"},
            fields=(
                Field(
                    "name", ("string",), "The framework.", example="pytorch", required=True, max_length=1024
                ),
                Field(
                    "version", ("string",), "Its version.", example="2.3.0", required=True, max_length=1024
                ),
            ),
        ),
    ),
)


def _split(path: str) -> list[str]:
    return [part for part in path.replace("[]", ".[]").split(".") if part]


def field_at(path: str) -> Field:
    """The field at a path like `resources.cpu`, `volumes[].bucket`, `env[].name` or
    `evaluation_metrics.groups.*.regex` (`[]` a list's items, `*` a mapping's values); "" is the spec."""
    current = SPEC
    for part in _split(path):
        if part == "[]" and current.items is not None:
            current = current.items
        elif part == "*" and current.values is not None:
            current = current.values
        else:
            current = current.child(part)
    return current


def keys(path: str = "") -> tuple[str, ...]:
    """The names of the object at `path` (common fields only for one with variants), in declared order:
    what the validator accepts there."""
    return tuple(f.name for f in field_at(path).fields)


def variant_keys(path: str) -> dict[str, tuple[str, ...]]:
    """For an object with variants (a volume), the extra names each variant accepts."""
    return {value: tuple(f.name for f in fields) for value, fields in field_at(path).variants}


def walk(root: Field = SPEC, path: str = "") -> Iterator[tuple[str, Field, str]]:
    """Every field under `root` with its path and, for a variant's field, the variant's value; depth first
    in declared order. Paths use `[]` for list items and `*` for mapping values."""
    children: list[tuple[str, Field, str]] = [(f.name, f, "") for f in root.fields]
    children += [(f.name, f, value) for value, fs in root.variants for f in fs]
    for name, child, variant in children:
        where = f"{path}.{name}" if path else name
        yield where, child, variant
        yield from walk(child, where)
    for node, where in ((root.items, f"{path}[]"), (root.values, f"{path}.*")):
        if node is not None and node.fields:
            yield where, node, ""
            yield from walk(node, where)

"""The nested parts of the spec's declaration: a learner's resources, a volume (common fields and each
type's), an environment variable's value, a metrics group."""

from __future__ import annotations

from jobs.core.spec.schema.field import (
    BUCKET,
    CPU_TEXT,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    LABEL_VALUE,
    MAX_METRIC_PATTERN,
    MAX_PATH,
    MEMORY_TEXT,
    SECRET_ID,
    URL,
    Field,
)
from jobs.core.spec.values import (
    CPU_MILLIS_RANGE,
    MAX_ENV_VALUE,
    MAX_GPUS_PER_LEARNER,
    MEMORY_MIB_RANGE,
)

RESOURCES = (
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

VOLUME_COMMON = (
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
VOLUME_VARIANTS = (
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
                "The name of a PersistentVolumeClaim in the tenant's namespace, mounted by every learner. Not one "
                "the platform made (`ty-...`, a job's checkpoints) unless the tenant's policy shares them "
                "(`job_claims`).",
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
                "The S3 endpoint (http:// or https://, no credentials in it); unset means AWS. Its host must "
                "resolve only to public addresses (checked at submit and at launch) unless the tenant's policy "
                "lists it (`datastore_hosts`, which also limits the hosts).",
                example="https://s3.example.com",
                max_length=2048,
                pattern=URL,
            ),
            Field(
                "secret",
                ("string",),
                "The name of one of the tenant's data-store secrets (created, rotated and deleted by its "
                "owners on the tenant page or at `/api/v1/tenants/<slug>/secrets/`; write-only): at each "
                "launch its values become the attempt's data-store Secret, learners get them as "
                "`<STORE>_ACCESS_KEY_ID` and `<STORE>_SECRET_ACCESS_KEY`, and the data download uses them. A "
                "name the tenant has no secret for is a field error at submit and dry run. In an FfDL "
                "manifest it is the data store's id, whose inline `connection` credentials are kept apart "
                "from the spec, sealed. Unset: the download uses boto3's default credential chain.",
                example="team-datasets",
                pattern=SECRET_ID,
            ),
        ),
    ),
)

ENV_VALUE = Field(
    "value",
    ("string", "integer"),
    "The value (whole numbers are turned into text; quote other numbers and booleans).",
    example="WARN",
    default="",
    max_length=MAX_ENV_VALUE,
    null_ok=False,
)

METRIC_GROUP = Field(
    "group",
    ("object",),
    "A named regular expression; each of its lines' named captures becomes a metric.",
    example={"regex": r"Iteration (?P<iteration>\d+), loss = (?P<loss>[0-9.]+)", "values": ["loss"]},
    fields=(
        Field(
            "regex",
            ("string",),
            "A regular expression with named captures (`(?P<loss>[0-9.]+)`), matched against every line "
            "of the learners' standard output. Runs on RE2 (linear time): no backreferences or lookaround, and "
            "a pattern too large once compiled is refused.",
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

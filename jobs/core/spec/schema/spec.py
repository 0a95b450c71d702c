"""The declaration of a whole Trainyard spec: its top-level fields, in the order the validator lists them."""

from __future__ import annotations

from jobs.core.spec.labels import (
    MAX_EXPERIMENT,
    MAX_HYPERPARAMETER_TEXT,
    MAX_HYPERPARAMETERS,
    MAX_TAG,
    MAX_TAGS,
)
from jobs.core.spec.schema.field import (
    CPU_TEXT,
    DURATION_TEXT,
    ENV_NAME,
    GROUP_NAME,
    IMAGE,
    MAX_METRIC_GROUPS,
    MAX_PATH,
    Field,
    pair,
)
from jobs.core.spec.schema.parts import ENV_VALUE, METRIC_GROUP, RESOURCES, VOLUME_COMMON, VOLUME_VARIANTS
from jobs.core.spec.values import (
    CPU_MILLIS_RANGE,
    MAX_ENV_ENTRIES,
    MAX_LEARNERS,
    MAX_RUNTIME_SECONDS,
    MAX_VOLUMES,
)

TAG = r"[A-Za-z0-9_][A-Za-z0-9_.:/+=@-]*"
HYPERPARAMETER_NAME = r"[A-Za-z_][A-Za-z0-9_]*"

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
            fields=RESOURCES,
        ),
        Field(
            "env",
            ("object", "array"),
            "Environment variables of every learner: a mapping `NAME: value` or a list of `{name, value}`. "
            "Names the platform sets itself (`RANK`, `DATA_DIR`, ...) are refused; thread variables "
            "(`OMP_NUM_THREADS`, ...) are overridden while `tuning.threads` is `auto`.",
            example={"NCCL_DEBUG": "WARN"},
            default={},
            values=ENV_VALUE,
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
                    ENV_VALUE,
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
                fields=VOLUME_COMMON,
                variants=VOLUME_VARIANTS,
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
            "from it. Not a system path, nor a folder the platform mounts itself (scratch, `/dev/shm`, "
            "`MODEL_DIR`).",
            example="/checkpoints",
            default="/checkpoints",
            max_length=MAX_PATH,
        ),
        Field(
            "max_runtime",
            ("integer", "string"),
            "The longest a learner may run: seconds, or a duration like `90m`, `2h`, `1d`, `1h30m`; stored "
            "as `max_runtime_seconds`, counted from each learner pod's start. At it the job is stopped as a "
            "halt stops it: SIGTERM, the grace period to save (RESULT_DIR is still uploaded), then it fails "
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
            "How many times a fault of the job's own that may pass sends it back to the queue before it "
            "fails. No fault uses one today: the job's own failures (a non-zero exit, OOMKilled, past "
            "max_runtime, an image that never pulls) fail it at once, and disruptions by the cluster never "
            "use one: an eviction (Eviction API, drain or "
            "kubelet), preemption by the scheduler, node loss, pod GC, a pod deleted by someone else, a "
            "kubelet admission rejection (`UnexpectedAdmissionError`, `OutOfnvidia.com/gpu`) or webhook and "
            "API server errors at launch send it back to the queue within the installation's "
            "infrastructure budget (`INFRA_RETRY_LIMIT` per job, then `DisruptionBudgetExhausted`); the "
            "platform's own preemption, halts and requeues use neither.",
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
                pair(
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
                pair(
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
                pair(
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
            example={"type": "regex_extractor", "groups": {"train": METRIC_GROUP.example}},
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
                    example={"train": METRIC_GROUP.example},
                    values=METRIC_GROUP,
                    key_pattern=GROUP_NAME,
                    max_entries=MAX_METRIC_GROUPS,
                    required_when=("type", "regex_extractor"),
                ),
            ),
        ),
        Field(
            "experiment",
            ("string",),
            "The experiment the job belongs to: the jobs list filters by it and jobs of one experiment are "
            "compared together. One line; may be changed after submit (the job's page, "
            "`PATCH /api/v1/jobs/<id>/`).",
            example="resnet-sweep",
            default="",
            max_length=MAX_EXPERIMENT,
        ),
        Field(
            "tags",
            ("array", "string"),
            "Short labels to find and group runs by (the jobs list's `tag` filter); duplicates are dropped, "
            "a comma-separated string is read as a list. May be changed after submit.",
            example=["baseline", "lr-search"],
            default=[],
            max_items=MAX_TAGS,
            items=Field(
                "tag",
                ("string",),
                "One label: letters, digits and `. : / + = @ - _`, no spaces.",
                example="baseline",
                max_length=MAX_TAG,
                pattern=TAG,
            ),
        ),
        Field(
            "hyperparameters",
            ("object",),
            "The run's hyperparameters, shown on its page and in comparisons. Each reaches the command as "
            "`HP_<NAME>` (upper case; booleans as `true`/`false`), and all of them as JSON in "
            "`TRAINYARD_HYPERPARAMETERS`.",
            example={"lr": 0.001, "batch_size": 64, "optimizer": "adam"},
            default={},
            values=Field(
                "value",
                ("number", "string", "boolean"),
                "A number, a short text or a boolean.",
                example=0.001,
                max_length=MAX_HYPERPARAMETER_TEXT,
                null_ok=False,
            ),
            key_pattern=HYPERPARAMETER_NAME,
            max_entries=MAX_HYPERPARAMETERS,
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

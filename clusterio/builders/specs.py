"""Plain, typed inputs of the builders: what the rest of the platform tells clusterio to create."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from clusterio.names import SERVICE_ACCOUNT_NAME, JobId

VolumeKind = Literal["host", "pvc", "s3"]
ThreadsMode = Literal["auto", "off"]


def _positive(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")


def _non_negative(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True)
class TenantLimits:
    """A tenant's hard caps, enforced by its namespace's ResourceQuota (requests and limits alike)."""

    gpus: int
    cpu_millis: int
    memory_mib: int
    max_pods: int | None = None

    def __post_init__(self) -> None:
        _non_negative(self.gpus, "gpus")
        _non_negative(self.cpu_millis, "cpu_millis")
        _non_negative(self.memory_mib, "memory_mib")
        if self.max_pods is not None:
            _non_negative(self.max_pods, "max_pods")


@dataclass(frozen=True)
class VolumeSpec:
    """One user volume mounted into every learner.

    `host` mounts `host_path` from the node, `pvc` mounts the claim `claim_name`; `s3` is an emptyDir
    placeholder at `mount_path` for now (the bucket is not fetched into it by these builders).
    """

    name: str
    kind: VolumeKind
    mount_path: str
    read_only: bool = False
    host_path: str | None = None
    claim_name: str | None = None
    bucket: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("volume name must not be empty")
        if not self.mount_path.startswith("/"):
            raise ValueError(f"mount_path must be absolute, got {self.mount_path!r}")
        required = {"host": self.host_path, "pvc": self.claim_name, "s3": self.bucket}
        if self.kind not in required:
            raise ValueError(f"unknown volume kind {self.kind!r}")
        if not required[self.kind]:
            source = {"host": "host_path", "pvc": "claim_name", "s3": "bucket"}[self.kind]
            raise ValueError(f"a {self.kind} volume needs {source}")


@dataclass(frozen=True)
class JobPodsSpec:
    """Everything needed to build the pods, headless Service and env of one attempt of a job.

    Each learner is one pod running one process (`LOCAL_WORLD_SIZE` 1). `datastore_secret` names a
    Secret built by `make_datastore_secret`; `datastore_keys` lists its keys (`datastore_secret_keys`),
    each exposed as an env var of the same name through `secretKeyRef`, never as a literal.
    `master_addr` overrides the DNS name of learner 0 for clusters without pod DNS (kubesim).
    `checkpoint_claim` mounts a PVC at `checkpoint_dir` (at `checkpoint_sub_path` inside it, e.g. one
    per job so every attempt resumes from the same place); `checkpoint_host_path` mounts a node folder
    instead (single-node clusters and kubesim); without either the directory is an emptyDir.
    """

    job_id: JobId
    attempt: int
    tenant: str
    namespace: str
    image: str
    command: Sequence[str]
    learners: int
    gpus: int
    cpu_millis: int
    memory_mib: int
    checkpoint_dir: str
    data_dir: str
    result_dir: str
    gpu_type: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    volumes: Sequence[VolumeSpec] = ()
    datastore_secret: str | None = None
    datastore_keys: Sequence[str] = ()
    threads: ThreadsMode = "auto"
    master_port: int = 29500
    master_addr: str | None = None
    max_runtime_seconds: int | None = None
    service_account: str = SERVICE_ACCOUNT_NAME
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    checkpoint_claim: str | None = None
    checkpoint_sub_path: str | None = None
    checkpoint_host_path: str | None = None
    scratch_dir: str = "/scratch"
    run_as_user: int = 1000

    def __post_init__(self) -> None:
        _non_negative(self.attempt, "attempt")
        _positive(self.learners, "learners")
        _non_negative(self.gpus, "gpus")
        _positive(self.cpu_millis, "cpu_millis")
        _positive(self.memory_mib, "memory_mib")
        _positive(self.master_port, "master_port")
        _positive(self.run_as_user, "run_as_user (runAsNonRoot forbids 0)")
        if self.master_port > 65535:
            raise ValueError(f"master_port must be at most 65535, got {self.master_port}")
        if self.max_runtime_seconds is not None:
            _positive(self.max_runtime_seconds, "max_runtime_seconds")
        if self.threads not in ("auto", "off"):
            raise ValueError(f"threads must be 'auto' or 'off', got {self.threads!r}")
        if not self.image:
            raise ValueError("image must not be empty")
        if isinstance(self.command, str):
            raise ValueError("command must be a list of arguments, not a string")
        if self.checkpoint_claim and self.checkpoint_host_path:
            raise ValueError("give checkpoint_claim or checkpoint_host_path, not both")
        if bool(self.datastore_keys) and not self.datastore_secret:
            raise ValueError("datastore_keys need datastore_secret")
        for path in (self.checkpoint_dir, self.scratch_dir):
            if not path.startswith("/"):
                raise ValueError(f"container paths must be absolute, got {path!r}")

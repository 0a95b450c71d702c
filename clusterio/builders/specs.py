"""Plain, typed inputs of the builders: what the rest of the platform tells clusterio to create."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from clusterio.names import SERVICE_ACCOUNT_NAME, JobId
from clusterio.taints import DEFAULT_GPU_TOLERATIONS, Toleration

VolumeKind = Literal["host", "pvc", "s3"]
ThreadsMode = Literal["auto", "off"]
AccessMode = Literal["ReadWriteOnce", "ReadWriteMany", "ReadWriteOncePod"]

DEFAULT_MODEL_DIR = "/trainyard/model"
DEFAULT_CODE_MAX_UNPACKED = 1 << 30
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _positive(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")


def _non_negative(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True)
class TenantLimits:
    """A tenant's hard caps, enforced by its namespace's ResourceQuota (requests and limits alike); with
    `storage_gib` and `max_claims` the storage its PersistentVolumeClaims request and their count too."""

    gpus: int
    cpu_millis: int
    memory_mib: int
    max_pods: int | None = None
    storage_gib: int | None = None
    max_claims: int | None = None

    def __post_init__(self) -> None:
        _non_negative(self.gpus, "gpus")
        _non_negative(self.cpu_millis, "cpu_millis")
        _non_negative(self.memory_mib, "memory_mib")
        for name in ("max_pods", "storage_gib", "max_claims"):
            if getattr(self, name) is not None:
                _non_negative(getattr(self, name), name)


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
class S3Fetch:
    """One S3 download the `fetch` init container performs before the learner starts.

    Every object under `prefix` of `bucket` lands in `target`, keeping its key after the prefix.
    The credentials are read from the env vars `access_key_env` / `secret_key_env`, which must be
    data-store Secret keys of the pod (`JobPodsSpec.datastore_keys`); without them boto3's default
    chain applies (public buckets, node roles). `target` must lie in a writable volume of the pod.
    """

    bucket: str
    target: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    access_key_env: str | None = None
    secret_key_env: str | None = None

    def __post_init__(self) -> None:
        if not self.bucket:
            raise ValueError("an S3 fetch needs a bucket")
        if not self.target.startswith("/"):
            raise ValueError(f"S3 fetch target must be absolute, got {self.target!r}")
        if bool(self.access_key_env) != bool(self.secret_key_env):
            raise ValueError("give both access_key_env and secret_key_env, or neither")
        for env_name in (self.access_key_env, self.secret_key_env):
            if env_name and not _ENV_NAME_RE.match(env_name):
                raise ValueError(f"not an env var name: {env_name!r}")

    def as_json(self) -> dict[str, str]:
        """The entry of TRAINYARD_S3_FETCH (docs/artifacts.md) for this download."""
        entry = {
            "endpoint": self.endpoint or "",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "target": self.target,
            "access_key_env": self.access_key_env or "",
            "secret_key_env": self.secret_key_env or "",
        }
        if self.region:
            entry["region"] = self.region
        return entry


@dataclass(frozen=True)
class ArtifactSpec:
    """How one attempt's code gets into its learners and its results get out (docs/artifacts.md).

    `code_url` (with `code_sha256`) and `s3_fetch` add the `fetch` init container, run from
    `fetch_image`; `results_url` wraps the command in the launcher. The attempt's token is not part
    of the spec (a spec may be logged): `Cluster.launch` stores it in the attempt's Secret and the
    pods read it from there. `fetch_cpu_millis`/`fetch_memory_mib` are capped at the learner's own,
    so the init container never raises the pod's footprint; `python` runs both programs.
    `tensorboard_url` (with `results_url`) has the launcher send the event files under `tensorboard_dir`
    (the spec's `evaluation_metrics.in`, resolved in the pod) every `tensorboard_interval` seconds.
    """

    code_url: str | None = None
    code_sha256: str | None = None
    results_url: str | None = None
    fetch_image: str = ""
    model_dir: str = DEFAULT_MODEL_DIR
    s3_fetch: tuple[S3Fetch, ...] = ()
    code_max_unpacked: int = DEFAULT_CODE_MAX_UNPACKED
    fetch_cpu_millis: int = 500
    fetch_memory_mib: int = 512
    python: str = "python3"
    tensorboard_url: str | None = None
    tensorboard_dir: str = ""
    tensorboard_interval: float = 5.0

    def __post_init__(self) -> None:
        if self.tensorboard_url and not self.results_url:
            raise ValueError("tensorboard_url needs results_url (the launcher sends both)")
        if not self.tensorboard_interval > 0:
            raise ValueError("tensorboard_interval must be positive")
        if bool(self.code_url) != bool(self.code_sha256):
            raise ValueError("code_url and code_sha256 go together")
        if self.code_sha256 and not _SHA256_RE.match(self.code_sha256):
            raise ValueError("code_sha256 must be 64 lower-case hex digits")
        if not self.model_dir.startswith("/") or self.model_dir.rstrip("/") == "":
            raise ValueError(f"model_dir must be an absolute folder, got {self.model_dir!r}")
        if not isinstance(self.s3_fetch, tuple) or not all(isinstance(f, S3Fetch) for f in self.s3_fetch):
            raise ValueError("s3_fetch must be a tuple of S3Fetch")
        if self.needs_fetch and not self.fetch_image:
            raise ValueError("fetching code or S3 data needs fetch_image")
        if not self.python:
            raise ValueError("python must not be empty")
        _positive(self.code_max_unpacked, "code_max_unpacked")
        _positive(self.fetch_cpu_millis, "fetch_cpu_millis")
        _positive(self.fetch_memory_mib, "fetch_memory_mib")

    @property
    def needs_fetch(self) -> bool:
        """Whether the pod gets the `fetch` init container."""
        return bool(self.code_url or self.s3_fetch)


@dataclass(frozen=True)
class JobPodsSpec:
    """Everything needed to build the pods, headless Service and env of one attempt of a job.

    Each learner is one pod running one process (`LOCAL_WORLD_SIZE` 1). `datastore_secret` names a
    Secret built by `make_datastore_secret`; `datastore_keys` lists its keys (`datastore_secret_keys`),
    each exposed as an env var of the same name through `secretKeyRef`, never as a literal.
    `master_addr` overrides the DNS name of learner 0 for clusters without pod DNS (kubesim).
    `checkpoint_claim` mounts a PVC at `checkpoint_dir` in every learner (at `checkpoint_sub_path` inside
    it, e.g. one per job so every attempt resumes from the same place: its class must offer ReadWriteMany
    for several learners); `checkpoint_learner_claims` instead gives each learner a claim of its own
    (learner i mounts the i-th: ReadWriteOnce is enough). With `checkpoint_claim_size` set,
    `Cluster.launch` also creates those claims (`make_job_checkpoint_pvcs`, kept across attempts until
    `Cluster.delete_checkpoint_claims`), otherwise they must exist. `checkpoint_host_path` mounts a node
    folder instead (single-node clusters and kubesim); without any the directory is an emptyDir.
    `artifacts` adds code delivery and results upload (`ArtifactSpec`). `gpu_products` are the nodes'
    GPU product labels that `gpu_type` stands for (resolved by the caller against the cluster's nodes);
    the pods require one of them.
    `gpu_tolerations` are what a learner that asks for GPUs tolerates (the GPU nodes' taints), and what
    admission assumes it tolerates. `node_names` binds learner i to node `node_names[i]` (required node
    affinity on the node's name: admission chose the nodes, the kube-scheduler still checks the rest);
    None leaves the choice to the scheduler. `node_pool` (label key, value) keeps the learners on the nodes of
    one pool (those carrying that label), when admission placed them on nodes the pool has yet to add.
    `platform_env` are further variables the platform sets (such as TRAINYARD_HYPERPARAMETERS): added after
    its own, before the user's `env`, and like its own they win over a user entry of the same name.
    `pod_overrides` are the operator's overrides documents (global, then the tenant's), checked by the
    platform and applied last (`clusterio.overrides.apply_pod_overrides`).
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
    gpu_products: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    volumes: Sequence[VolumeSpec] = ()
    datastore_secret: str | None = None
    datastore_keys: Sequence[str] = ()
    # The attempt's image pull Secret (`make_pull_secret`), named in the pods' imagePullSecrets; None: none.
    image_pull_secret: str | None = None
    threads: ThreadsMode = "auto"
    master_port: int = 29500
    master_addr: str | None = None
    # The pods' activeDeadlineSeconds: past it (from the pod's startTime) the kubelet stops the pod and fails
    # it, DeadlineExceeded. The platform stops a job itself at its max_runtime and sets this a little later,
    # as a backstop for when it cannot (jobs.cluster.podspec).
    active_deadline_seconds: int | None = None
    service_account: str = SERVICE_ACCOUNT_NAME
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    checkpoint_claim: str | None = None
    checkpoint_sub_path: str | None = None
    checkpoint_host_path: str | None = None
    scratch_dir: str = "/scratch"
    # The learners' uid (and gid and fsGroup); None leaves all three to the namespace, for clusters that
    # assign each namespace a uid range and refuse any other (OpenShift's restricted SCC).
    run_as_user: int | None = 1000
    artifacts: ArtifactSpec | None = None
    checkpoint_claim_size: str | None = None
    checkpoint_storage_class: str | None = None
    checkpoint_access_modes: tuple[AccessMode, ...] = ("ReadWriteOnce",)
    checkpoint_learner_claims: tuple[str, ...] = ()
    # How long a learner stays bound to a NotReady/unreachable node before the taint manager deletes it
    # (its NoExecute tolerationSeconds); None keeps the cluster's default (300 s on most clusters).
    node_lost_toleration_seconds: int | None = None
    # The pod's terminationGracePeriodSeconds: how long a learner has from SIGTERM (an eviction, a cancel,
    # a drain) to save a checkpoint and exit before SIGKILL.
    termination_grace_seconds: int = 30
    gpu_tolerations: tuple[Toleration, ...] = DEFAULT_GPU_TOLERATIONS
    node_names: tuple[str, ...] | None = None
    node_pool: tuple[str, str] | None = None
    platform_env: Mapping[str, str] = field(default_factory=dict)
    # Operator overrides (clusterio.overrides), applied in order to every learner pod after the platform built it.
    pod_overrides: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _non_negative(self.attempt, "attempt")
        _non_negative(self.termination_grace_seconds, "termination_grace_seconds")
        if not isinstance(self.gpu_tolerations, tuple) or not all(
            isinstance(t, Toleration) for t in self.gpu_tolerations
        ):
            raise ValueError("gpu_tolerations must be a tuple of Toleration")
        if self.node_names is not None:
            if isinstance(self.node_names, str) or len(self.node_names) != self.learners:
                raise ValueError(f"node_names must name one node per learner ({self.learners})")
            if not all(isinstance(n, str) and n for n in self.node_names):
                raise ValueError("node_names must be non-empty node names")
        if self.node_lost_toleration_seconds is not None:
            _non_negative(self.node_lost_toleration_seconds, "node_lost_toleration_seconds")
        _positive(self.learners, "learners")
        _non_negative(self.gpus, "gpus")
        _positive(self.cpu_millis, "cpu_millis")
        _positive(self.memory_mib, "memory_mib")
        _positive(self.master_port, "master_port")
        if self.run_as_user is not None:
            _positive(self.run_as_user, "run_as_user (runAsNonRoot forbids 0)")
        if self.master_port > 65535:
            raise ValueError(f"master_port must be at most 65535, got {self.master_port}")
        if self.active_deadline_seconds is not None:
            _positive(self.active_deadline_seconds, "active_deadline_seconds")
        if self.threads not in ("auto", "off"):
            raise ValueError(f"threads must be 'auto' or 'off', got {self.threads!r}")
        if not self.image:
            raise ValueError("image must not be empty")
        if isinstance(self.command, str):
            raise ValueError("command must be a list of arguments, not a string")
        given = [self.checkpoint_claim, self.checkpoint_learner_claims, self.checkpoint_host_path]
        if sum(bool(g) for g in given) > 1:
            raise ValueError(
                "give one of checkpoint_claim, checkpoint_learner_claims or checkpoint_host_path"
            )
        if self.checkpoint_learner_claims and len(self.checkpoint_learner_claims) != self.learners:
            raise ValueError(
                f"checkpoint_learner_claims names {len(self.checkpoint_learner_claims)} claims "
                f"for {self.learners} learners"
            )
        if bool(self.datastore_keys) and not self.datastore_secret:
            raise ValueError("datastore_keys need datastore_secret")
        if self.checkpoint_claim_size and not self.checkpoint_claims:
            raise ValueError("checkpoint_claim_size needs checkpoint_claim or checkpoint_learner_claims")
        if self.artifacts is not None:
            for fetch in self.artifacts.s3_fetch:
                for env_name in (fetch.access_key_env, fetch.secret_key_env):
                    if env_name and env_name not in self.datastore_keys:
                        raise ValueError(f"S3 fetch credential {env_name} is not one of datastore_keys")
        for path in (self.checkpoint_dir, self.scratch_dir):
            if not path.startswith("/"):
                raise ValueError(f"container paths must be absolute, got {path!r}")

    @property
    def checkpoint_claims(self) -> tuple[str, ...]:
        """Every checkpoint claim the job's learners mount (the shared one, or one per learner)."""
        if self.checkpoint_claim:
            return (self.checkpoint_claim,)
        return tuple(self.checkpoint_learner_claims)

    def checkpoint_claim_of(self, index: int) -> str | None:
        """The claim learner `index` mounts at `checkpoint_dir` (None: no claim)."""
        if self.checkpoint_learner_claims:
            return self.checkpoint_learner_claims[index]
        return self.checkpoint_claim

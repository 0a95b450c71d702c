"""Builders for one attempt of a job: learner pods, their headless Service and data-store Secret."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from kubernetes import client

from clusterio import names
from clusterio.builders.artifacts import (
    TOKEN_ENV,
    learner_artifact_env,
    learner_command,
    make_fetch_container,
    token_env,
)
from clusterio.builders.quantities import cpu_quantity, memory_quantity
from clusterio.builders.specs import JobPodsSpec
from clusterio.builders.tenant import GPU_RESOURCE
from clusterio.builders.volumes import fetch_mounts, learner_volumes
from clusterio.overrides import apply_pod_overrides
from clusterio.taints import learner_tolerations
from clusterio.threads import THREAD_ENV_NAMES, thread_env

CONTAINER_NAME = "learner"
RENDEZVOUS_PORT_NAME = "rendezvous"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GKE_ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
# Where a node's GPU product is read, first label first: NVIDIA GPU feature discovery's, else GKE's.
GPU_PRODUCT_LABELS = (GPU_PRODUCT_LABEL, GKE_ACCELERATOR_LABEL)

# torchrun's contract (torch.distributed env:// init) plus the PET_* variables torchrun reads as its
# own arguments, so `torchrun --nproc-per-node=N train.py` inside a learner needs no flags.
TORCHRUN_ENV_NAMES: tuple[str, ...] = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
# FfDL's learner contract, kept so FfDL training scripts run unchanged (TRAINING_ID is FfDL's JOB_ID).
FFDL_ENV_NAMES: tuple[str, ...] = (
    "DATA_DIR",
    "RESULT_DIR",
    "CHECKPOINT_DIR",
    "JOB_ID",
    "TRAINING_ID",
    "LEARNER_ID",
    "NUM_LEARNERS",
)
RESERVED_ENV_PREFIX = "TRAINYARD_"
_ENV_NAME_BAD = re.compile(r"[^A-Z0-9_]")


RESERVED_ENV_PREFIXES = (RESERVED_ENV_PREFIX, "TORCHELASTIC_")
GPU_RUNTIME_ENV_NAMES = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")


def reserved_env_reason(name: str, threads: str = "auto") -> str | None:
    """Why `name` belongs to the platform (what it sets there instead), or None if a user may set it.

    Thread variables are the platform's only while threads are managed (`threads="auto"`); with
    `"off"` the user may set them. Job validation calls this to refuse such names at submit.
    """
    if name in TORCHRUN_ENV_NAMES:
        return "the platform sets it for torch.distributed's rendezvous (master, rank and world size)"
    if name in FFDL_ENV_NAMES:
        return (
            "the platform sets it (the learner contract: DATA_DIR, RESULT_DIR, CHECKPOINT_DIR, "
            "JOB_ID/TRAINING_ID, LEARNER_ID, NUM_LEARNERS); use those values"
        )
    if name == "MODEL_DIR":
        return "the platform sets it to the folder the job's code is unpacked in"
    if name.startswith(RESERVED_ENV_PREFIXES):
        return f"names starting with {' or '.join(RESERVED_ENV_PREFIXES)} belong to the platform"
    if name in GPU_RUNTIME_ENV_NAMES:
        return "the GPU runtime sets it from the GPUs the job is given"
    if threads == "auto" and name in THREAD_ENV_NAMES:
        return (
            "the platform sizes thread pools from the job's CPU (tuning.threads: auto); "
            "set tuning.threads: off to set it yourself"
        )
    return None


def is_reserved_env_name(name: str, threads: str = "auto") -> bool:
    """Tell whether `name` belongs to the platform, so a user's env entry of that name is ignored."""
    return reserved_env_reason(name, threads) is not None


def platform_mounts(spec: JobPodsSpec) -> dict[str, str]:
    """Where the platform mounts its own volumes in a learner (path -> volume name: scratch, dshm,
    checkpoint, model), which no user volume may take. RESULT_DIR's fallback folder is not listed: a
    user's results volume goes there."""
    artifacts = replace(spec.artifacts, s3_fetch=()) if spec.artifacts is not None else None
    pod = make_learner_pod(replace(spec, volumes=(), artifacts=artifacts), 0)
    assert pod.spec is not None
    container = pod.spec.containers[0]
    return {
        mount.mount_path.rstrip("/") or "/": mount.name
        for mount in container.volume_mounts or []
        if mount.name != "results"
    }


def datastore_env_name(store_id: str, key: str) -> str:
    """Name the env var (and Secret key) of one data-store credential, e.g. `MYSTORE_ACCESS_KEY_ID`.

    Upper-cased, anything but letters, digits and "_" becomes "_", and a leading digit gets a "_",
    so the result is a valid C identifier usable both as a Secret key and an env name.
    """
    name = _ENV_NAME_BAD.sub("_", f"{store_id}_{key}".upper())
    return f"_{name}" if name[0].isdigit() else name


def datastore_secret_keys(credentials: Mapping[str, Mapping[str, str]]) -> tuple[str, ...]:
    """List, sorted, the Secret keys `make_datastore_secret` creates for `credentials`.

    Pass the result as `JobPodsSpec.datastore_keys` so the pods reference exactly those keys.
    Raises ValueError when two credentials map to one name or a name is reserved by the platform.
    """
    keys: dict[str, tuple[str, str]] = {}
    for store_id, fields in credentials.items():
        for key in fields:
            env_name = datastore_env_name(store_id, key)
            if env_name in keys:
                raise ValueError(f"credentials {keys[env_name]} and {(store_id, key)} both map to {env_name}")
            if is_reserved_env_name(env_name):
                raise ValueError(f"credential {(store_id, key)} maps to the platform's {env_name}")
            keys[env_name] = (store_id, key)
    return tuple(sorted(keys))


def make_datastore_secret(
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    credentials: Mapping[str, Mapping[str, str]],
    artifact_token: str | None = None,
) -> client.V1Secret:
    """Build the Opaque Secret holding one attempt's data-store credentials, keyed by env name.

    `credentials` maps a store id to its fields (`{"s3": {"access_key_id": ...}}`); `artifact_token`,
    when given, is stored under TRAINYARD_ARTIFACT_TOKEN. The pods read the keys through
    `secretKeyRef`, so no credential or token is ever written into a pod spec.
    """
    datastore_secret_keys(credentials)
    string_data = {
        datastore_env_name(store_id, key): value
        for store_id, fields in credentials.items()
        for key, value in fields.items()
    }
    if artifact_token:
        string_data[TOKEN_ENV] = artifact_token
    return client.V1Secret(
        api_version="v1",
        kind="Secret",
        type="Opaque",
        metadata=client.V1ObjectMeta(
            name=name, namespace=namespace, labels={**labels, names.LABEL_MANAGED_BY: names.MANAGED_BY}
        ),
        string_data=dict(sorted(string_data.items())),
    )


def master_address(spec: JobPodsSpec) -> str:
    """Return where learners rendezvous: `spec.master_addr`, or learner 0's stable DNS name.

    `<pod>.<svc>.<ns>.svc` resolves through the pod's DNS search path on any cluster domain,
    because the pod sets hostname and subdomain and the headless Service publishes not-ready pods.
    """
    if spec.master_addr:
        return spec.master_addr
    pod = names.learner_pod_name(spec.job_id, spec.attempt, 0)
    return f"{pod}.{names.service_name(spec.job_id, spec.attempt)}.{spec.namespace}.svc"


def learner_env(spec: JobPodsSpec, index: int) -> list[client.V1EnvVar]:
    """Build learner `index`'s environment: platform variables first, then the user's.

    Order: torchrun, FfDL, Trainyard, thread sizing (when managed), artifact variables (MODEL_DIR,
    results URL), the caller's `platform_env` (never over the names before it), then the token's secret
    reference, data-store secret references, then user entries whose names are not reserved; platform
    values always win.
    """
    master = master_address(spec)
    platform = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(spec.master_port),
        "WORLD_SIZE": str(spec.learners),
        "RANK": str(index),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": str(index),
        "PET_NNODES": str(spec.learners),
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(spec.master_port),
        "DATA_DIR": spec.data_dir,
        "RESULT_DIR": spec.result_dir,
        "CHECKPOINT_DIR": spec.checkpoint_dir,
        "JOB_ID": str(spec.job_id),
        "TRAINING_ID": str(spec.job_id),
        "LEARNER_ID": str(index + 1),
        "NUM_LEARNERS": str(spec.learners),
        "TRAINYARD_ATTEMPT": str(spec.attempt),
        "TRAINYARD_SCRATCH_DIR": spec.scratch_dir,
    }
    if spec.threads == "auto":
        platform.update(thread_env(spec.cpu_millis))
    if spec.artifacts is not None:
        platform.update(learner_artifact_env(spec.artifacts, index))
    platform.update({key: value for key, value in spec.platform_env.items() if key not in platform})
    env = [client.V1EnvVar(name=key, value=value) for key, value in platform.items()]
    if spec.artifacts is not None:
        env.append(token_env(spec))
    for key in spec.datastore_keys:
        if key in platform:
            continue
        env.append(
            client.V1EnvVar(
                name=key,
                value_from=client.V1EnvVarSource(
                    secret_key_ref=client.V1SecretKeySelector(
                        name=spec.datastore_secret, key=key, optional=False
                    )
                ),
            )
        )
    taken = set(platform) | set(spec.datastore_keys)
    for key, value in spec.env.items():
        if key in taken or is_reserved_env_name(key, spec.threads):
            continue
        env.append(client.V1EnvVar(name=key, value=value))
    return env


def _resources(spec: JobPodsSpec) -> client.V1ResourceRequirements:
    amounts = {"cpu": cpu_quantity(spec.cpu_millis), "memory": memory_quantity(spec.memory_mib)}
    if spec.gpus > 0:
        amounts[GPU_RESOURCE] = str(spec.gpus)
    return client.V1ResourceRequirements(requests=dict(amounts), limits=dict(amounts))


def gpu_product(labels: Mapping[str, str]) -> str | None:
    """A node's GPU product from its labels (GPU feature discovery's, else GKE's), None without one."""
    return next((labels[key] for key in GPU_PRODUCT_LABELS if labels.get(key)), None)


def _labels(spec: JobPodsSpec, index: int) -> dict[str, str]:
    labels = {key: names.label_value(value) for key, value in spec.extra_labels.items()}
    labels.update(names.learner_labels(spec.tenant, spec.job_id, spec.attempt, index))
    return labels


def _security_context(spec: JobPodsSpec) -> client.V1SecurityContext:
    return client.V1SecurityContext(
        run_as_non_root=True,
        run_as_user=spec.run_as_user,
        allow_privilege_escalation=False,
        read_only_root_filesystem=False,
        capabilities=client.V1Capabilities(drop=["ALL"]),
        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
    )


def _node_affinity(spec: JobPodsSpec, index: int) -> client.V1Affinity | None:
    """Required node affinity for learner `index`, or None when nothing is required.

    * The GPU product, when `gpu_type` is set: a node whose product label (either one) is one of
      `spec.gpu_products`, the cluster's labels of the job's GPU type (the spec's text when none is known,
      so the pod waits as Unschedulable). One term per label key, ORed, so a GKE node with only its
      accelerator label matches as a GPU-feature-discovery node does.
    * The node admission chose, when `node_names` is set: its name, as the DaemonSet controller binds its
      pods (the pod goes there or stays Pending; the kube-scheduler still checks taints, room and
      selectors). The name (`matchFields`), not the `kubernetes.io/hostname` label: admission knows nodes
      by name, and the label differs from it where kubelets run with `--hostname-override`. It is added
      to every term, since requirements within a term are ANDed.
    * The pool admission chose, when `node_pool` is set (nodes that pool has yet to add): its label, in
      every term too.
    """
    terms: list[client.V1NodeSelectorTerm] = []
    if spec.gpu_type:
        values = sorted(set(spec.gpu_products)) or [spec.gpu_type]
        terms = [
            client.V1NodeSelectorTerm(
                match_expressions=[client.V1NodeSelectorRequirement(key=key, operator="In", values=values)]
            )
            for key in GPU_PRODUCT_LABELS
        ]
    if spec.node_pool:
        pool = client.V1NodeSelectorRequirement(
            key=spec.node_pool[0], operator="In", values=[spec.node_pool[1]]
        )
        terms = terms or [client.V1NodeSelectorTerm(match_expressions=[])]
        for term in terms:
            term.match_expressions = [*(term.match_expressions or []), pool]
    if spec.node_names:
        binding = [
            client.V1NodeSelectorRequirement(
                key="metadata.name", operator="In", values=[spec.node_names[index]]
            )
        ]
        terms = terms or [client.V1NodeSelectorTerm()]
        for term in terms:
            term.match_fields = binding
    if not terms:
        return None
    return client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=terms
            )
        )
    )


def make_learner_pod(spec: JobPodsSpec, index: int) -> client.V1Pod:
    """Build learner `index` (0-based) of one attempt as a bare pod that runs once.

    Guaranteed QoS (requests == limits), GPUs only when asked for (with `spec.gpu_tolerations` and
    the product required by node affinity when `gpu_type` is set), bound to `spec.node_names[index]` when given, a
    non-root restricted security context, no API token, stable DNS (`hostname.subdomain`) for the
    rendezvous, and `spec.active_deadline_seconds` as `activeDeadlineSeconds`. With `spec.artifacts`: the `fetch`
    init container when there is code or S3 data to fetch, the code folder as working directory, and
    the launcher around the command.
    """
    if not 0 <= index < spec.learners:
        raise ValueError(f"learner index {index} out of range for {spec.learners} learners")
    pod_name = names.learner_pod_name(spec.job_id, spec.attempt, index)
    volumes, mounts = learner_volumes(spec, index)
    init_containers = _init_containers(spec, mounts)
    container = _learner_container(spec, index, mounts)
    tolerations = _tolerations(spec)
    pod = client.V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=client.V1ObjectMeta(name=pod_name, namespace=spec.namespace, labels=_labels(spec, index)),
        spec=client.V1PodSpec(
            restart_policy="Never",
            hostname=pod_name,
            subdomain=names.service_name(spec.job_id, spec.attempt),
            service_account_name=spec.service_account,
            automount_service_account_token=False,
            enable_service_links=False,
            termination_grace_period_seconds=spec.termination_grace_seconds,
            active_deadline_seconds=spec.active_deadline_seconds,
            affinity=_node_affinity(spec, index),
            tolerations=tolerations or None,
            security_context=_pod_security_context(spec),
            init_containers=init_containers,
            containers=[container],
            volumes=volumes,
            image_pull_secrets=(
                [client.V1LocalObjectReference(name=spec.image_pull_secret)]
                if spec.image_pull_secret
                else None
            ),
        ),
    )
    if not spec.pod_overrides:
        return pod
    body = apply_pod_overrides(_API.sanitize_for_serialization(pod), spec.pod_overrides)
    overridden: client.V1Pod = _API._ApiClient__deserialize(body, "V1Pod")  # type: ignore[attr-defined]
    return overridden


# Turns a pod into its API JSON and back, for the overrides (which read and write the JSON, as the API does).
_API = client.ApiClient()


def _learner_container(
    spec: JobPodsSpec, index: int, mounts: list[client.V1VolumeMount]
) -> client.V1Container:
    """The learner itself: the user's image and command (wrapped by the launcher with artifacts), the
    platform's env, guaranteed resources and the rendezvous port; it runs in the code folder when there is code."""
    artifacts = spec.artifacts
    return client.V1Container(
        name=CONTAINER_NAME,
        image=spec.image,
        command=learner_command(spec),
        working_dir=artifacts.model_dir if artifacts is not None and artifacts.code_url else None,
        env=learner_env(spec, index),
        resources=_resources(spec),
        ports=[
            client.V1ContainerPort(name=RENDEZVOUS_PORT_NAME, container_port=spec.master_port, protocol="TCP")
        ],
        volume_mounts=mounts,
        security_context=_security_context(spec),
    )


def _init_containers(
    spec: JobPodsSpec, mounts: list[client.V1VolumeMount]
) -> list[client.V1Container] | None:
    """The `fetch` init container when there is code or S3 data to fetch, else None (no init containers)."""
    if spec.artifacts is None or not spec.artifacts.needs_fetch:
        return None
    return [make_fetch_container(spec, fetch_mounts(spec, mounts), _security_context(spec))]


def _tolerations(spec: JobPodsSpec) -> list[client.V1Toleration]:
    """The learner's tolerations (GPU taints when it has GPUs, how long it outlives a lost node), as API objects."""
    return [
        client.V1Toleration(
            key=t.key or None,
            operator=t.operator,
            value=t.value or None,
            effect=t.effect or None,
            toleration_seconds=t.toleration_seconds,
        )
        for t in learner_tolerations(
            gpus=spec.gpus,
            gpu_tolerations=spec.gpu_tolerations,
            node_lost_seconds=spec.node_lost_toleration_seconds,
        )
    ]


def _pod_security_context(spec: JobPodsSpec) -> client.V1PodSecurityContext:
    """The pod's non-root identity (user, group and volume group all `run_as_user`, or all left to the
    namespace's assigned range when it is None; non-root either way) under the default seccomp."""
    return client.V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=spec.run_as_user,
        run_as_group=spec.run_as_user,
        fs_group=spec.run_as_user,
        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
    )


def make_headless_service(spec: JobPodsSpec) -> client.V1Service:
    """Build the headless Service that gives each learner the DNS name `<pod>.<svc>.<ns>.svc`.

    It publishes not-ready addresses, because learners must resolve learner 0 before any of them
    is "ready"; it selects the pods of this attempt only.
    """
    selector = {
        names.LABEL_JOB: names.label_value(spec.job_id),
        names.LABEL_ATTEMPT: str(spec.attempt),
    }
    return client.V1Service(
        api_version="v1",
        kind="Service",
        metadata=client.V1ObjectMeta(
            name=names.service_name(spec.job_id, spec.attempt),
            namespace=spec.namespace,
            labels=names.job_labels(spec.tenant, spec.job_id, spec.attempt),
        ),
        spec=client.V1ServiceSpec(
            cluster_ip="None",
            selector=selector,
            publish_not_ready_addresses=True,
            ports=[
                client.V1ServicePort(
                    name=RENDEZVOUS_PORT_NAME,
                    port=spec.master_port,
                    target_port=spec.master_port,
                    protocol="TCP",
                )
            ],
        ),
    )

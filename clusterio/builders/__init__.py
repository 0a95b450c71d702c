"""Pure builders of the Kubernetes objects Trainyard creates, in the style of kubespawner's `make_pod`.

They take the plain dataclasses of `clusterio.builders.specs` and return `kubernetes.client` `V1*`
objects; they do no I/O, so the launch task can build, compare and create idempotently.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from kubernetes.client import ApiClient

from clusterio.builders.artifacts import (
    TOKEN_ENV,
    attempt_secret_name,
    checkpoint_claim_labels,
    make_checkpoint_pvc,
    make_job_checkpoint_pvcs,
)
from clusterio.builders.job import (
    datastore_env_name,
    datastore_secret_keys,
    is_reserved_env_name,
    learner_env,
    make_datastore_secret,
    make_headless_service,
    make_learner_pod,
    master_address,
    platform_mounts,
    reserved_env_reason,
)
from clusterio.builders.quantities import cpu_quantity, memory_quantity
from clusterio.builders.registry import RegistryLogin, docker_config, make_pull_secret
from clusterio.builders.specs import (
    AccessMode,
    ArtifactSpec,
    JobPodsSpec,
    S3Fetch,
    TenantLimits,
    ThreadsMode,
    VolumeKind,
    VolumeSpec,
)
from clusterio.builders.tenant import (
    make_limit_range,
    make_namespace,
    make_network_policy,
    make_resource_quota,
    make_service_account,
)


@cache
def _serializer() -> ApiClient:
    return ApiClient()


def to_dict(obj: Any) -> Any:
    """Serialize a `V1*` object to the plain dict the API server receives (camelCase keys, no Nones)."""
    return _serializer().sanitize_for_serialization(obj)


__all__ = [
    "TOKEN_ENV",
    "AccessMode",
    "ArtifactSpec",
    "JobPodsSpec",
    "RegistryLogin",
    "S3Fetch",
    "TenantLimits",
    "ThreadsMode",
    "VolumeKind",
    "VolumeSpec",
    "attempt_secret_name",
    "checkpoint_claim_labels",
    "cpu_quantity",
    "datastore_env_name",
    "datastore_secret_keys",
    "docker_config",
    "is_reserved_env_name",
    "learner_env",
    "make_checkpoint_pvc",
    "make_datastore_secret",
    "make_headless_service",
    "make_job_checkpoint_pvcs",
    "make_learner_pod",
    "make_limit_range",
    "make_namespace",
    "make_network_policy",
    "make_pull_secret",
    "make_resource_quota",
    "make_service_account",
    "master_address",
    "memory_quantity",
    "platform_mounts",
    "reserved_env_reason",
    "to_dict",
]

"""Tenant policies: what a tenant's jobs may reach (host folders, image registries, S3 endpoints, other jobs'
checkpoint claims), how high a member may set a job's priority, and the Pod Security level of its namespace.
Platform admins set them (admin console, `PUT /api/v1/tenants/<slug>/policy/`); `jobs.core.policy` applies
them at submit."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from common.podoverrides import OverridesError, overrides_clean
from common.transactions import durable_service
from tenants.models import PRIORITY_RANGE, JobClaims, Membership, PodSecurity, Policy, Role, Tenant

# Node folders no tenant may mount, nor any folder that holds one: the node's system, the kubelet's and the
# container runtimes' state and sockets, cluster credentials.
FORBIDDEN_HOST_PATHS = (
    "/proc", "/sys", "/dev", "/boot", "/etc", "/root", "/run", "/var/run", "/var/lib/kubelet",
    "/var/lib/docker", "/var/lib/containerd", "/var/lib/crio", "/var/lib/etcd", "/var/log",
    "/usr", "/bin", "/sbin", "/lib", "/lib64",
)  # fmt: skip
MAX_ENTRIES = 50
_PATTERN = re.compile(r"[A-Za-z0-9*?._:/@\[\]-]{1,255}")
_HOST_PATTERN = re.compile(r"[A-Za-z0-9*?.:\[\]-]{1,255}")


@dataclass(frozen=True)
class EffectivePolicy:
    """A tenant's policy as a job submitted by one user meets it (`max_priority` is for that user's role)."""

    host_path_prefixes: tuple[str, ...]
    image_registries: tuple[str, ...]
    datastore_hosts: tuple[str, ...]
    max_priority: int
    pod_security: str
    job_claims: str = JobClaims.NONE


def policy_of(tenant: Tenant) -> Policy:
    """The tenant's policy row, or an unsaved one holding the defaults."""
    policy = Policy.objects.filter(tenant=tenant).first()
    return policy if policy is not None else Policy(tenant=tenant)


def effective_policy(*, tenant: Tenant, user: Any) -> EffectivePolicy:
    """The policy `user`'s jobs in `tenant` meet: owners (and platform superusers) get the owners' priority
    ceiling, everyone else the members'."""
    policy = policy_of(tenant)
    role = Membership.objects.filter(tenant=tenant, user=user).values_list("role", flat=True).first()
    owner = role == Role.OWNER or bool(getattr(user, "is_superuser", False))
    return EffectivePolicy(
        host_path_prefixes=tuple(policy.host_path_prefixes),
        image_registries=tuple(policy.image_registries),
        datastore_hosts=tuple(policy.datastore_hosts),
        max_priority=policy.owner_max_priority if owner else policy.member_max_priority,
        pod_security=policy.pod_security,
        job_claims=policy.job_claims,
    )


MAX_IDLE_GPU_HALT_AFTER = 30 * 24 * 3600
"""The longest grace an idle GPU job may get before it is halted (30 days)."""


def host_path_problem(path: str) -> str | None:
    """Why `path` may not be an allowed host path prefix, or None."""
    if path == "/":
        return "/ is the node's whole filesystem"
    for forbidden in FORBIDDEN_HOST_PATHS:
        if path == forbidden or path.startswith(forbidden + "/"):
            return f"{path} is inside {forbidden}, which belongs to the node"
        if forbidden.startswith(path + "/"):
            return f"{path} holds {forbidden}, which belongs to the node"
    return None


def normal_host_path(value: Any) -> str:
    """An absolute folder, normalized ('//data/./x/' is '/data/x'); ValueError when it is not one."""
    if not isinstance(value, str) or not value.startswith("/") or len(value) > 1024 or "\x00" in value:
        raise ValueError(f"must be an absolute folder like /mnt/datasets, got {value!r}")
    if ".." in value.split("/"):
        raise ValueError("must not contain '..'")
    return "/" + posixpath.normpath(value).lstrip("/")


def _strings(value: Any, field: str, errors: dict[str, list[str]]) -> list[str]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        errors[field] = ["must be a list of strings"]
        return []
    if len(value) > MAX_ENTRIES:
        errors[field] = [f"at most {MAX_ENTRIES} entries"]
        return []
    return [v.strip() for v in value if v.strip()]


def policy_clean(data: dict[str, Any]) -> dict[str, Any]:
    """Validate and normalize policy fields (any subset of Policy's); raises ValidationError naming each
    field at fault. Host path volumes need the privileged Pod Security level (a real cluster's admission
    refuses hostPath below it), so allowing host paths under a lower level is refused."""
    errors: dict[str, list[str]] = {}
    clean: dict[str, Any] = {}
    if "host_path_prefixes" in data:
        prefixes = []
        for raw in _strings(data["host_path_prefixes"], "host_path_prefixes", errors):
            try:
                path = normal_host_path(raw)
            except ValueError as exc:
                errors.setdefault("host_path_prefixes", []).append(f"{raw}: {exc}")
                continue
            problem = host_path_problem(path)
            if problem:
                errors.setdefault("host_path_prefixes", []).append(problem)
            elif path not in prefixes:
                prefixes.append(path)
        clean["host_path_prefixes"] = prefixes
    for field, pattern, example in (
        ("image_registries", _PATTERN, "registry.example.com/*"),
        ("datastore_hosts", _HOST_PATTERN, "*.s3.example.com"),
    ):
        if field in data:
            values = _strings(data[field], field, errors)
            bad = [v for v in values if not pattern.fullmatch(v)]
            if bad:
                errors.setdefault(field, []).append(f"not a pattern like {example}: {', '.join(bad)}")
            clean[field] = [v.lower() if field == "datastore_hosts" else v for v in values]
    for field in ("member_max_priority", "owner_max_priority"):
        if field in data:
            value = data[field]
            low, high = PRIORITY_RANGE
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                errors[field] = [f"must be a whole number from {low} to {high}"]
            else:
                clean[field] = value
    if "preempt_lower_priority" in data:
        if not isinstance(data["preempt_lower_priority"], bool):
            errors["preempt_lower_priority"] = ["must be true or false"]
        else:
            clean["preempt_lower_priority"] = data["preempt_lower_priority"]
    if "idle_gpu_halt_after_seconds" in data:
        value = data["idle_gpu_halt_after_seconds"]
        if value in (None, ""):
            clean["idle_gpu_halt_after_seconds"] = None
        elif (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_IDLE_GPU_HALT_AFTER
        ):
            errors["idle_gpu_halt_after_seconds"] = [
                f"a whole number of seconds from 0 to {MAX_IDLE_GPU_HALT_AFTER}, or null for never"
            ]
        else:
            clean["idle_gpu_halt_after_seconds"] = value
    if "job_claims" in data:
        if data["job_claims"] not in JobClaims.values:
            errors["job_claims"] = [f"must be one of {', '.join(JobClaims.values)}"]
        else:
            clean["job_claims"] = data["job_claims"]
    _clean_write_caps(data, clean, errors)
    _clean_log_caps(data, clean, errors)
    if "pod_overrides" in data:
        try:
            clean["pod_overrides"] = overrides_clean(data["pod_overrides"])
        except OverridesError as exc:
            errors["pod_overrides"] = exc.problems
    if "pod_security" in data:
        if data["pod_security"] not in PodSecurity.values:
            errors["pod_security"] = [f"must be one of {', '.join(PodSecurity.values)}"]
        else:
            clean["pod_security"] = data["pod_security"]
    if errors:
        raise ValidationError(errors)
    return clean


LOG_CAP_FIELDS = ("log_max_lines_per_second", "log_max_bytes_per_second", "log_max_lines", "log_max_bytes")
MAX_LOG_CAP = 2**40
"""The largest value a log cap may be given (about a terabyte or a trillion lines: no cap in practice)."""


def _clean_log_caps(data: dict[str, Any], clean: dict[str, Any], errors: dict[str, list[str]]) -> None:
    """The log caps among `data`: whole numbers from 1 up, or null for the platform's default."""
    for name in LOG_CAP_FIELDS:
        if name not in data:
            continue
        value = data[name]
        if value in (None, ""):
            clean[name] = None
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LOG_CAP:
            errors[name] = [f"a whole number from 1 to {MAX_LOG_CAP}, or null for the platform's default"]
        else:
            clean[name] = value


@durable_service
def policy_set(*, tenant: Tenant, **fields: Any) -> Policy:
    """Change some of the tenant's policy fields (validated as `policy_clean` does), all or none."""
    clean = policy_clean(fields)
    policy, _ = Policy.objects.select_for_update().get_or_create(tenant=tenant)
    for name, value in clean.items():
        setattr(policy, name, value)
    check_consistent(policy)
    policy.save()
    return policy


def check_consistent(policy: Policy) -> None:
    """Refuse combinations a cluster would not run: host paths below the privileged level, or members
    allowed a higher priority than owners."""
    errors: dict[str, list[str]] = {}
    if policy.host_path_prefixes and policy.pod_security != PodSecurity.PRIVILEGED:
        errors["pod_security"] = [
            "host path volumes need the privileged level (baseline and restricted refuse hostPath); "
            "set pod_security to privileged or allow no host paths"
        ]
    if policy.member_max_priority > policy.owner_max_priority:
        errors["member_max_priority"] = ["must not be above owner_max_priority"]
    if errors:
        raise ValidationError(errors)


# -- caps on what one attempt of a job writes (results, pod reports, TensorBoard) -----------------------------

MAX_COUNT_CAP = 10**9
MAX_BYTES_CAP = 2**50  # 1 PiB
MAX_PIECE_BYTES = 64 * 1024 * 1024  # a piece is read into the web process's memory whole
WRITE_CAP_FIELDS: dict[str, tuple[str, int, int]] = {
    # policy field: (the setting that is its default, lowest, highest)
    "result_max_files": ("RESULT_MAX_FILES", 0, MAX_COUNT_CAP),
    "result_max_bytes": ("RESULT_MAX_BYTES", 0, MAX_BYTES_CAP),
    "pod_reports_max": ("POD_REPORTS_MAX", 0, MAX_COUNT_CAP),
    "tensorboard_piece_max_bytes": ("TENSORBOARD_UPLOAD_MAX_BYTES", 1, MAX_PIECE_BYTES),
    "tensorboard_max_bytes": ("TENSORBOARD_MAX_BYTES", 0, MAX_BYTES_CAP),
    "tensorboard_piece_max_rows": ("TENSORBOARD_PIECE_MAX_ROWS", 0, MAX_COUNT_CAP),
    "tensorboard_max_rows": ("TENSORBOARD_MAX_ROWS", 0, MAX_COUNT_CAP),
}


@dataclass(frozen=True)
class WriteCaps:
    """The caps one attempt of a tenant's job meets: its policy's overrides, else the platform's settings."""

    result_max_files: int
    result_max_bytes: int
    pod_reports_max: int
    tensorboard_piece_max_bytes: int
    tensorboard_max_bytes: int
    tensorboard_piece_max_rows: int
    tensorboard_max_rows: int


def write_caps(tenant: Tenant) -> WriteCaps:
    """The caps on what `tenant`'s job attempts write (docs/operations.md "Caps on what a job writes")."""
    policy = policy_of(tenant)
    values = {}
    for field, (setting, _, _) in WRITE_CAP_FIELDS.items():
        override = getattr(policy, field)
        values[field] = int(getattr(settings, setting) if override is None else override)
    return WriteCaps(**values)


def _clean_write_caps(data: dict[str, Any], clean: dict[str, Any], errors: dict[str, list[str]]) -> None:
    """Check the cap overrides in `data`: a whole number in the field's range, or null (or "") for the
    platform's default."""
    for field, (setting, low, high) in WRITE_CAP_FIELDS.items():
        if field not in data:
            continue
        value = data[field]
        if value in (None, ""):
            clean[field] = None
        elif isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            errors[field] = [f"a whole number from {low} to {high}, or null for the platform's {setting}"]
        else:
            clean[field] = value

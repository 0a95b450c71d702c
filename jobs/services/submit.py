"""Submitting a job: validation (one check for spec, policy, cluster and quota) and the write, in one
transaction with its JobEvent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from django.conf import settings
from django.contrib.auth.models import User

from common.errors import Refused
from common.transactions import durable_service
from jobs import cluster
from jobs.artifacts.code import CodeRejected, CodeSource, code_archive_store, inspect_code_zip
from jobs.cluster import ClusterError, NodeInfo
from jobs.core.choices import EventKind, Reason
from jobs.core.claims import storage_problems
from jobs.core.policy import policy_problems, secret_endpoints
from jobs.core.spec import Demand, ParsedSpec, SpecError, parse_spec, spec_demand
from jobs.credentials import seal
from jobs.endpoints import resolve_host
from jobs.models import CodeArchive, Job, JobCredentials, JobEvent, checkpoint_layout
from jobs.services.lifecycle import enqueue
from jobs.streams import send_after_commit, tenant_group
from tenants.models import Quota, Tenant
from tenants.policy import effective_policy
from tenants.scoping import Perm, has_perm
from tenants.secrets import datastore_credentials, datastore_secret_keys, datastore_secret_list
from tenants.usage import tenant_usage


class JobRejected(Refused):
    """A submission or action was refused; `errors` maps a field (or "" for the whole request) to messages."""


class PermissionDenied(JobRejected):
    """The user may see the tenant or job but not do this to it."""

    def __init__(self, message: str) -> None:
        super().__init__({"": [message]}, status=403)


def quota_problems(*, demand: Demand, quota: Quota) -> list[str]:
    """Why a job with `demand` could never run under `quota`, even with the tenant's cluster share empty and
    all it may borrow from its cohort lent to it, or with none of its claim storage in use (its checkpoint
    claims alone are more than the tenant's storage or claim quota)."""
    problems = []
    top = quota.ceiling()
    for needed, nominal, most, what, unit in (
        (demand.total_gpus, quota.gpus, top.gpus, "GPUs", ""),
        (demand.total_cpu_millis, quota.cpu_millis, top.cpu_millis, "CPU", "m"),
        (demand.total_memory_mib, quota.memory_mib, top.memory_mib, "memory", " MiB"),
    ):
        if needed > most:
            beyond = f" (+{most - nominal}{unit} it may borrow)" if most > nominal else ""
            unit_what = f"{unit} {what}" if what != "GPUs" else " GPUs"
            problems.append(
                f"needs {needed}{unit_what} in all, the tenant's quota is {nominal}{unit}{beyond}"
            )
    if quota.max_running_jobs == 0:
        problems.append("the tenant may run no jobs (running-job quota is 0)")
    layout = checkpoint_layout()
    problems += storage_problems(
        claims=layout.claims(demand.learners),
        gib=layout.storage_gib(demand.learners),
        max_claims=quota.max_claims,
        storage_gib=quota.storage_gib,
    )
    return problems


def gpu_type_problem(*, gpu_type: str, nodes: tuple[Sequence[NodeInfo] | None, str] | None) -> str | None:
    """Why no node of the cluster can ever run `gpu_type` (aliases applied), naming the types it has; None
    when a node has it, or when the cluster cannot be reached (the job is then accepted and waits: a spec is
    not refused for an outage, and its pending reason names the type once the cluster answers)."""
    if nodes is None:
        try:
            products: Sequence[str | None] = cluster.gpu_products()
        except ClusterError:
            return None
    elif nodes[0] is None:
        return None
    else:
        products = [n.gpu_type for n in nodes[0]] + [
            pool.gpu_type for pool in cluster.node_pools() if pool.gpu_type
        ]
    types = cluster.gpu_types()
    known = types.known(products)
    if types.resolve(gpu_type, known) is not None:
        return None
    listed = ", ".join(sorted(known.values(), key=str.casefold)) or "none (no node has a GPU product label)"
    return f"no node of the cluster has GPU type {gpu_type}; known types: {listed}"


def _job_relation(*, tenant: Tenant, user: User, job_id: str) -> str | None:
    """Whose job ``job_id`` of ``tenant`` is, for a pvc volume that names its checkpoint claim: "own",
    "tenant" (another member's), or None when the tenant has no such job."""
    row = Job.objects.filter(pk=job_id, tenant=tenant).values_list("owner_id").first()
    if row is None:
        return None
    return "own" if row[0] == user.pk else "tenant"


def job_validate(
    *,
    tenant: Tenant,
    user: User,
    document: str | bytes | Mapping[str, Any],
    nodes: tuple[Sequence[NodeInfo] | None, str] | None = None,
    credentials: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[ParsedSpec, Demand]:
    """Everything `job_submit` checks before it stores anything: the user may submit to the tenant, the
    tenant is active, the spec is valid, every data-store secret it names exists in the tenant, its GPU type
    is one the cluster has, and the job could ever fit the tenant's quota. `nodes` is the cluster's nodes as
    `job_dry_run` has them (None and why when the cluster could not be reached); without it the cluster is
    asked for its nodes' GPU types. `credentials` are a retry's own (an FfDL manifest's, carried over)."""
    if not has_perm(user, tenant, Perm.SUBMIT):
        raise PermissionDenied(f"you may not submit jobs to tenant {tenant.slug}")
    if not tenant.active:
        raise JobRejected({"": [f"tenant {tenant.slug} is inactive and accepts no jobs"]})
    policy = effective_policy(tenant=tenant, user=user)
    problem = cluster.pod_security_problem(tenant=tenant, level=policy.pod_security)
    if problem:
        raise JobRejected({"": [problem]})
    try:
        parsed = parse_spec(document, max_bytes=settings.SPEC_MAX_BYTES)
    except SpecError as exc:
        raise JobRejected(exc.errors) from exc
    inline = {store: dict(fields) for store, fields in (credentials or parsed.secrets).items()}
    named, missing = _named_secrets(tenant=tenant, spec=parsed.spec, inline=inline)
    if missing:
        raise JobRejected({parsed.field_name(path): messages for path, messages in missing.items()})
    problems = cluster.credential_problems(inline | named)
    if problems:
        raise JobRejected({"data_stores" if parsed.secrets else "volumes": problems})
    field_problems = cluster.spec_problems(tenant=tenant, spec=parsed.spec, credentials=inline | named)
    field_problems |= policy_problems(
        parsed.spec,
        policy,
        tenant=tenant.slug,
        resolve=resolve_host,
        job_relation=lambda job_id: _job_relation(tenant=tenant, user=user, job_id=job_id),
        endpoints=_named_endpoints(tenant=tenant, named=named),
    )
    if field_problems:
        raise JobRejected({parsed.field_name(path): messages for path, messages in field_problems.items()})
    gpu_type = parsed.spec["resources"].get("gpu_type")
    problem = gpu_type_problem(gpu_type=gpu_type, nodes=nodes) if gpu_type else None
    if problem:
        raise JobRejected({"resources.gpu_type": [problem]})
    demand = spec_demand(parsed.spec)
    problems = quota_problems(demand=demand, quota=Quota.objects.get(tenant=tenant))
    if problems:
        raise JobRejected({"resources": [f"can never run: {p}" for p in problems]})
    return parsed, demand


@durable_service
def job_submit(
    *,
    tenant: Tenant,
    user: User,
    document: str | bytes | Mapping[str, Any],
    credentials: Mapping[str, Mapping[str, str]] | None = None,
    code: CodeSource | CodeArchive | None = None,
    text: str | None = None,
) -> Job:
    """Validate a Trainyard spec or FfDL manifest and queue it for `tenant`.

    The manifest's data-store credentials (or `credentials`, when a job is retried) are stored sealed,
    apart from the spec; `code` is a model-definition ZIP (checked, stored once per tenant) or, for a
    retry, the archive already stored. `text` is the spec as its user wrote it, kept for Clone (by default
    the document itself; a retry passes the original's). Raises JobRejected (no job stored) on a bad spec or ZIP, a job
    that can never fit the tenant's quota, a full queue, an inactive tenant, or a user who may not submit.
    """
    parsed, demand = job_validate(tenant=tenant, user=user, document=document, credentials=credentials)
    if code is not None and not isinstance(code, CodeArchive):
        _check_code(code)
    secrets = {store: dict(fields) for store, fields in (credentials or parsed.secrets).items()}
    quota = Quota.objects.select_for_update().get(tenant=tenant)
    queued = tenant_usage(tenant).queued_jobs
    if queued >= quota.max_queued_jobs:
        full = f"tenant {tenant.slug} already has {queued} jobs waiting (limit {quota.max_queued_jobs})"
        raise JobRejected({"": [full]}, status=429)
    archive = (
        code
        if code is None or isinstance(code, CodeArchive)
        else code_archive_store(tenant=tenant, data=code)
    )
    spec = parsed.spec
    job = Job.objects.create(
        tenant=tenant,
        owner=user,
        name=spec["name"],
        spec=spec,
        source=parsed.source,
        document=user_text(document, parsed) if text is None else text,
        priority=spec["priority"],
        max_retries=spec["retries"],
        learners=demand.learners,
        gpus=demand.gpus,
        cpu_millis=demand.cpu_millis,
        memory_mib=demand.memory_mib,
        code=archive,
        experiment=spec.get("experiment", ""),
        tags=list(spec.get("tags", [])),
    )
    if secrets:
        JobCredentials.objects.create(job=job, sealed=seal(secrets), stores=sorted(secrets))
    JobEvent.objects.create(
        job=job,
        kind=EventKind.SUBMITTED,
        to_status=job.status,
        reason=Reason.SUBMITTED,
        message=f"submitted by {user.get_username()} ({parsed.source} spec)",
        actor=user,
        data={"demand": demand.__dict__ | {"total_gpus": demand.total_gpus}},
    )
    state = {"kind": "status", "job": job.pk, "status": job.status, "reason": "", "message": ""}
    send_after_commit(tenant_group(tenant.slug), state | {"borrowed": False})
    enqueue("jobs.tasks.schedule")
    return job


MIN_MASKED_VALUE = 4
"""Credential values shorter than this are not searched for in the text (they could match anything): a
document holding one is not kept at all."""


def user_text(document: str | bytes | Mapping[str, Any], parsed: ParsedSpec) -> str:
    """The document as its user wrote it, for Clone: the text itself, or a mapping dumped in its own key
    order; an FfDL manifest's inline credential values are blanked out ("" when one is too short to find)."""
    if isinstance(document, bytes | bytearray | memoryview):
        text = bytes(document).decode("utf-8-sig")
    elif isinstance(document, str):
        text = document.removeprefix("\ufeff")
    else:
        text = yaml.safe_dump(_plain(document), sort_keys=False, allow_unicode=True)
    values = {value for store in parsed.secrets.values() for value in store.values() if value}
    if any(len(value) < MIN_MASKED_VALUE for value in values):
        return ""
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, "REDACTED")
    return text


def _plain(value: Any) -> Any:
    """Mappings (of any kind) as dicts and sequences as lists, so safe_dump can write them."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _named_secrets(
    *, tenant: Tenant, spec: Mapping[str, Any], inline: Mapping[str, Any]
) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """The tenant's data-store secrets the spec's volumes name (those the job does not bring itself), as
    their keys without values, and a field error for each volume naming one the tenant does not have."""
    volumes = [(i, v.get("secret")) for i, v in enumerate(spec.get("volumes", []))]
    wanted = {name for _, name in volumes if name and name not in inline}
    found = datastore_secret_keys(tenant=tenant, names=wanted)
    missing: dict[str, list[str]] = {}
    for index, name in volumes:
        if name and name not in inline and name not in found:
            have = ", ".join(datastore_secret_list(tenant=tenant).values_list("name", flat=True)) or "none"
            missing[f"volumes[{index}].secret"] = [
                f"no data-store secret {name!r} in tenant {tenant.slug!r} (it has: {have}); an owner creates "
                f"one on the tenant page or with POST /api/v1/tenants/{tenant.slug}/secrets/"
            ]
    return {name: dict.fromkeys(keys, "") for name, keys in found.items()}, missing


def _named_endpoints(*, tenant: Tenant, named: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The S3 endpoints the named data-store secrets carry (opened only for those that hold one)."""
    carrying = [name for name, keys in named.items() if "endpoint" in keys]
    return secret_endpoints(datastore_credentials(tenant=tenant, names=carrying))


def _check_code(data: CodeSource) -> None:
    try:
        inspect_code_zip(data)
    except CodeRejected as exc:
        raise JobRejected({"code": [f"the code archive {exc}"]}) from exc

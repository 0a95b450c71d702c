"""A tenant's policy applied to one validated spec (pure: plain values in, field errors out).

What is checked: `type: host` volumes only under the tenant's allowed host folders; the image against the
allowed registry patterns (short names read as Docker Hub's, as the container runtime does); S3 endpoints
public by address (every address the host resolves to, every numeric form: jobs.core.addresses) unless the
tenant lists the host; `pvc` volumes naming no claim the platform made for a job; the priority within what
the submitter's role may use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Protocol
from urllib.parse import urlsplit

from jobs.core.addresses import Resolve, host_problem
from jobs.core.claims import checkpoint_claim_job, platform_claim


class SpecPolicy(Protocol):
    """What `policy_problems` reads of a policy (tenants.policy.EffectivePolicy has it)."""

    @property
    def host_path_prefixes(self) -> Sequence[str]: ...
    @property
    def image_registries(self) -> Sequence[str]: ...
    @property
    def datastore_hosts(self) -> Sequence[str]: ...
    @property
    def max_priority(self) -> int: ...
    @property
    def job_claims(self) -> str: ...


JobRelation = Callable[[str], str | None]
"""Who a job of the tenant belongs to, as its checkpoint claim's mounter sees it: "own" (the submitter's),
"tenant" (another member's), None (no such job in the tenant)."""


def _no_jobs(job_id: str) -> str | None:
    return None


def full_image_name(image: str) -> str:
    """The image reference with its registry spelled out, as a container runtime reads it: `python:3.11`
    is `docker.io/library/python:3.11`, `me/app` is `docker.io/me/app`."""
    first, slash, _ = image.partition("/")
    if not slash:
        return f"docker.io/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"docker.io/{image}"


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def policy_problems(
    spec: Mapping[str, Any],
    policy: SpecPolicy,
    *,
    tenant: str,
    resolve: Resolve,
    job_relation: JobRelation = _no_jobs,
    endpoints: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    """Field errors for everything in `spec` that `policy` does not allow ({} when all is allowed); S3 hosts
    are resolved with `resolve` (getaddrinfo on the Django side), and a job's checkpoint claim named as a
    `pvc` volume is judged by whose job it is (`job_relation`) and the policy's `job_claims`."""
    errors = endpoint_problems(
        spec, policy.datastore_hosts, tenant=tenant, resolve=resolve, secret_endpoints=endpoints
    )
    for i, volume in enumerate(spec.get("volumes", [])):
        if volume["type"] == "host":
            path = volume.get("path") or ""
            if not policy.host_path_prefixes:
                errors[f"volumes[{i}].path"] = [
                    f"host folders are not allowed for tenant {tenant}; a platform admin can allow some in "
                    "the tenant's policy (or use a pvc or s3 volume)"
                ]
            elif not any(_under(path, prefix) for prefix in policy.host_path_prefixes):
                allowed = ", ".join(policy.host_path_prefixes)
                errors[f"volumes[{i}].path"] = [
                    f"{path} is not under the folders tenant {tenant} may mount: {allowed}"
                ]
        if volume["type"] == "pvc":
            problem = _claim_problem(volume.get("claim") or "", policy.job_claims, job_relation, tenant)
            if problem:
                errors[f"volumes[{i}].claim"] = [problem]
    image = spec.get("image") or ""
    if policy.image_registries:
        full = full_image_name(image)
        if not any(fnmatchcase(full, p) or fnmatchcase(image, p) for p in policy.image_registries):
            errors["image"] = [
                f"{full} is not from a registry tenant {tenant} may use: {', '.join(policy.image_registries)}"
            ]
    priority = spec.get("priority", 0)
    if priority > policy.max_priority:
        errors["priority"] = [
            f"at most {policy.max_priority} for you in tenant {tenant} (its policy's ceiling)"
        ]
    return errors


def _claim_problem(claim: str, allowed: str, job_relation: JobRelation, tenant: str) -> str | None:
    """Why a `pvc` volume may not mount ``claim``: one the platform made, unless it is the checkpoint claim
    of a job of the tenant that the policy's ``allowed`` ("own", "tenant") lets the submitter share."""
    if not platform_claim(claim):
        return None
    job = checkpoint_claim_job(claim)
    relation = job_relation(job) if job is not None else None
    if relation is not None and (allowed == "tenant" or (allowed == "own" and relation == "own")):
        return None
    if job is None:
        return f"{claim} is a claim name the platform keeps for its own objects; a pvc volume names your own claim"
    whose = {"own": "your job", "tenant": "another member's job"}.get(relation or "", "a job")
    may = {"own": "only your own jobs' checkpoint claims", "tenant": "the tenant's jobs' checkpoint claims"}
    return (
        f"{claim} is the checkpoint claim of {whose}; tenant {tenant}'s policy lets a pvc volume mount "
        f"{may.get(allowed, 'no job checkpoint claim')}"
    )


def endpoint_problems(
    spec: Mapping[str, Any],
    allowed: Sequence[str],
    *,
    tenant: str,
    resolve: Resolve,
    secret_endpoints: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    """Field errors for the S3 endpoints of `spec`: at submit, and again at launch (a name may resolve
    elsewhere by then: DNS rebinding). A volume without its own `endpoint` uses the one its data-store secret
    carries (`secret_endpoints`: secret name -> URL), reported on `volumes[i].secret`."""
    errors: dict[str, list[str]] = {}
    for i, volume in enumerate(spec.get("volumes", [])):
        if volume["type"] != "s3":
            continue
        if volume.get("endpoint"):
            problem = _endpoint_problem(volume["endpoint"], allowed, tenant, resolve)
            if problem:
                errors[f"volumes[{i}].endpoint"] = [problem]
        elif volume.get("secret") and (secret_endpoints or {}).get(volume["secret"]):
            problem = _endpoint_problem((secret_endpoints or {})[volume["secret"]], allowed, tenant, resolve)
            if problem:
                errors[f"volumes[{i}].secret"] = [f"its endpoint: {problem}"]
    return errors


def secret_endpoints(credentials: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Data-store name -> the S3 endpoint its secret carries (those that carry one)."""
    return {name: keys["endpoint"] for name, keys in credentials.items() if keys.get("endpoint")}


def _endpoint_problem(url: str, allowed: Sequence[str], tenant: str, resolve: Resolve) -> str | None:
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return "not a valid URL"
    if allowed:
        if any(fnmatchcase(host, pattern) for pattern in allowed):
            return None
        return f"{host} is not among the S3 hosts tenant {tenant} may use: {', '.join(allowed)}"
    problem = host_problem(host, resolve)
    if problem is None:
        return None
    return (
        f"{problem}; only public S3 endpoints are allowed unless a platform admin lists the host in tenant "
        f"{tenant}'s policy"
    )

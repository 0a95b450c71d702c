"""Deterministic, DNS-1123 safe names and the label vocabulary of every object Trainyard creates.

Every name is a pure function of its inputs, so a retried launch task computes the same names and
adopts the objects that already exist instead of creating duplicates. A name that had to be cut,
or whose input had to be rewritten to become valid, ends in a short hash of the original input,
so two different inputs never collapse onto one name.
"""

from __future__ import annotations

import hashlib
import re
from uuid import UUID

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
HASH_LENGTH = 8

DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

OBJECT_PREFIX = "ty"

LABEL_TENANT = "trainyard.io/tenant"
LABEL_JOB = "trainyard.io/job"
LABEL_ATTEMPT = "trainyard.io/attempt"
LABEL_LEARNER = "trainyard.io/learner"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTALLATION = "trainyard.io/installation"
MANAGED_BY = "trainyard"

SERVICE_ACCOUNT_NAME = "trainyard-learner"
RESOURCE_QUOTA_NAME = "trainyard-quota"
LIMIT_RANGE_NAME = "trainyard-defaults"
NETWORK_POLICY_NAME = "trainyard-isolation"

# Room kept after the job part of a name so every object of one job shares the same cut prefix:
# "-l" plus up to four digits of learner index, or the "-ds" of the data-store secret.
_JOB_SUFFIX_RESERVE = 6

_DNS_BAD = re.compile(r"[^a-z0-9-]")
_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9._-]")
_SUBDOMAIN_BAD = re.compile(r"[^a-z0-9.-]")

JobId = str | int | UUID


def short_hash(raw: str) -> str:
    """Return a stable 8-hex-digit digest of `raw`, the suffix that keeps cut names distinct."""
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:HASH_LENGTH]


def _cut_with_hash(cleaned: str, raw: str, max_length: int, strip: str) -> str:
    head = cleaned[: max_length - HASH_LENGTH - 1].rstrip(strip)
    digest = short_hash(raw)
    return f"{head}-{digest}" if head else digest


def dns_label(raw: str, max_length: int = DNS_LABEL_MAX) -> str:
    """Turn any string into a valid DNS-1123 label of at most `max_length` characters.

    A valid input that fits is returned unchanged; otherwise invalid characters become "-", the ends
    are trimmed and a hash of the original input is appended, so the result is both valid and unique.
    """
    if max_length < HASH_LENGTH + 2:
        raise ValueError(f"max_length must be at least {HASH_LENGTH + 2}")
    if len(raw) <= max_length and DNS_LABEL_RE.match(raw):
        return raw
    cleaned = _DNS_BAD.sub("-", raw.lower()).strip("-")
    return _cut_with_hash(cleaned, raw, max_length, "-")


def dns_subdomain(raw: str, max_length: int = DNS_SUBDOMAIN_MAX) -> str:
    """Turn any string into a valid DNS-1123 subdomain (dot-separated labels, ≤ 253 characters).

    Used for object kinds whose names may contain dots (Secrets, ConfigMaps); same hash rule as
    `dns_label`.
    """
    if len(raw) <= max_length and DNS_SUBDOMAIN_RE.match(raw):
        return raw
    cleaned = _SUBDOMAIN_BAD.sub("-", raw.lower())
    cleaned = re.sub(r"[-.]*\.[-.]*", ".", cleaned).strip("-.")
    return _cut_with_hash(cleaned, raw, max_length, "-.")


def label_value(raw: object) -> str:
    """Turn any value into a valid Kubernetes label value (≤ 63 characters, alphanumeric at both ends).

    Values that are already valid pass through unchanged, so selectors can be written with the raw
    id; anything rewritten or cut carries a hash of the original.
    """
    text = str(raw)
    if len(text) <= LABEL_VALUE_MAX and LABEL_VALUE_RE.match(text):
        return text
    cleaned = _LABEL_VALUE_BAD.sub("-", text).strip("-._")
    return _cut_with_hash(cleaned, text, LABEL_VALUE_MAX, "-._")


def _check_count(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")


def tenant_namespace(prefix: str, tenant_slug: str) -> str:
    """Name the namespace that holds all of one tenant's objects, e.g. `trainyard-acme`.

    Namespace names are DNS labels, so the result is at most 63 characters; an empty prefix gives
    the bare (sanitized) slug.
    """
    raw = f"{prefix}-{tenant_slug}" if prefix else tenant_slug
    return dns_label(raw)


def job_object_name(job_id: JobId, attempt: int) -> str:
    """Name the objects of one attempt of a job, e.g. `ty-42-a1`; also the headless Service's name.

    Starts with a letter (Services need DNS-1035 names) and leaves room for a learner suffix, so
    every object of one attempt shares this exact prefix.
    """
    _check_count(attempt, "attempt")
    tail = f"-a{attempt}"
    budget = DNS_LABEL_MAX - len(OBJECT_PREFIX) - 1 - len(tail) - _JOB_SUFFIX_RESERVE
    return dns_label(f"{OBJECT_PREFIX}-{dns_label(str(job_id), budget)}{tail}")


def learner_pod_name(job_id: JobId, attempt: int, index: int) -> str:
    """Name learner `index` (0-based) of one attempt, e.g. `ty-42-a1-l0`; also the pod's hostname."""
    _check_count(index, "learner index")
    return dns_label(f"{job_object_name(job_id, attempt)}-l{index}")


def service_name(job_id: JobId, attempt: int) -> str:
    """Name the headless Service whose DNS records let learners find each other (`<pod>.<svc>`)."""
    return job_object_name(job_id, attempt)


def datastore_secret_name(job_id: JobId, attempt: int) -> str:
    """Name the Secret that carries one attempt's data-store credentials."""
    return dns_label(f"{job_object_name(job_id, attempt)}-ds")


def pull_secret_name(job_id: JobId, attempt: int) -> str:
    """Name the Secret that carries one attempt's image pull credentials (`kubernetes.io/dockerconfigjson`)."""
    return dns_label(f"{job_object_name(job_id, attempt)}-pull")


def checkpoint_claim_name(job_id: JobId, learner: int | None = None) -> str:
    """Name a job's checkpoint PersistentVolumeClaim, shared by its attempts: `ty-42-ckpt` for the one its
    learners share (ReadWriteMany), `ty-42-ckpt-1` for learner 1's own (ReadWriteOnce, one per learner)."""
    budget = DNS_LABEL_MAX - len(OBJECT_PREFIX) - 1 - len("-ckpt")
    if learner is None:
        return dns_label(f"{OBJECT_PREFIX}-{dns_label(str(job_id), budget)}-ckpt")
    _check_count(learner, "learner index")
    # The same cut of the job id as the shared claim's for every learner, up to four digits of index.
    budget -= _JOB_SUFFIX_RESERVE - 1
    return dns_label(f"{OBJECT_PREFIX}-{dns_label(str(job_id), budget)}-ckpt-{learner}")


def installation_selector(selector: str, installation: str | None) -> str:
    """`selector` narrowed to one installation's objects (unchanged when `installation` is None)."""
    return f"{selector},{LABEL_INSTALLATION}={label_value(installation)}" if installation else selector


def managed_selector() -> str:
    """Label selector matching every object Trainyard manages (used by the watch loop and reconcile)."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY}"


def job_selector(job_id: JobId, attempt: int | None = None) -> str:
    """Label selector for the objects of one job, or of one attempt of it when `attempt` is given."""
    parts = [managed_selector(), f"{LABEL_JOB}={label_value(job_id)}"]
    if attempt is not None:
        _check_count(attempt, "attempt")
        parts.append(f"{LABEL_ATTEMPT}={attempt}")
    return ",".join(parts)


def tenant_labels(tenant_slug: str) -> dict[str, str]:
    """Labels of the per-tenant objects: the tenant and the managed-by marker."""
    return {LABEL_TENANT: label_value(tenant_slug), LABEL_MANAGED_BY: MANAGED_BY}


def job_labels(tenant_slug: str, job_id: JobId, attempt: int) -> dict[str, str]:
    """Labels shared by every object of one attempt of a job (pods, Service, Secret)."""
    _check_count(attempt, "attempt")
    return {
        **tenant_labels(tenant_slug),
        LABEL_JOB: label_value(job_id),
        LABEL_ATTEMPT: str(attempt),
    }


def learner_labels(tenant_slug: str, job_id: JobId, attempt: int, index: int) -> dict[str, str]:
    """Labels of one learner pod: the job labels plus the learner's 0-based index."""
    _check_count(index, "learner index")
    return {**job_labels(tenant_slug, job_id, attempt), LABEL_LEARNER: str(index)}

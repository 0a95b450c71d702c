"""Test data builders: small typed functions, so tests read as plain calls and mypy sees real models."""

from __future__ import annotations

import itertools
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from jobs.models import Job
from tenants.models import Quota, Tenant
from tenants.policy import policy_set
from tenants.services import membership_set

_seq = itertools.count(1)

QUOTA = {"gpus": 8, "cpu_millis": 32000, "memory_mib": 65536, "max_running_jobs": 4, "max_queued_jobs": 10}
SPEC = {"name": "train", "image": "pytorch/pytorch:2.3", "command": ["python", "-c", "print(1)"]}


def make_user(username: str | None = None, password: str = "pw", **fields: Any) -> User:  # noqa: S107
    """A saved user with a usable password."""
    user: User = get_user_model().objects.create_user(
        username=username or f"user{next(_seq)}", password=password, **fields
    )
    return user


def make_tenant(slug: str | None = None, active: bool = True, **quota: int | str | None) -> Tenant:
    """A saved tenant with a roomy quota (override any quota field by keyword)."""
    slug = slug or f"team{next(_seq)}"
    tenant = Tenant.objects.create(slug=slug, name=f"Team {slug}", active=active)
    Quota.objects.create(tenant=tenant, **(QUOTA | quota))
    return tenant


# Where FfDL's own manifests keep their data (an S3 inside the cluster): a tenant submitting them needs its
# policy to list that host, as an admin would.
FFDL_S3_HOST = "s3.default.svc.cluster.local"


def allow(tenant: Tenant, **policy: Any) -> Tenant:
    """Set some of the tenant's policy fields, as a platform admin would (e.g. datastore_hosts=[...])."""
    policy_set(tenant=tenant, **policy)
    return tenant


def member(tenant: Tenant, role: str = "member", **user_fields: Any) -> User:
    """A new user with `role` in `tenant`, permissions synced as the services do it."""
    user = make_user(**user_fields)
    membership_set(tenant=tenant, user=user, role=role)
    return user


def make_job(tenant: Tenant | None = None, owner: User | None = None, **fields: Any) -> Job:
    """A saved queued job (bypassing validation: use job_submit to test submission itself)."""
    fields = {"name": "train", "spec": dict(SPEC), **fields}
    return Job.objects.create(tenant=tenant or make_tenant(), owner=owner or make_user(), **fields)

"""Reads of jobs, always through the tenant scoping helper."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet

from jobs.models import Job, JobEvent
from tenants.models import Tenant
from tenants.scoping import Perm, restrict

AnyUser = User | AnonymousUser


def job_list(
    *,
    user: AnyUser,
    tenant: Tenant | None = None,
    status: str | None = None,
    owner: User | None = None,
    search: str | None = None,
) -> QuerySet[Job]:
    """Jobs the user may see, newest first, optionally narrowed by tenant, status, owner and name."""
    jobs = restrict(Job.objects.select_related("tenant", "owner"), user, Perm.VIEW)
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    if status:
        jobs = jobs.filter(status=status)
    if owner is not None:
        jobs = jobs.filter(owner=owner)
    if search:
        jobs = jobs.filter(name__icontains=search)
    return jobs


def job_get(*, user: AnyUser, job_id: str) -> Job:
    """One job the user may see; raises Job.DoesNotExist for a job of another tenant, exactly as for none."""
    return job_list(user=user).get(pk=job_id)


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    """A job's events in order (the caller already got `job` through job_get)."""
    return job.events.all()

"""The one way a write locks a job row.

FOR NO KEY UPDATE OF the job row only: rows that reference the job (log lines, metric samples, events) are
inserted by other transactions whose foreign-key checks take FOR KEY SHARE on it, which FOR UPDATE would
block (and deadlock with job_launched); and the tenant joined for the caller's use is read, never locked
(locking it too serialised every write of a tenant's jobs on one row and deadlocked a run of cancels with
the transactions that insert rows referencing the tenant).
"""

from __future__ import annotations

from django.db.models import QuerySet

from jobs.models import Job


def jobs_locking() -> QuerySet[Job]:
    """Job rows, each locked when read (FOR NO KEY UPDATE OF jobs_job), with their tenant joined."""
    return Job.objects.select_for_update(no_key=True, of=("self",)).select_related("tenant")


def job_lock(job_id: str) -> Job:
    """The job row, locked until the transaction ends (Job.DoesNotExist if gone)."""
    return jobs_locking().get(pk=job_id)

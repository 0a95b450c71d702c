"""Changing a job's experiment and tags after submit: the labels people find and compare runs by."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from common.transactions import durable_service
from jobs.core.choices import EventKind, Reason
from jobs.core.spec.labels import validate_experiment, validate_tags
from jobs.core.spec.values import Errors
from jobs.models import Job, JobEvent
from jobs.services.locking import job_lock
from jobs.services.submit import JobRejected, PermissionDenied
from tenants.scoping import Perm, has_perm

_UNSET: Any = object()


@durable_service
def job_relabel(*, job: Job, user: User, experiment: Any = _UNSET, tags: Any = _UNSET) -> Job:
    """Set a job's experiment and/or tags (whichever is given), validated as in a spec, and record the
    change as a JobEvent with the values before and after. Any member of the job's tenant may (labels are
    the team's), a viewer may not; a job in any state may be relabelled. Nothing changes, and no event is
    written, when the values are the ones it has."""
    if not has_perm(user, job.tenant, Perm.SUBMIT):
        raise PermissionDenied("you may not change this job's labels")
    errors = Errors()
    new_experiment = validate_experiment(experiment, errors) if experiment is not _UNSET else None
    new_tags = validate_tags(tags, errors) if tags is not _UNSET else None
    if errors.by_path:
        raise JobRejected(errors.by_path)
    current = job_lock(job.pk)
    before = {"experiment": current.experiment, "tags": list(current.tags)}
    if new_experiment is not None:
        current.experiment = new_experiment
    if new_tags is not None:
        current.tags = new_tags
    after = {"experiment": current.experiment, "tags": list(current.tags)}
    if after == before:
        return current
    current.save(update_fields=["experiment", "tags", "updated_at"])
    changed = [key for key in after if after[key] != before[key]]
    JobEvent.objects.create(
        job=current,
        kind=EventKind.LABELS,
        reason=Reason.RELABELLED,
        message=f"{' and '.join(changed)} changed by {user.get_username()}",
        data={"before": before, "after": after},
        actor=user,
    )
    return current

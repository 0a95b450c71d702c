"""What a learner's launcher reports once its command exited: the files it uploaded and its checkpoint's size."""

from __future__ import annotations

from collections.abc import Mapping

from common.transactions import durable_service
from jobs.core.choices import EventKind, Reason
from jobs.models import Job, JobEvent
from jobs.services.caps import CapHit, report_counted
from tenants.policy import WriteCaps


@durable_service
def results_reported(
    *, job: Job, attempt: int, learner: int, report: Mapping[str, int | None], caps: WriteCaps
) -> JobEvent | CapHit:
    """Record a learner's report (`exit_code`, `files`, `bytes`, `checkpoint_bytes`, each checked by the
    caller): the checkpoint size on the job, the rest as a `results` event. Past the attempt's cap on
    pod-reported events nothing is recorded (the cap itself once, as a `caps` event)."""
    capped = report_counted(job=job, attempt=attempt, caps=caps)
    if capped is not None:
        return capped
    if report.get("checkpoint_bytes") is not None:
        Job.objects.filter(pk=job.pk).update(checkpoint_bytes=report["checkpoint_bytes"])
    return JobEvent.objects.create(
        job=job,
        kind=EventKind.RESULTS,
        reason=Reason.RESULTS_UPLOADED,
        message=f"learner {learner} uploaded {report.get('files') or 0} result file(s), "
        f"{report.get('bytes') or 0} bytes",
        data={"attempt": attempt, "learner": learner, **report},
    )

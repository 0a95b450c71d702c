"""What a learner's launcher reports once its command exited: the files it uploaded, the ones the platform
refused (each becomes a warning on the job), and its checkpoint's size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.transactions import durable_service
from jobs.core.choices import EventKind, Reason
from jobs.models import Job, JobEvent
from jobs.services.caps import CapHit, report_counted
from tenants.policy import WriteCaps


@durable_service
def results_reported(
    *,
    job: Job,
    attempt: int,
    learner: int,
    report: Mapping[str, int | None],
    caps: WriteCaps,
    refused: Sequence[Mapping[str, Any]] = (),
) -> JobEvent | CapHit:
    """Record a learner's report (`exit_code`, `files`, `bytes`, `checkpoint_bytes`, each checked by the
    caller): the checkpoint size on the job, the rest as a `results` event, and the files the platform
    refused (`{"path", "size", "status", "detail"}`, checked by the caller) as one more `results` event with
    reason ResultsRefused, which the job page shows as a warning. Past the attempt's cap on pod-reported
    events nothing is recorded (the cap itself once, as a `caps` event)."""
    capped = report_counted(job=job, attempt=attempt, caps=caps)
    if capped is not None:
        return capped
    if report.get("checkpoint_bytes") is not None:
        Job.objects.filter(pk=job.pk).update(checkpoint_bytes=report["checkpoint_bytes"])
    tail = f"; {len(refused)} refused" if refused else ""
    event = JobEvent.objects.create(
        job=job,
        kind=EventKind.RESULTS,
        reason=Reason.RESULTS_UPLOADED,
        message=f"learner {learner} uploaded {report.get('files') or 0} result file(s), "
        f"{report.get('bytes') or 0} bytes{tail}",
        data={"attempt": attempt, "learner": learner, **report},
    )
    if refused:
        named = "; ".join(
            f"{item['path']} ({item['size']} bytes): {item['detail'] or item['status']}" for item in refused
        )
        JobEvent.objects.create(
            job=job,
            kind=EventKind.RESULTS,
            reason=Reason.RESULTS_REFUSED,
            message=f"learner {learner}: {len(refused)} result file(s) not stored: {named}"[:2000],
            data={"attempt": attempt, "learner": learner, "refused": [dict(item) for item in refused]},
        )
    return event

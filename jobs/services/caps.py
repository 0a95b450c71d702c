"""Caps on what one attempt of a job writes into shared state: result files (count and bytes), pod-reported
events, TensorBoard bytes and metric rows (docs/operations.md "Caps on what a job writes").

Each attempt's usage is one `AttemptUsage` row, locked while a write is checked and counted, so concurrent
uploads of one attempt cannot pass a cap together and other jobs never wait on it. The first time a cap is
reached it is recorded by one `caps` job event naming the cap and its limit; later refusals of the same cap
add nothing. The limits come from `tenants.policy.write_caps` (the tenant's overrides, else settings).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction

from common.transactions import durable_service
from jobs.core.choices import EventKind, Reason
from jobs.models import AttemptUsage, Job, JobEvent, ResultFile
from tenants.policy import WriteCaps

# cap name: (the job event's reason, what the cap counts, the HTTP status of a refusal). Counts answer 409,
# not 429: the launcher retries 408/429 for minutes, and a cap does not lift by waiting.
CAPS: dict[str, tuple[Reason, str, int]] = {
    "result_max_files": (Reason.RESULT_FILES_CAPPED, "result files", 409),
    "result_max_bytes": (Reason.RESULT_BYTES_CAPPED, "bytes of result files", 413),
    "pod_reports_max": (Reason.POD_REPORTS_CAPPED, "completion reports and other pod-reported events", 409),
    "tensorboard_max_bytes": (Reason.TENSORBOARD_BYTES_CAPPED, "bytes of TensorBoard event files", 413),
    "tensorboard_piece_max_rows": (
        Reason.TENSORBOARD_ROWS_CAPPED,
        "metric rows from one TensorBoard piece",
        413,
    ),
    "tensorboard_max_rows": (Reason.TENSORBOARD_ROWS_CAPPED, "metric rows from TensorBoard event files", 413),
}


@dataclass(frozen=True)
class CapHit:
    """A write refused (or cut) by a cap: which cap, its limit, and the message for the pod."""

    cap: str
    limit: int
    message: str

    @property
    def status(self) -> int:
        """The HTTP status a pod endpoint answers with."""
        return CAPS[self.cap][2]

    def body(self) -> dict[str, object]:
        """The JSON a pod endpoint answers with."""
        return {"detail": self.message, "cap": self.cap, "limit": self.limit}


def usage_locked(*, job: Job, attempt: int) -> AttemptUsage:
    """The attempt's usage row, created if needed and locked until the caller's transaction ends."""
    usage = AttemptUsage.objects.select_for_update().filter(job=job, attempt=attempt).first()
    if usage is not None:
        return usage
    try:
        with transaction.atomic():
            AttemptUsage.objects.create(job=job, attempt=attempt)
    except IntegrityError:  # created by a concurrent write of the same attempt
        pass
    return AttemptUsage.objects.select_for_update().get(job=job, attempt=attempt)


def cap_reached(*, usage: AttemptUsage, cap: str, limit: int, detail: str = "") -> CapHit:
    """Record that the attempt reached `cap` (one job event the first time) and say so; the caller saves
    `usage` or has it saved by a later write in the same transaction."""
    reason, what, _ = CAPS[cap]
    message = f"attempt {usage.attempt} reached its cap of {limit} {what} ({cap})"
    if detail:
        message = f"{message}: {detail}"
    if cap not in usage.capped:
        usage.capped = [*usage.capped, cap]
        AttemptUsage.objects.filter(pk=usage.pk).update(capped=usage.capped)
        JobEvent.objects.create(
            job_id=usage.job_id,
            kind=EventKind.CAPS,
            reason=reason,
            message=message,
            data={"attempt": usage.attempt, "cap": cap, "limit": limit},
        )
    return CapHit(cap, limit, message)


@dataclass(frozen=True)
class Reservation:
    """Room taken for one result file before its bytes are stored: what to give back if storing fails."""

    job_id: str
    attempt: int
    files: int
    size: int


@durable_service
def result_room(*, job: Job, attempt: int, learner: int, path: str, caps: WriteCaps) -> int | CapHit:
    """Before a result file's bytes are read: how many bytes it may have under the attempt's byte cap, or
    the file-count cap it would pass (recorded once). `result_reserve` counts it once its size is known."""
    usage = usage_locked(job=job, attempt=attempt)
    held = _held_size(job, attempt, learner, path)
    if held is None and usage.result_files + 1 > caps.result_max_files:
        return cap_reached(
            usage=usage, cap="result_max_files", limit=caps.result_max_files, detail=f"{path} was not stored"
        )
    return max(caps.result_max_bytes - usage.result_bytes + (held or 0), 0)


def _held_size(job: Job, attempt: int, learner: int, path: str) -> int | None:
    return (
        ResultFile.objects.filter(job=job, attempt=attempt, learner=learner, path=path)
        .values_list("size", flat=True)
        .first()
    )


@durable_service
def result_reserve(
    *, job: Job, attempt: int, learner: int, path: str, size: int, caps: WriteCaps
) -> Reservation | CapHit:
    """Count a result file of `size` bytes against the attempt's caps (a file that replaces one of the same
    path counts only its growth), or refuse it with the cap it would pass (recorded once)."""
    usage = usage_locked(job=job, attempt=attempt)
    held = _held_size(job, attempt, learner, path)
    files = 0 if held is not None else 1
    growth = size - (held or 0)
    if usage.result_files + files > caps.result_max_files:
        return cap_reached(
            usage=usage,
            cap="result_max_files",
            limit=caps.result_max_files,
            detail=f"{path} was not stored",
        )
    if usage.result_bytes + growth > caps.result_max_bytes:
        return cap_reached(
            usage=usage,
            cap="result_max_bytes",
            limit=caps.result_max_bytes,
            detail=f"{path} would pass it and was not stored; {usage.result_bytes} bytes are held",
        )
    usage.result_files += files
    usage.result_bytes += growth
    usage.save(update_fields=["result_files", "result_bytes"])
    return Reservation(job.pk, attempt, files, growth)


@durable_service
def result_release(*, reservation: Reservation) -> None:
    """Give back what `result_reserve` counted for a file that could not be stored after all."""
    usage = AttemptUsage.objects.select_for_update().filter(
        job_id=reservation.job_id, attempt=reservation.attempt
    )
    for row in usage:
        row.result_files = max(row.result_files - reservation.files, 0)
        row.result_bytes = max(row.result_bytes - reservation.size, 0)
        row.save(update_fields=["result_files", "result_bytes"])


def report_counted(*, job: Job, attempt: int, caps: WriteCaps) -> CapHit | None:
    """Count one pod-reported event of the attempt (inside the caller's transaction), or say that the cap
    is reached (recorded once), in which case the caller records nothing."""
    usage = usage_locked(job=job, attempt=attempt)
    if usage.reports >= caps.pod_reports_max:
        return cap_reached(usage=usage, cap="pod_reports_max", limit=caps.pod_reports_max)
    usage.reports += 1
    usage.save(update_fields=["reports"])
    return None

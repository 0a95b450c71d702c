"""Storing a learner's TensorBoard event files piece by piece, and reading their scalars into the job's
metrics on a Celery worker.

Each upload is one piece of one file at a byte offset (docs/artifacts.md). The web request only stores the
piece, counts its bytes against the attempt's cap, and queues `jobs.tensorboard.parse` for the file once
it commits: parsing (protobuf decoding, up to a piece's worth of records at a time) never runs in a web
process, where one tenant's large piece would slow every other tenant's requests. The task reads the whole
records past `parsed`, at most one piece's worth of bytes per run (it queues itself again while more are
whole), without holding any lock while it decodes; it then stores the points under the file's row lock,
only if nobody moved `parsed` meanwhile, so a task run twice or two at once store each point once. Points
carry `log_seq` 0 (they come from no log line) and are stored once per (attempt, learner, metric, step).

Caps (jobs/services/caps.py): a piece's bytes past the attempt's TensorBoard byte cap are refused; rows of
one run past `tensorboard_piece_max_rows`, and rows past the attempt's `tensorboard_max_rows`, are dropped,
each cap recorded by one `caps` event; once the attempt's row cap is reached its files are no longer read.
A damaged file stops being read and becomes one `tensorboard` job event (a pod-reported event, counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common.transactions import durable_service
from jobs.artifacts.storage import artifact_storage, artifacts_delete
from jobs.core.choices import EventKind, Reason
from jobs.core.eventfiles import HEADER_BYTES, ScalarPoint, read_scalars, record_length, run_of
from jobs.models import AttemptUsage, EventFile, Job, JobEvent, MetricSample
from jobs.services.caps import CapHit, cap_reached, report_counted, usage_locked
from jobs.services.lifecycle import enqueue
from jobs.streams import job_group, send_after_commit
from tenants.policy import WriteCaps

TENSORBOARD_POINT_SEQ = 0  # MetricSample.log_seq of points that come from event files, not log lines
PARSE_TASK = "jobs.tensorboard.parse"  # jobs/tensorboard/tasks.py


class OffsetConflict(Exception):
    """The piece does not start where the stored file ends (nor at 0, which starts the file again)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the platform holds {size} bytes of this file; send from there")
        self.size = size


class TooManyFiles(Exception):
    """The learner already sent as many event files as one attempt may."""


@durable_service
def event_file_append(
    *,
    job: Job,
    attempt: int,
    learner: int,
    path: str,
    offset: int,
    size: int,
    stored_name: str,
    max_files: int,
    caps: WriteCaps,
) -> EventFile | CapHit:
    """Add the piece of `size` bytes (already in artifact storage as `stored_name`) at `offset` of a learner's
    event file and queue its parse; OffsetConflict or TooManyFiles refuse it, and a CapHit says the piece
    would pass the attempt's TensorBoard byte cap (nothing is added)."""
    row = (
        EventFile.objects.select_for_update()
        .filter(job=job, attempt=attempt, learner=learner, path=path)
        .first()
    )
    if row is None:
        if EventFile.objects.filter(job=job, attempt=attempt, learner=learner).count() >= max_files:
            raise TooManyFiles(f"learner {learner} already sent {max_files} event files in this attempt")
        created, _ = EventFile.objects.get_or_create(job=job, attempt=attempt, learner=learner, path=path)
        row = EventFile.objects.select_for_update().get(pk=created.pk)
    if offset not in (row.size, 0):
        raise OffsetConflict(row.size)
    usage = usage_locked(job=job, attempt=attempt)
    growth = size - (row.size if offset == 0 else 0)
    if usage.tensorboard_bytes + growth > caps.tensorboard_max_bytes:
        return cap_reached(
            usage=usage,
            cap="tensorboard_max_bytes",
            limit=caps.tensorboard_max_bytes,
            detail=f"a piece of {path} was not stored; {usage.tensorboard_bytes} bytes are held",
        )
    usage.tensorboard_bytes += growth
    usage.save(update_fields=["tensorboard_bytes"])
    if offset == 0 and row.size:
        replaced = [name for _, _, name in row.chunks if name != stored_name]
        transaction.on_commit(lambda: artifacts_delete(replaced))
        row.size, row.parsed, row.chunks, row.tags, row.error = 0, 0, [], {}, ""
    row.chunks = [*row.chunks, [offset, size, stored_name]]
    row.size = offset + size
    row.save()
    enqueue(PARSE_TASK, row.pk)
    return row


@dataclass(frozen=True)
class Parsed:
    """What one parse run did: the points it stored, and whether whole records may remain to be read."""

    points: int = 0
    more: bool = False


def event_file_parse(*, event_file_id: int, caps: WriteCaps) -> Parsed:
    """Read the next whole records of an event file (at most one piece's worth of bytes, or one record when
    a record is larger) and store their scalars as the job's metrics, within the caps. Runs on a worker;
    decoding holds no lock, and the result is stored only if nobody read the same records meanwhile."""
    row = EventFile.objects.filter(pk=event_file_id).first()
    if row is None or row.error or row.parsed >= row.size:
        return Parsed()
    start, chunks = row.parsed, [list(c) for c in row.chunks]
    header = _stored_bytes(chunks, start, start + HEADER_BYTES)
    if len(header) < HEADER_BYTES:
        return Parsed()
    length = record_length(header)
    if length is not None and row.size - start < length:
        return Parsed()  # the next record's end has not come yet: the piece that brings it queues a run
    if AttemptUsage.objects.filter(
        job_id=row.job_id, attempt=row.attempt, tensorboard_rows__gte=caps.tensorboard_max_rows
    ).exists():
        _stop_at_row_cap(event_file_id, caps)
        return Parsed()
    end = min(row.size, start + max(caps.tensorboard_piece_max_bytes, length or 0))
    found = read_scalars(_stored_bytes(chunks, start, end), run=run_of(row.path), tags=row.tags)
    with transaction.atomic(durable=True):
        locked = EventFile.objects.select_for_update().filter(pk=event_file_id).first()
        if locked is None or locked.parsed != start or locked.error or locked.chunks[: len(chunks)] != chunks:
            return Parsed()  # another run read these records, or the file was started again
        stored = _store_points(locked, found.points, caps)
        locked.parsed += found.consumed
        locked.tags = found.tags
        if found.error:
            _damaged(locked, found.error, caps)
        locked.save(update_fields=["parsed", "tags", "error", "updated_at"])
        more = not locked.error and found.consumed > 0 and locked.parsed + HEADER_BYTES <= locked.size
    return Parsed(stored, more)


@durable_service
def _stop_at_row_cap(event_file_id: int, caps: WriteCaps) -> None:
    """The attempt's metric rows are at their cap: read nothing more of this file."""
    capped = EventFile.objects.select_for_update().filter(pk=event_file_id, error="").first()
    if capped is not None:
        _rows_capped(capped, usage_locked(job=capped.job, attempt=capped.attempt), caps)
        capped.save(update_fields=["error", "updated_at"])


def _store_points(row: EventFile, points: list[ScalarPoint], caps: WriteCaps) -> int:
    """Store the new points of one run, cut to the piece's and the attempt's row caps (each cap recorded
    once); at the attempt's cap the file stops being read."""
    usage = usage_locked(job=row.job, attempt=row.attempt)
    samples = _new_samples(row.job_id, row.attempt, row.learner, points)
    if len(samples) > caps.tensorboard_piece_max_rows:
        cap_reached(
            usage=usage,
            cap="tensorboard_piece_max_rows",
            limit=caps.tensorboard_piece_max_rows,
            detail=f"{len(samples) - caps.tensorboard_piece_max_rows} point(s) of {row.path} were dropped",
        )
        samples = samples[: caps.tensorboard_piece_max_rows]
    room = max(caps.tensorboard_max_rows - usage.tensorboard_rows, 0)
    if len(samples) > room:
        _rows_capped(row, usage, caps)
        samples = samples[:room]
    MetricSample.objects.bulk_create(samples)
    usage.tensorboard_rows += len(samples)
    usage.save(update_fields=["tensorboard_rows"])
    if samples:
        send_after_commit(
            job_group(row.job_id),
            {
                "kind": "metrics",
                "learner": row.learner,
                "metrics": [[s.name, s.step, s.value, TENSORBOARD_POINT_SEQ] for s in samples],
            },
        )
    return len(samples)


def _rows_capped(row: EventFile, usage: AttemptUsage, caps: WriteCaps) -> None:
    """The attempt reached its cap on TensorBoard metric rows: say so once, and stop reading this file."""
    cap_reached(
        usage=usage,
        cap="tensorboard_max_rows",
        limit=caps.tensorboard_max_rows,
        detail="the rest of the attempt's event files is not read",
    )
    row.error = f"the attempt reached its cap of {caps.tensorboard_max_rows} TensorBoard metric rows"


def _damaged(row: EventFile, error: str, caps: WriteCaps) -> None:
    """Stop reading a damaged file and say so in one job event (unless the attempt's pod-reported events
    are capped)."""
    row.error = error
    if report_counted(job=row.job, attempt=row.attempt, caps=caps) is not None:
        return
    JobEvent.objects.create(
        job_id=row.job_id,
        kind=EventKind.TENSORBOARD,
        reason=Reason.EVENT_FILE_DAMAGED,
        message=f"learner {row.learner}'s event file {row.path} is damaged: {error}; its scalars up "
        f"to there are kept, the rest of the file is not read",
        data={"attempt": row.attempt, "learner": row.learner, "path": row.path, "at": row.parsed},
    )


@durable_service
def event_file_given_up(*, event_file_id: int, why: str) -> None:
    """Stop reading a file whose parse cannot finish (it ran past its time limit), so it is not queued
    again forever; its points so far are kept."""
    EventFile.objects.filter(pk=event_file_id, error="").update(error=why)


def event_files_unparsed(*, quiet_seconds: float = 30.0) -> list[int]:
    """Files of the last day with bytes left to read and no reason to stop, untouched for `quiet_seconds`:
    their parse task may have been lost (a run that finds no whole record changes nothing)."""
    now = timezone.now()
    return list(
        EventFile.objects.filter(
            error="",
            parsed__lte=F("size") - HEADER_BYTES,
            updated_at__lt=now - timedelta(seconds=quiet_seconds),
            updated_at__gte=now - timedelta(days=1),
        ).values_list("pk", flat=True)[:1000]
    )


def _stored_bytes(chunks: list[Any], start: int, end: int) -> bytes:
    """Bytes `start`..`end` of a file from the stored pieces that hold them."""
    parts = []
    storage = artifact_storage()
    for piece_start, length, name in chunks:
        low, high = max(start, piece_start), min(end, piece_start + length)
        if low >= high:
            continue
        with storage.open(name, "rb") as piece:
            piece.seek(low - piece_start)
            parts.append(piece.read(high - low))
    return b"".join(parts)


def _new_samples(job_id: str, attempt: int, learner: int, points: list[ScalarPoint]) -> list[MetricSample]:
    """The points not stored before for this attempt and learner (one per metric and step)."""
    if not points:
        return []
    steps = [p.step for p in points]
    held = set(
        MetricSample.objects.filter(
            job_id=job_id,
            attempt=attempt,
            learner=learner,
            log_seq=TENSORBOARD_POINT_SEQ,
            name__in={p.name for p in points},
            step__gte=min(steps),
            step__lte=max(steps),
        ).values_list("name", "step")
    )
    samples = []
    for point in points:
        if (point.name, point.step) in held:
            continue
        held.add((point.name, point.step))
        samples.append(
            MetricSample(
                job_id=job_id,
                attempt=attempt,
                learner=learner,
                name=point.name,
                step=point.step,
                value=point.value,
                ts=datetime.fromtimestamp(point.wall_time, tz=UTC),
                log_seq=TENSORBOARD_POINT_SEQ,
            )
        )
    return samples

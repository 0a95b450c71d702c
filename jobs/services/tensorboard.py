"""Storing a learner's TensorBoard event files piece by piece, and their scalars as the job's metrics.

Each upload is one piece of one file at a byte offset (docs/artifacts.md). The scalars of the whole records
it completes are read here, in the upload's request: the bytes are already at hand, the work is bounded by
the upload's size (plus the one record the previous piece left unfinished), and the points reach the job's
charts as soon as the pod sent them, with no queue in between. Points carry `log_seq` 0 (they come from no
log line) and are stored once per (attempt, learner, metric, step): sending a file again, or from its start,
adds nothing twice. A damaged file stops being read and becomes one `tensorboard` job event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction

from common.transactions import durable_service
from jobs.artifacts.storage import artifact_storage, artifacts_delete
from jobs.core.choices import EventKind, Reason
from jobs.core.eventfiles import HEADER_BYTES, ScalarPoint, read_scalars, record_length, run_of
from jobs.models import EventFile, Job, JobEvent, MetricSample
from jobs.streams import job_group, send_after_commit

TENSORBOARD_POINT_SEQ = 0  # MetricSample.log_seq of points that come from event files, not log lines


class OffsetConflict(Exception):
    """The piece does not start where the stored file ends (nor at 0, which starts the file again)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the platform holds {size} bytes of this file; send from there")
        self.size = size


class TooManyFiles(Exception):
    """The learner already sent as many event files as one attempt may."""


@dataclass
class PieceStored:
    """What storing one piece did: the file's row and the metric points it added."""

    event_file: EventFile
    points: list[MetricSample] = field(default_factory=list)


@durable_service
def event_file_append(
    *,
    job: Job,
    attempt: int,
    learner: int,
    path: str,
    offset: int,
    data: bytes,
    stored_name: str,
    max_files: int,
) -> PieceStored:
    """Add the piece `data` (already in artifact storage as `stored_name`) at `offset` of a learner's event
    file and store the scalars of the records it completes; OffsetConflict or TooManyFiles refuse it."""
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
    if offset == 0 and row.size:
        replaced = [name for _, _, name in row.chunks if name != stored_name]
        transaction.on_commit(lambda: artifacts_delete(replaced))
        row.size, row.parsed, row.chunks, row.tags, row.error = 0, 0, [], {}, ""
    row.chunks = [*row.chunks, [offset, len(data), stored_name]]
    row.size = offset + len(data)
    fresh = (stored_name, data)
    samples: list[MetricSample] = []
    if not row.error and _next_record_arrived(row, fresh):
        pending = _stored_bytes(row, row.parsed, row.size, fresh)
        found = read_scalars(pending, run=run_of(path), tags=row.tags)
        row.parsed += found.consumed
        row.tags = found.tags
        samples = _new_samples(job, attempt, learner, found.points)
        MetricSample.objects.bulk_create(samples)
        if found.error:
            row.error = found.error
            JobEvent.objects.create(
                job=job,
                kind=EventKind.TENSORBOARD,
                reason=Reason.EVENT_FILE_DAMAGED,
                message=f"learner {learner}'s event file {path} is damaged: {found.error}; its scalars up "
                f"to there are kept, the rest of the file is not read",
                data={"attempt": attempt, "learner": learner, "path": path, "at": row.parsed},
            )
    row.save()
    if samples:
        send_after_commit(
            job_group(job.pk),
            {
                "kind": "metrics",
                "learner": learner,
                "metrics": [[s.name, s.step, s.value, TENSORBOARD_POINT_SEQ] for s in samples],
            },
        )
    return PieceStored(row, samples)


def _stored_bytes(row: EventFile, start: int, end: int, fresh: tuple[str, bytes]) -> bytes:
    """Bytes `start`..`end` of the file: from the piece just received, and from storage for earlier ones."""
    parts = []
    storage = artifact_storage()
    for piece_start, length, name in row.chunks:
        low, high = max(start, piece_start), min(end, piece_start + length)
        if low >= high:
            continue
        if name == fresh[0]:
            parts.append(fresh[1][low - piece_start : high - piece_start])
            continue
        with storage.open(name, "rb") as piece:
            piece.seek(low - piece_start)
            parts.append(piece.read(high - low))
    return b"".join(parts)


def _next_record_arrived(row: EventFile, fresh: tuple[str, bytes]) -> bool:
    """Whether the record at `row.parsed` is whole now (or its header is damaged, which reading reports). A
    large record arriving in many pieces is read once, when its end has come, never again per piece."""
    header = _stored_bytes(row, row.parsed, row.parsed + HEADER_BYTES, fresh)
    if len(header) < HEADER_BYTES:
        return False
    length = record_length(header)
    return length is None or row.size - row.parsed >= length


def _new_samples(job: Job, attempt: int, learner: int, points: list[ScalarPoint]) -> list[MetricSample]:
    """The points not stored before for this attempt and learner (one per metric and step)."""
    if not points:
        return []
    steps = [p.step for p in points]
    held = set(
        MetricSample.objects.filter(
            job=job,
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
                job=job,
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

"""Storing a learner's log lines: ordered, never twice, capped, with their metric points, published after
commit.

Ingest must never stall the engine for anyone else. So everything slow happens before the transaction:
reading the learner's position, applying the log caps (jobs/core/logcaps.py) and running the user's metric
patterns (RE2, jobs/core/metricparse.py). The transaction only inserts the prepared rows and moves the
learner's position on, guarded by the sequence it started from (`log_seq`): no row is locked for reading,
the Job row not at all (the inserts' foreign-key checks take PostgreSQL's weakest row lock, FOR KEY SHARE,
which no state change waits for), and the learner row only by the final UPDATE, just before the commit. A
second follower of the same learner (a watcher restarting) that read the same position loses: its insert
hits the unique sequence or its guarded UPDATE finds the position moved, and it rolls back whole
(`LogPositionMoved`), so no line is stored twice or lost.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from common.telemetry import count as metrics_count
from jobs.core.choices import EventKind, Reason
from jobs.core.logcaps import LogCaps, LogMeter, cut_line, marker
from jobs.core.metricparse import Extractor, checkpoint_step, extractors_for, parse_metric_line
from jobs.models import Job, JobEvent, Learner, LogLine, MetricSample
from jobs.streams import job_group, send_after_commit
from tenants.policy import policy_of

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
SAVE_DROPPED_EVERY = 1.0  # seconds: how often a follower whose every line is dropped saves its position


class LogPositionMoved(Exception):
    """Another follower stored lines of this learner since this batch was prepared: nothing was stored;
    resume from the stored cursor."""


@dataclass
class LogIngest:
    """What a follower keeps between batches (built by `logs_ingest` from the stored row): the learner's
    stored position (`log_seq`, the guard of the next write, and `top`, the last sequence of any attempt),
    the caps and counters of its attempt (the rate window lives only here), and the job's compiled metric
    patterns."""

    job_id: str
    attempt: int
    learner: int
    learner_pk: int
    log_seq: int
    top: int
    meter: LogMeter
    extractors: tuple[Extractor, ...] = field(default=())
    saved_at: float = 0.0


def log_caps(*, tenant: Any) -> LogCaps:
    """The log caps of a tenant's learners: its policy's overrides, else the platform's defaults."""
    policy = policy_of(tenant)

    def pick(override: int | None, default: int) -> int:
        return int(override) if override is not None else int(default)

    return LogCaps(
        lines_per_second=pick(policy.log_max_lines_per_second, settings.LOG_MAX_LINES_PER_SECOND),
        bytes_per_second=pick(policy.log_max_bytes_per_second, settings.LOG_MAX_BYTES_PER_SECOND),
        lines=pick(policy.log_max_lines, settings.LOG_MAX_LINES),
        bytes=pick(policy.log_max_bytes, settings.LOG_MAX_BYTES),
    )


def logs_ingest(*, job_id: str, attempt: int, learner: int) -> LogIngest:
    """The ingest state of one learner's attempt as stored (Learner.DoesNotExist once it is gone)."""
    row = Learner.objects.get(job_id=job_id, attempt=attempt, index=learner)
    job = Job.objects.select_related("tenant").get(pk=job_id)
    meter = LogMeter(
        caps=log_caps(tenant=job.tenant),
        lines=row.log_lines,
        bytes=row.log_bytes,
        dropped=row.log_dropped,
        truncated=row.log_truncated,
    )
    return LogIngest(
        job_id=job_id,
        attempt=attempt,
        learner=learner,
        learner_pk=row.pk,
        log_seq=row.log_seq,
        top=row.log_seq or _last_seq(job_id, learner),
        meter=meter,
        extractors=extractors_for(job.spec.get("evaluation_metrics")),
    )


@dataclass
class _Batch:
    """One batch made ready outside any transaction."""

    lines: list[LogLine]
    samples: list[MetricSample]
    meter: LogMeter
    truncated_now: str | None
    checkpoint: tuple[datetime, int] | None


class _PreparedService(Generic[P, R]):
    """A service entry point like `durable_service`'s (refused inside a caller's transaction, `.nested` to
    compose) whose work opens its transaction itself, after the slow part: `work(durable, ...)`."""

    def __init__(self, work: Callable[Concatenate[bool, P], R]) -> None:
        functools.update_wrapper(self, work)
        self._work = work

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if _inside_callers_transaction():
            raise RuntimeError("a durable service cannot run inside another atomic block")
        return self._work(True, *args, **kwargs)

    def nested(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """The same work inside the caller's transaction (a savepoint)."""
        return self._work(False, *args, **kwargs)


def _inside_callers_transaction() -> bool:
    """Django's own test for a durable block, made before any work (a test case's wrapping block is none)."""
    blocks = connection.atomic_blocks
    return bool(blocks) and not getattr(blocks[-1], "_from_testcase", False)


def _logs_append(
    durable: bool,
    /,
    *,
    job_id: str,
    attempt: int,
    learner: int,
    records: Sequence[tuple[datetime | None, str]],
    cursor: tuple[datetime | None, int],
    done: bool = False,
    ingest: LogIngest | None = None,
) -> list[LogLine]:
    """Store a batch of log lines with the follower's cursor, numbering them on from the learner's last
    sequence, dropping what is over its caps and extracting metric lines; then push both to live viewers.
    `ingest` carries the follower's state between batches (a fresh one when None)."""
    state = ingest or logs_ingest(job_id=job_id, attempt=attempt, learner=learner)
    batch = _prepare(state, records)
    now = time.monotonic()
    if not batch.lines and not done and records and now - state.saved_at < SAVE_DROPPED_EVERY:
        state.meter = batch.meter  # all dropped: the position and counters are saved with a later batch
        return []
    with transaction.atomic(durable=durable):
        _store(state, batch, cursor, done)
    state.meter, state.saved_at = batch.meter, now
    if batch.lines:
        state.log_seq = state.top = batch.lines[-1].seq
        metrics_count("log_lines", len(batch.lines))
    return batch.lines


logs_append = _PreparedService(_logs_append)


def _prepare(state: LogIngest, records: Sequence[tuple[datetime | None, str]]) -> _Batch:
    """Number, cap and parse a batch, from the follower's state alone: no database access at all."""
    meter = state.meter.copy()
    seq = state.top
    lines: list[LogLine] = []
    samples: list[MetricSample] = []
    truncated_now = None
    checkpoint = None
    for ts, raw in records:
        # PostgreSQL text cannot hold NUL: show it as U+FFFD rather than lose the whole batch.
        text = cut_line(raw.replace("\x00", "\ufffd"))
        second = int(ts.timestamp()) if ts is not None else None
        over = meter.exceeded(second=second, size=len(text.encode("utf-8", "replace")))
        if over is not None:
            if not meter.truncated:
                meter.truncated, truncated_now = True, over
                seq += 1
                note = marker(over, meter.caps)
                meter.lines += 1
                meter.bytes += len(note.encode())
                lines.append(_line(state, seq, ts, note))
            continue
        seq += 1
        lines.append(_line(state, seq, ts, text))
        for point in parse_metric_line(text, state.extractors):
            step = checkpoint_step(point)
            if step is not None:
                checkpoint = (ts or timezone.now(), step)
            samples.append(
                MetricSample(
                    job_id=state.job_id,
                    learner=state.learner,
                    attempt=state.attempt,
                    name=point.name,
                    step=point.step,
                    value=point.value,
                    ts=ts,
                    log_seq=seq,
                )
            )
    return _Batch(lines, samples, meter, truncated_now, checkpoint)


def _line(state: LogIngest, seq: int, ts: datetime | None, text: str) -> LogLine:
    return LogLine(
        job_id=state.job_id, learner=state.learner, attempt=state.attempt, seq=seq, ts=ts, text=text
    )


def _store(state: LogIngest, batch: _Batch, cursor: tuple[datetime | None, int], done: bool) -> None:
    """Insert the prepared rows and move the learner's position on, if nobody moved it meanwhile."""
    LogLine.objects.bulk_create(batch.lines)
    MetricSample.objects.bulk_create(batch.samples)
    meter = batch.meter
    if batch.truncated_now is not None:
        JobEvent.objects.create(
            job_id=state.job_id,
            kind=EventKind.LOGS,
            reason=Reason.LOGS_TRUNCATED,
            message=f"learner {state.learner}'s log was truncated: {batch.truncated_now}; lines over the caps "
            "are dropped from here on",
            data={
                "learner": state.learner,
                "attempt": state.attempt,
                "exceeded": batch.truncated_now,
                "caps": {
                    "lines_per_second": meter.caps.lines_per_second,
                    "bytes_per_second": meter.caps.bytes_per_second,
                    "lines": meter.caps.lines,
                    "bytes": meter.caps.bytes,
                },
            },
        )
    fields: dict[str, Any] = {
        "log_seq": batch.lines[-1].seq if batch.lines else state.log_seq,
        "log_cursor_ts": cursor[0],
        "log_cursor_seen": cursor[1],
        "log_lines": meter.lines,
        "log_bytes": meter.bytes,
        "log_dropped": meter.dropped,
        "log_truncated": meter.truncated,
        "updated_at": timezone.now(),
    }
    if batch.checkpoint is not None:
        fields["checkpoint_at"], fields["checkpoint_step"] = batch.checkpoint
    if done:
        fields["log_done"] = True
    if not Learner.objects.filter(pk=state.learner_pk, log_seq=state.log_seq).update(**fields):
        raise LogPositionMoved(f"learner {state.learner} of {state.job_id}/{state.attempt} moved on")
    if batch.lines:
        send_after_commit(
            job_group(state.job_id),
            {
                "kind": "logs",
                "learner": state.learner,
                "lines": [[line.seq, line.text] for line in batch.lines],
                "metrics": [[s.name, s.step, s.value, s.log_seq] for s in batch.samples],
            },
        )


def _last_seq(job_id: str, learner: int) -> int:
    """The highest sequence any attempt of this learner stored (0 for none)."""
    found = LogLine.objects.filter(job_id=job_id, learner=learner).aggregate(top=Max("seq"))["top"]
    return int(found or 0)

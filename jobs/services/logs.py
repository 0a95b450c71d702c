"""Storing a learner's log lines: ordered, never twice, with their metric points, published after commit."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from django.db.models import Max
from django.utils import timezone

from common.telemetry import count as metrics_count
from common.transactions import durable_service
from jobs.core.metricparse import checkpoint_step, extractors_for, parse_metric_line
from jobs.models import Learner, LogLine, MetricSample
from jobs.streams import job_group, send_after_commit

log = logging.getLogger(__name__)
MAX_LOG_LINE = 8192


@durable_service
def logs_append(
    *,
    job_id: str,
    attempt: int,
    learner: int,
    records: Sequence[tuple[datetime | None, str]],
    cursor: tuple[datetime | None, int],
    done: bool = False,
) -> list[LogLine]:
    """Store a batch of log lines with the follower's cursor in one transaction, numbering them on from
    the learner's last sequence; extract metric lines; then push both to live viewers."""
    row = (
        Learner.objects.select_for_update()
        .select_related("job")
        .get(job_id=job_id, attempt=attempt, index=learner)
    )
    extractors = extractors_for(row.job.spec.get("evaluation_metrics"))
    seq = row.log_seq or _last_seq(job_id, learner)
    lines = []
    samples = []
    for ts, raw in records:
        seq += 1
        # PostgreSQL text cannot hold NUL: show it as U+FFFD rather than lose the whole batch.
        text = raw.replace("\x00", "\ufffd")
        lines.append(
            LogLine(job_id=job_id, learner=learner, attempt=attempt, seq=seq, ts=ts, text=text[:MAX_LOG_LINE])
        )
        for point in parse_metric_line(text, extractors):
            step = checkpoint_step(point)
            if step is not None:
                row.checkpoint_at, row.checkpoint_step = ts or timezone.now(), step
            samples.append(
                MetricSample(
                    job_id=job_id,
                    learner=learner,
                    attempt=attempt,
                    name=point.name,
                    step=point.step,
                    value=point.value,
                    ts=ts,
                    log_seq=seq,
                )
            )
    LogLine.objects.bulk_create(lines)
    MetricSample.objects.bulk_create(samples)
    row.log_seq = seq
    row.log_cursor_ts, row.log_cursor_seen = cursor
    row.log_done = row.log_done or done
    row.save(
        update_fields=[
            "log_seq", "log_cursor_ts", "log_cursor_seen", "log_done", "checkpoint_at", "checkpoint_step",
            "updated_at",
        ]
    )  # fmt: skip
    if lines:
        send_after_commit(
            job_group(job_id),
            {
                "kind": "logs",
                "learner": learner,
                "lines": [[line.seq, line.text] for line in lines],
                "metrics": [[s.name, s.step, s.value, s.log_seq] for s in samples],
            },
        )
    if lines:
        metrics_count("log_lines", len(lines))
    return lines


def _last_seq(job_id: str, learner: int) -> int:
    """The highest sequence any attempt of this learner stored (0 for none)."""
    found = LogLine.objects.filter(job_id=job_id, learner=learner).aggregate(top=Max("seq"))["top"]
    return int(found or 0)

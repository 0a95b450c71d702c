"""Celery tasks that read TensorBoard event files into metrics (jobs/services/tensorboard.py): thin, id-taking,
idempotent. `parse` reads one file's next whole records and queues itself again while more are whole;
`sweep` (beat) queues the files whose task was lost."""

from __future__ import annotations

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings

from jobs.models import EventFile
from jobs.services.lifecycle import enqueue
from jobs.services.tensorboard import PARSE_TASK, event_file_given_up, event_file_parse, event_files_unparsed
from tenants.policy import write_caps


@shared_task(
    name="jobs.tensorboard.parse",
    acks_late=True,
    soft_time_limit=settings.TENSORBOARD_PARSE_SECONDS,
    time_limit=settings.TENSORBOARD_PARSE_SECONDS + 30,
)
def parse(event_file_id: int) -> dict[str, object]:
    """Read the next piece's worth of one event file's records into metrics; a run past its time limit gives
    the rest of the file up (one file cannot hold a worker forever)."""
    row = EventFile.objects.select_related("job__tenant").filter(pk=event_file_id).first()
    if row is None:
        return {"points": 0, "more": False}
    try:
        done = event_file_parse(event_file_id=event_file_id, caps=write_caps(row.job.tenant))
    except SoftTimeLimitExceeded:
        event_file_given_up(
            event_file_id=event_file_id,
            why=f"reading it took longer than {settings.TENSORBOARD_PARSE_SECONDS} s; the rest is not read",
        )
        return {"points": 0, "more": False, "gave_up": True}
    if done.more:
        enqueue(PARSE_TASK, event_file_id)
    return {"points": done.points, "more": done.more}


@shared_task(name="jobs.tensorboard.sweep", acks_late=True, soft_time_limit=30, time_limit=45)
def sweep() -> dict[str, int]:
    """Queue a parse for every recent event file with records left to read (its task may have been lost)."""
    due = event_files_unparsed()
    for pk in due:
        parse.delay(pk)
    return {"queued": len(due)}

"""A job's event files, from artifact storage into the local folder its TensorBoard reads.

Runs are laid out as `attempt-<n>/learner-<i>/<path the learner sent>`. Files only grow between uploads,
so a sync appends the pieces the local copy lacks (TensorBoard reads a growing file as it grows); a file
that was started again (a piece at 0 replaced it) is copied whole.
"""

from __future__ import annotations

from pathlib import Path

from jobs.artifacts.storage import artifact_storage
from jobs.models import EventFile, Job


def event_file_local_path(logdir: Path, row: EventFile) -> Path:
    """Where one event file lives under a job's TensorBoard folder."""
    return logdir / f"attempt-{row.attempt}" / f"learner-{row.learner}" / row.path


def event_files_sync(*, job: Job, logdir: Path) -> int:
    """Bring the local copies of the job's event files up to what storage holds; returns bytes written."""
    storage = artifact_storage()
    written = 0
    for row in EventFile.objects.filter(job=job).order_by("attempt", "learner", "path"):
        target = event_file_local_path(logdir, row)
        if logdir.resolve() not in target.resolve().parents:
            continue
        have = target.stat().st_size if target.exists() else 0
        starts = {start for start, _, _ in row.chunks}
        mode = "ab"
        if have > row.size or (have and have < row.size and have not in starts):
            have, mode = 0, "wb"
        if have == row.size and target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open(mode) as local:
            for start, _, name in row.chunks:
                if start < have:
                    continue
                with storage.open(name, "rb") as piece:
                    data = piece.read()
                local.write(data)
                written += len(data)
    return written

"""Trainyard's job states in FfDL's status vocabulary, for the FfDL-compatible REST API (jobs/ffdl_api).

FfDL's trainer knows NOT_STARTED, PENDING, HALTED, FAILED, DEPLOY, DOWNLOADING, PROCESSING, STORING,
COMPLETED and QUEUED. Trainyard's states map onto the ones a Trainyard job really passes through:

- waiting for admission (`queued`, `requeued`) is PENDING: FfDL's state between submission and deployment;
- `starting` (pods created, the fetch init container downloading the code and data) is DOWNLOADING;
- `running` is PROCESSING, and so are `halting` and `cancelling`: the learners are still stopping;
- `halted` and `cancelled` are HALTED: stopped by a person (FfDL's only way to stop a training);
- `succeeded` is COMPLETED (the launcher has stored RESULT_DIR by then) and `failed` is FAILED.

Trainyard's own state travels beside it (`trainyard_status`), since two of its states share HALTED and
three share PROCESSING.
"""

from __future__ import annotations

from enum import StrEnum

from jobs.core.choices import JobStatus


class FfdlStatus(StrEnum):
    """FfDL's training states (its trainer's `Status` enum), as its REST API spells them."""

    NOT_STARTED = "NOT_STARTED"
    PENDING = "PENDING"
    HALTED = "HALTED"
    FAILED = "FAILED"
    DEPLOY = "DEPLOY"
    DOWNLOADING = "DOWNLOADING"
    PROCESSING = "PROCESSING"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    QUEUED = "QUEUED"


FFDL_STATUS: dict[str, FfdlStatus] = {
    JobStatus.QUEUED: FfdlStatus.PENDING,
    JobStatus.REQUEUED: FfdlStatus.PENDING,
    JobStatus.STARTING: FfdlStatus.DOWNLOADING,
    JobStatus.RUNNING: FfdlStatus.PROCESSING,
    JobStatus.HALTING: FfdlStatus.PROCESSING,
    JobStatus.CANCELLING: FfdlStatus.PROCESSING,
    JobStatus.HALTED: FfdlStatus.HALTED,
    JobStatus.CANCELLED: FfdlStatus.HALTED,
    JobStatus.SUCCEEDED: FfdlStatus.COMPLETED,
    JobStatus.FAILED: FfdlStatus.FAILED,
}
"""Every Trainyard job state → the FfDL state its API reports."""


def ffdl_status(status: str) -> FfdlStatus:
    """The FfDL state for a Trainyard job state (KeyError for a state Trainyard does not have)."""
    return FFDL_STATUS[status]

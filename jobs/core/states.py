"""Job states' groups and the one table of legal transitions (pure: the core and the write layer share it)."""

from __future__ import annotations

from jobs.core.choices import JobStatus

S = JobStatus

WAITING: frozenset[str] = frozenset({S.QUEUED, S.REQUEUED})
"""Waiting for admission; holds no cluster resources."""
ACTIVE: frozenset[str] = frozenset({S.STARTING, S.RUNNING, S.CANCELLING, S.HALTING})
"""Admitted and holding cluster resources (counted against the tenant's quota)."""
STOPPING: frozenset[str] = frozenset({S.CANCELLING, S.HALTING})
"""Admitted, with its pods told to stop: it ends (cancelled, halted) once they are gone, whatever they say."""
TERMINAL: frozenset[str] = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
"""Final: nothing moves a job out of these."""
# HALTED is in none of the groups: stopped by a person, holding no resources (its checkpoint claims stay),
# waiting for nothing but `job_resume`, which sends it back to the queue. A preempted job passes through
# HALTING too (its pods get the same graceful stop) but goes back to the queue (REQUEUED) once they are gone;
# so does a job past its max_runtime, which fails (DeadlineExceeded) once they are gone.

TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.STARTING, S.CANCELLED, S.FAILED, S.HALTED}),
    S.REQUEUED: frozenset({S.STARTING, S.CANCELLED, S.FAILED, S.HALTED}),
    S.STARTING: frozenset({S.RUNNING, S.SUCCEEDED, S.FAILED, S.REQUEUED, S.CANCELLING, S.HALTING}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.REQUEUED, S.CANCELLING, S.HALTING}),
    S.CANCELLING: frozenset({S.CANCELLED, S.SUCCEEDED, S.FAILED}),
    S.HALTING: frozenset({S.HALTED, S.CANCELLING, S.REQUEUED, S.FAILED}),
    S.HALTED: frozenset({S.REQUEUED, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


class IllegalTransition(Exception):
    """A job was asked to move where the transition table does not allow."""

    def __init__(self, current: str, target: str) -> None:
        self.current, self.target = current, target
        if current in TERMINAL:
            detail = f"job is already {current}, a final state"
        else:
            allowed = ", ".join(sorted(TRANSITIONS.get(current, ()))) or "nothing"
            detail = f"a {current} job can move to {allowed}"
        super().__init__(f"cannot move from {current} to {target}: {detail}")


def check_transition(current: str, target: str) -> None:
    """Raise IllegalTransition unless `current → target` is in the table."""
    if target not in TRANSITIONS.get(current, frozenset()):
        raise IllegalTransition(current, target)

"""The transition table: legal moves pass, illegal ones raise, terminal states are final."""

import pytest

from jobs.core.states import TERMINAL, TRANSITIONS, IllegalTransition, JobStatus, check_transition
from jobs.models import Job

# Sorted: a frozenset's order changes with the hash seed, and pytest-xdist's workers must collect alike.
LEGAL = [(src, dst) for src, dsts in TRANSITIONS.items() for dst in sorted(dsts)]
ILLEGAL = [(src, dst) for src in JobStatus.values for dst in JobStatus.values if dst not in TRANSITIONS[src]]


@pytest.mark.parametrize(("src", "dst"), LEGAL)
def test_legal_transition_is_allowed(src: str, dst: str) -> None:
    check_transition(src, dst)


@pytest.mark.parametrize(("src", "dst"), ILLEGAL)
def test_illegal_transition_raises(src: str, dst: str) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(src, dst)


@pytest.mark.parametrize("src", sorted(TERMINAL))
def test_terminal_state_is_final_and_says_so(src: str) -> None:
    job = Job(status=src)
    with pytest.raises(IllegalTransition, match="final state"):
        job.set_status(JobStatus.QUEUED)
    assert job.status == src


def test_every_state_is_in_the_table() -> None:
    assert set(TRANSITIONS) == set(JobStatus.values)


def test_set_status_stamps_admission_start_and_finish() -> None:
    job = Job(status=JobStatus.QUEUED)
    job.set_status(JobStatus.STARTING)
    assert job.admitted_at is not None and job.started_at is None
    job.set_status(JobStatus.RUNNING)
    assert job.started_at is not None
    job.set_status(JobStatus.SUCCEEDED)
    assert job.finished_at is not None


def test_a_queued_job_cannot_jump_to_running() -> None:
    job = Job(status=JobStatus.QUEUED)
    with pytest.raises(IllegalTransition, match="queued job can move to"):
        job.set_status(JobStatus.RUNNING)

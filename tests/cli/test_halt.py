"""`trainyard halt JOB` and `trainyard resume JOB` against a live server: the job's state after each, and
the API's 409 for a move its state does not allow, as an error on stderr with exit code 1."""

from __future__ import annotations

import pytest

from jobs.services import job_halt, job_submit
from tests.cli.conftest import Account
from tests.cli.test_cli import SPEC, add_lines, run, with_learners

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_halt_and_resume_a_job_from_the_command_line(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)

    halted = run("halt", job.pk)
    assert halted.exit_code == 0 and f"job {job.pk}: halted" in halted.stdout
    listed = run("jobs", "list", "--status", "halted")
    assert listed.exit_code == 0 and job.pk in listed.stdout

    resumed = run("jobs", "resume", job.pk)
    assert resumed.exit_code == 0 and f"job {job.pk}: requeued" in resumed.stdout
    again = run("resume", job.pk)
    assert again.exit_code == 1 and "409" in again.stderr
    assert f"only a halted job can be resumed; job {job.pk} is requeued" in again.stderr

    history = run("jobs", "events", job.pk)
    assert "queued -> halted" in history.stdout and "halted -> requeued" in history.stdout
    assert "HaltedByUser" in history.stdout and "Resumed" in history.stdout


def test_following_a_halted_job_prints_its_log_and_ends(account: Account) -> None:
    """A halted job runs no pod until it is resumed, so `logs -f` ends there as it does for a final state."""
    job = with_learners(job_submit(tenant=account.tenant, user=account.user, document=SPEC))
    add_lines(job, 0, range(1, 4))
    job_halt(job=job, user=account.user)

    result = run("logs", job.pk, "-f")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["L0 line 1", "L0 line 2", "L0 line 3"]

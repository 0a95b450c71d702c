"""Claim storage and claim count, shown beside the rest of the quota: `trainyard quota` and `trainyard tenants`
against a live server, through the REST API only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from jobs.core.states import JobStatus
from tests.cli.conftest import Account
from tests.factories import make_job
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})


def test_quota_and_tenants_show_the_claims_halted_jobs_hold(account: Account, settings: Any) -> None:
    settings.CHECKPOINT_CLAIM_SIZE, settings.CHECKPOINT_ACCESS_MODE = "10Gi", "ReadWriteOnce"
    settings.CHECKPOINT_HOST_ROOT = ""
    for _ in range(2):
        make_job(account.tenant, account.user, status=JobStatus.HALTED, attempt=1, learners=8)
    shown = run("quota", "--tenant", account.tenant.slug)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    storage = next(line for line in lines if line.startswith("claim storage"))
    assert storage.split()[2:6] == ["160", "GiB", "500", "GiB"], storage
    claims = next(line for line in lines if line.startswith("claims"))
    assert claims.split()[1:3] == ["16", "50"] and "32%" in claims, claims
    rows = json.loads(run("quota", "--tenant", account.tenant.slug, "--json").stdout)
    assert (rows[0]["usage"]["storage_gib"], rows[0]["usage"]["claims"]) == (160, 16)
    assert (rows[0]["quota"]["storage_gib"], rows[0]["quota"]["max_claims"]) == (500, 50)
    assert "160/500" in run("tenants").stdout

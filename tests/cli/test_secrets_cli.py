"""`trainyard submit` of a spec naming a data-store secret: refused field by field when the tenant lacks it
(exit 1, nothing stored), accepted when an owner created it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobs.models import Job
from tenants.secrets import datastore_secret_create
from tests.cli.conftest import Account
from tests.factories import member
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPEC = """name: reads-s3
image: python:3.11
command: [python, -c, "print(1)"]
volumes:
  - {name: data, kind: data, type: s3, bucket: datasets, mount_path: /data, secret: team-data}
"""


def test_submit_of_an_unknown_secret_is_a_field_error(account: Account, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(cli.app, ["submit", str(spec)], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    expected = f"  volumes[0].secret: no data-store secret 'team-data' in tenant '{account.tenant.slug}'"
    assert any(line.startswith(expected) for line in result.stderr.splitlines()), result.stderr
    assert not Job.objects.exists()

    owner = member(account.tenant, "owner")
    values = {"access_key_id": "AKIAEXAMPLE", "secret_access_key": "example-secret"}
    datastore_secret_create(tenant=account.tenant, user=owner, name="team-data", values=values)
    accepted = CliRunner().invoke(cli.app, ["submit", str(spec)], env={"COLUMNS": "200"})
    assert accepted.exit_code == 0, accepted.output
    assert Job.objects.get().spec["volumes"][0]["secret"] == "team-data"

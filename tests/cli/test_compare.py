"""`trainyard compare` and `trainyard jobs label|list --experiment --tag` against a live server: the
comparison as tables, JSON and CSV, through the REST API only; another tenant's job is not found."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.utils import timezone
from typer.testing import CliRunner, Result

from jobs.models import Job, MetricSample
from tests.cli.conftest import Account
from tests.factories import make_job, make_tenant
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SPEC = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})


def runs(account: Account) -> list[Job]:
    now = timezone.now()
    jobs = []
    for index, lr in enumerate((0.1, 0.01)):
        job = make_job(
            account.tenant,
            account.user,
            name=f"run{index}",
            spec=SPEC | {"hyperparameters": {"lr": lr, "epochs": 3}},
            experiment="sweep",
        )
        MetricSample.objects.bulk_create(
            MetricSample(
                job=job,
                learner=0,
                attempt=1,
                name="loss",
                step=s,
                value=1.0 / (s + 1 + index),
                ts=now,
                log_seq=s + 1,
            )
            for s in range(4)
        )
        jobs.append(job)
    return jobs


def test_compare_prints_tables_json_and_csv(account: Account) -> None:
    first, second = runs(account)
    table = run("compare", first.pk, second.pk)
    assert table.exit_code == 0, table.output
    assert "* lr" in table.stdout and "  epochs" in table.stdout
    assert "0.25 / 0.25" in table.stdout and "0.2 / 0.2" in table.stdout and "loss (min)" in table.stdout

    body = json.loads(run("compare", first.pk, second.pk, "--json").stdout)
    assert [job["id"] for job in body["jobs"]] == [first.pk, second.pk]
    assert [len(series["value"]) for series in body["charts"][0]["series"]] == [4, 4]

    result = run("compare", first.pk, second.pk, "--csv")
    assert result.exit_code == 0
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows[0][:2] == ["id", "name"] and [row[0] for row in rows[1:]] == [first.pk, second.pk]
    assert rows[1][rows[0].index("hp.lr")] == "0.1"


def test_compare_refuses_another_tenants_job_and_too_many(account: Account) -> None:
    (mine, _) = runs(account)
    foreign = make_job(make_tenant())
    for extra in ([], ["--csv"]):
        result = run("compare", mine.pk, foreign.pk, *extra)
        assert result.exit_code == 1 and "no such job" in result.stderr, result.output
    many = run("compare", *[f"j{i}" for i in range(11)])
    assert many.exit_code == 1 and "at most 10" in many.stderr


def test_label_and_list_by_experiment_and_tag(account: Account) -> None:
    first, second = runs(account)
    result = run("jobs", "label", first.pk, "--tags", "best, baseline", "--experiment", "sweep-2")
    assert result.exit_code == 0, result.output
    assert "sweep-2" in result.stdout and "best, baseline" in result.stdout
    listed = json.loads(run("jobs", "list", "--tag", "best", "--json").stdout)
    assert [job["id"] for job in listed["results"]] == [first.pk]
    listed = json.loads(run("jobs", "list", "--experiment", "sweep", "--json").stdout)
    assert [job["id"] for job in listed["results"]] == [second.pk]
    bad = run("jobs", "label", first.pk, "--tags", "no spaces allowed")
    assert bad.exit_code == 1 and "tags[0]" in bad.stderr
    assert run("jobs", "label", first.pk).exit_code == 2

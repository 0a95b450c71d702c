"""The `trainyard` CLI against a real server: pytest-django's live_server (WSGI, so no `/ws/`: following
logs falls back to REST polling) for login and config, submit, `jobs list|show|events|cancel|retry`, output
formats, quota, logs (paged, tail, follow), tenant isolation, tokens and the one-line message when the
server cannot be reached; and daphne (HTTP + WebSocket, the portal's real ASGI app) for following logs
live over the WebSocket with a bearer token."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db import connection
from django.utils import timezone
from typer.testing import CliRunner, Result

from jobs.models import Job, Learner, LogLine, MetricSample
from jobs.services import job_cancel, job_submit
from jobs.services.logs import logs_append
from kubesim.testing import KubeSim
from tenants.models import ApiToken
from tenants.services import membership_set
from tenants.tokens import token_create
from tests.cli.conftest import Account
from tests.factories import make_tenant, member
from trainyard import cli, config
from trainyard.client import Client
from trainyard.output import relative

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}
YAML = "name: mnist\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\nresources: {cpu: 2}\n"


def run(*args: str) -> Result:
    """Invoke the CLI in-process with a wide terminal."""
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})


def add_lines(job: Job, learner: int, seqs: range) -> None:
    """Store log lines `seqs` of one learner, as the log follower would."""
    now = timezone.now()
    LogLine.objects.bulk_create(
        LogLine(job=job, learner=learner, attempt=1, seq=i, ts=now, text=f"L{learner} line {i}") for i in seqs
    )


def with_learners(job: Job) -> Job:
    """Learner rows for the job's first attempt."""
    for index in range(job.learners):
        Learner.objects.create(job=job, attempt=1, index=index, pod_name=f"{job.pk}-{index}", phase="Running")
    return job


@contextmanager
def in_thread(work: Callable[[], None]) -> Iterator[threading.Thread]:
    """Run `work` in a thread with its own database connection, closed afterwards."""

    def body() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    yield thread
    thread.join(timeout=30)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_login_checks_the_token_and_stores_it_owner_only(live_server: Any, home: Path) -> None:
    user = member(make_tenant(slug="vision"))
    _, secret = token_create(user=user, name="laptop")

    refused = run("login", "--url", live_server.url, "--token", "ty_not-a-real-token")
    assert refused.exit_code == 1
    assert "login failed" in refused.stderr and "invalid, expired or revoked token" in refused.stderr
    assert not config.config_path().exists()

    result = run("login", live_server.url + "/", "--token", secret)
    assert result.exit_code == 0, result.output
    assert "vision" in result.stdout
    path = home / ".config" / "trainyard" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": live_server.url, "token": secret}

    listed = run("tenants")  # from the stored config alone
    assert listed.exit_code == 0 and "vision" in listed.stdout

    assert run("logout").exit_code == 0
    assert json.loads(path.read_text()) == {"url": live_server.url, "token": None}
    after = run("tenants")
    assert after.exit_code == 2 and "no API token configured" in after.stderr


def test_submit_yaml_prints_the_job_and_stores_it(account: Account, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(YAML)
    result = run("submit", str(spec), "--tenant", account.tenant.slug)
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert f"submitted job {job.pk} (mnist)" in result.stdout and "queued" in result.stdout
    assert job.owner == account.user and job.cpu_millis == 2000
    hints = result.stderr.splitlines()  # what to do next, on stderr so stdout stays the answer
    assert hints[0] == "next:"
    assert any(f"trainyard logs {job.pk} -f" in line for line in hints)
    assert any(f"trainyard jobs show {job.pk}" in line for line in hints)
    assert any(f"trainyard jobs cancel {job.pk}" in line for line in hints)

    as_json = run("submit", str(spec), "--json")  # one tenant: it may be left out
    assert as_json.exit_code == 0 and as_json.stderr == ""
    assert json.loads(as_json.stdout)["tenant"] == account.tenant.slug
    as_yaml = run("submit", str(spec), "-o", "yaml")
    assert yaml.safe_load(as_yaml.stdout)["name"] == "mnist"


def test_bad_spec_exits_1_with_each_field_message(account: Account, tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(YAML + "learners: 1.5\ncolour: red\n")
    result = run("submit", str(spec))
    assert result.exit_code == 1
    assert "[400 Bad Request]" in result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith("  learners: ") for line in lines)
    assert any(line.startswith("  colour: ") for line in lines)
    assert "Traceback" not in result.output and not Job.objects.exists()

    other = run("submit", str(tmp_path / "job.yaml"), "--tenant", "nope")
    assert other.exit_code == 2 and "cannot read" in other.stderr  # a missing file is a usage error
    spec.write_text(YAML)
    wrong = run("submit", str(spec), "--tenant", "nope")
    assert wrong.exit_code == 1 and "tenant: no tenant 'nope' you may submit to" in wrong.stderr


def test_list_show_events_cancel_retry(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    other = job_submit(tenant=account.tenant, user=member(account.tenant), document={**SPEC, "name": "other"})

    listed = run("jobs", "list")
    assert listed.exit_code == 0 and job.pk in listed.stdout and other.pk in listed.stdout
    assert "2 job(s), page 1" in listed.stdout
    mine = json.loads(run("jobs", "list", "--owner", "me", "--json").stdout)
    assert [j["id"] for j in mine["results"]] == [job.pk]
    assert run("jobs", "list", "--status", "bogus").exit_code == 2

    shown = run("jobs", "show", job.pk)
    assert shown.exit_code == 0 and "mnist" in shown.stdout and "pytorch/pytorch:2.3" in shown.stdout
    assert json.loads(run("jobs", "show", job.pk, "--json").stdout)["spec"]["image"] == "pytorch/pytorch:2.3"

    cancelled = run("jobs", "cancel", job.pk)
    assert cancelled.exit_code == 0 and f"job {job.pk}: cancelled" in cancelled.stdout
    again = run("jobs", "cancel", job.pk)
    assert again.exit_code == 1 and "already finished" in again.stderr and "409" in again.stderr

    history = run("jobs", "events", job.pk)
    assert (
        history.exit_code == 0
        and "queued -> cancelled" in history.stdout
        and "CancelledByUser" in history.stdout
    )
    first = json.loads(run("jobs", "events", job.pk, "--json").stdout)[0]
    assert first["kind"] == "submitted" and first["to_status"] == "queued"

    retried = run("jobs", "retry", job.pk)
    assert retried.exit_code == 0
    assert Job.objects.filter(tenant=account.tenant).count() == 3 and "queued" in retried.stdout


def test_top_level_job_commands_are_hidden_aliases(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    assert json.loads(run("list", "--json").stdout)["results"][0]["id"] == job.pk
    assert run("show", job.pk).stdout == run("jobs", "show", job.pk).stdout
    assert run("events", job.pk, "-o", "json").stdout == run("jobs", "events", job.pk, "--json").stdout
    assert run("cancel", job.pk).exit_code == 0 and run("retry", job.pk).exit_code == 0
    helped = run("--help").stdout
    assert "jobs" in helped and "quota" in helped
    assert not any(line.strip().startswith(("│ list ", "│ show ")) for line in helped.splitlines())


def test_output_option_on_read_commands(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    listed = yaml.safe_load(run("jobs", "list", "-o", "yaml").stdout)
    assert listed["count"] == 1 and listed["results"][0]["id"] == job.pk
    assert json.loads(run("jobs", "list", "-o", "json").stdout) == json.loads(
        run("jobs", "list", "--json").stdout
    )
    assert (
        yaml.safe_load(run("jobs", "show", job.pk, "-o", "yaml").stdout)["spec"]["command"] == SPEC["command"]
    )
    assert yaml.safe_load(run("jobs", "events", job.pk, "-o", "yaml").stdout)[0]["kind"] == "submitted"
    assert yaml.safe_load(run("tenants", "-o", "yaml").stdout)[0]["slug"] == account.tenant.slug
    assert yaml.safe_load(run("tokens", "list", "-o", "yaml").stdout)[0]["name"] == "cli-tests"
    assert "ID" in run("jobs", "list", "-o", "table").stdout
    clash = run("jobs", "list", "-o", "yaml", "--json")
    assert clash.exit_code == 2 and "contradicts" in clash.stderr
    assert run("jobs", "list", "-o", "xml").exit_code == 2


def test_quota_shows_usage_against_quota(account: Account) -> None:
    second = make_tenant(gpus=4)
    membership_set(tenant=second, user=account.user, role="viewer")
    stranger = make_tenant()
    job_submit(tenant=account.tenant, user=account.user, document={**SPEC, "resources": {"gpus": 2}})

    both = run("quota")
    assert both.exit_code == 0, both.output
    assert (
        f"{account.tenant.slug} (" in both.stdout
        and f"{second.slug} (Team {second.slug}, you are viewer)" in both.stdout
    )
    one = run("quota", "--tenant", second.slug).stdout.splitlines()
    assert one[0].startswith(f"{second.slug} (") and account.tenant.slug not in "\n".join(one)
    gpus = next(line for line in one if line.startswith("GPUs"))
    assert gpus.split()[1:3] == ["0", "4"] and "░" * 24 in gpus and "0%" in gpus

    rows = yaml.safe_load(run("quota", "--tenant", account.tenant.slug, "-o", "yaml").stdout)
    assert [r["slug"] for r in rows] == [account.tenant.slug]
    assert rows[0]["usage"]["queued_jobs"] == 1 and "gpus" in rows[0]["quota"]
    assert json.loads(run("quota", "--tenant", account.tenant.slug, "--json").stdout) == rows
    missing = run("quota", "--tenant", stranger.slug)  # not one of yours
    assert missing.exit_code == 1 and f"no tenant '{stranger.slug}' among yours" in missing.stderr


def test_logs_all_one_learner_and_tail(account: Account) -> None:
    job = with_learners(
        job_submit(tenant=account.tenant, user=account.user, document={**SPEC, "learners": 2})
    )
    add_lines(job, 0, range(1, 1206))  # more than one page of 1000
    add_lines(job, 1, range(1, 4))

    everything = run("logs", job.pk)
    assert everything.exit_code == 0
    lines = everything.stdout.splitlines()
    assert len(lines) == 1208 and len(set(lines)) == 1208
    assert "[0] L0 line 1205" in lines and "[1] L1 line 3" in lines

    one = run("logs", job.pk, "--learner", "1")
    assert one.stdout.splitlines() == ["L1 line 1", "L1 line 2", "L1 line 3"]

    tail = run("logs", job.pk, "--learner", "0", "--tail", "2", "--json")
    assert [json.loads(line)["seq"] for line in tail.stdout.splitlines()] == [1204, 1205]


def test_logs_follow_ends_with_the_job_and_prints_each_line_once(account: Account) -> None:
    job = with_learners(job_submit(tenant=account.tenant, user=account.user, document=SPEC))
    add_lines(job, 0, range(1, 4))

    def finish() -> None:
        time.sleep(0.5)
        add_lines(job, 0, range(4, 6))
        time.sleep(0.3)
        add_lines(job, 0, range(6, 7))
        job_cancel(job=job, user=account.user)

    started = time.monotonic()
    with in_thread(finish):
        result = run("logs", job.pk, "-f")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"L0 line {i}" for i in range(1, 7)]
    assert time.monotonic() - started < 20


def test_logs_follow_with_tail_starts_at_the_end(account: Account) -> None:
    job = with_learners(job_submit(tenant=account.tenant, user=account.user, document=SPEC))
    add_lines(job, 0, range(1, 11))
    job_cancel(job=job, user=account.user)
    result = run("logs", job.pk, "-f", "--tail", "3")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == ["L0 line 8", "L0 line 9", "L0 line 10"]


def test_submit_follow_exits_1_when_the_job_does_not_succeed(account: Account, tmp_path: Path) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(SPEC))

    def cancel_when_submitted() -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            job = Job.objects.first()
            if job is not None:
                add_lines(job, 0, range(1, 3))
                job_cancel(job=job, user=account.user)
                return
            time.sleep(0.05)

    with in_thread(cancel_when_submitted):
        result = run("submit", str(spec), "--follow")
    assert result.exit_code == 1
    assert "L0 line 1\nL0 line 2\n" in result.stdout
    assert "cancelled" in result.stderr


def test_another_tenants_job_is_not_found(account: Account) -> None:
    other = make_tenant()
    job = job_submit(tenant=other, user=member(other), document=SPEC)
    for command in ("jobs show", "jobs events", "logs", "metrics", "jobs cancel", "jobs retry"):
        result = run(*command.split(), job.pk)
        assert result.exit_code == 1, command
        assert "no such job" in result.stderr and "404 not found" in result.stderr.lower(), command
    job.refresh_from_db()
    assert job.status == "queued"


def test_metrics_and_tenants(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    now = timezone.now()
    for step, loss in enumerate([0.9, 0.5, 0.25], start=1):
        MetricSample.objects.create(
            job=job, learner=0, attempt=1, name="loss", step=step, value=loss, ts=now, log_seq=step
        )
    MetricSample.objects.create(
        job=job, learner=0, attempt=1, name="acc", step=3, value=0.8, ts=now, log_seq=3
    )
    table = run("metrics", job.pk)
    assert table.exit_code == 0 and "0.25" in table.stdout and "acc" in table.stdout
    only = json.loads(run("metrics", job.pk, "--name", "loss", "--json").stdout)
    assert [p["value"] for p in only] == [0.9, 0.5, 0.25]

    tenants = run("tenants")
    assert tenants.exit_code == 0 and account.tenant.slug in tenants.stdout and "0/8" in tenants.stdout
    assert json.loads(run("tenants", "--json").stdout)[0]["usage"]["queued_jobs"] == 1


def test_metrics_follows_every_page_and_shows_buckets(
    account: Account, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("trainyard.client.METRIC_PAGE", 7)
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    MetricSample.objects.bulk_create(
        MetricSample(job=job, learner=0, attempt=1, name=name, step=step, value=step, log_seq=2 * step + k)
        for step in range(20)
        for k, name in enumerate(("acc", "loss"))
    )
    rows = json.loads(run("metrics", job.pk, "--json").stdout)
    assert [(r["name"], r["step"]) for r in rows] == [(n, s) for n in ("acc", "loss") for s in range(20)]
    loss = json.loads(run("metrics", job.pk, "--name", "loss", "--json").stdout)
    assert [r["step"] for r in loss] == list(range(20))
    (series,) = json.loads(run("metrics", job.pk, "--name", "loss", "--buckets", "4", "--json").stdout)
    assert (series["step"], series["min"], series["max"]) == ([4, 9, 14, 19], [0, 5, 10, 15], [4, 9, 14, 19])
    table = run("metrics", job.pk, "--buckets", "2")
    assert table.exit_code == 0 and "MEAN" in table.stdout and "acc" in table.stdout
    refused = run("metrics", job.pk, "--buckets", "0")
    assert refused.exit_code != 0 and "buckets" in refused.stdout + refused.stderr


def test_tokens_create_list_revoke(account: Account) -> None:
    created = run("tokens", "create", "ci")
    assert created.exit_code == 0
    secret = created.stdout.splitlines()[-1]
    assert secret.startswith("ty_")
    token = ApiToken.objects.get(name="ci")

    listed = run("tokens", "list")
    assert listed.exit_code == 0 and "ci" in listed.stdout and secret not in listed.stdout
    assert run("--token", secret, "tenants").exit_code == 0  # the new token works

    revoked = run("tokens", "revoke", str(token.pk))
    assert revoked.exit_code == 0 and f"revoked token {token.pk}" in revoked.stdout
    rows = {t["name"]: t for t in json.loads(run("tokens", "list", "--json").stdout)}
    assert rows["ci"]["revoked_at"] is not None
    refused = run("--token", secret, "tenants")
    assert refused.exit_code == 1 and "401" in refused.stderr
    assert run("tokens", "revoke", "999999").exit_code == 1


def test_tokens_create_takes_a_scope_and_an_expiry_and_a_read_token_cannot_submit(account: Account) -> None:
    created = run("tokens", "create", "reader", "--scope", "read", "--expires-in-days", "7")
    assert created.exit_code == 0 and "scope read" in created.stdout
    secret = created.stdout.splitlines()[-1]
    token = ApiToken.objects.get(name="reader")
    assert token.scope == "read" and token.expires_at is not None
    assert abs(token.expires_at - timezone.now() - timedelta(days=7)) < timedelta(minutes=1)
    assert "reader" in run("tokens", "list").stdout and "read" in run("tokens", "list").stdout
    refused = run("--token", secret, "tokens", "create", "more")
    assert refused.exit_code == 1 and "needs a token with scope admin" in refused.stderr


def test_cluster_shows_the_nodes(account: Account, kubesim_cluster: KubeSim, settings: Any) -> None:
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    result = run("cluster")
    assert result.exit_code == 0, result.output
    nodes = json.loads(run("cluster", "--json").stdout)["nodes"]
    assert nodes and all(node["name"] in result.stdout for node in nodes)
    assert any(node["allocatable"]["gpus"] == 4 for node in nodes)


def test_login_takes_the_url_as_an_argument_or_the_old_url_option(live_server: Any, home: Path) -> None:
    _, secret = token_create(user=member(make_tenant(slug="nlp")), name="laptop")
    path = home / ".config" / "trainyard" / "config.json"

    positional = run("login", live_server.url, "--token", secret)
    assert positional.exit_code == 0, positional.output
    assert "nlp" in positional.stdout and json.loads(path.read_text())["url"] == live_server.url
    path.unlink()

    option = run("login", "--url", live_server.url, "--token", secret)
    assert option.exit_code == 0, option.output
    assert json.loads(path.read_text()) == {"url": live_server.url, "token": secret}

    clash = run("login", live_server.url, "--url", "http://elsewhere.example", "--token", secret)
    assert clash.exit_code == 2 and "contradicts --url" in clash.output
    path.unlink()  # a stored URL would be used again
    nothing = run("login", "--token", secret)
    assert nothing.exit_code == 2 and "trainyard login URL" in nothing.output


def test_unreachable_server_is_one_line_without_traceback(home: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(cli.app, ["--url", url, "--token", "ty_x", "jobs", "list"])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"cannot reach {url}: ") and len(result.stderr.splitlines()) == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output


def test_no_server_configured_is_a_usage_error(home: Path) -> None:
    result = run("jobs", "list")
    assert result.exit_code == 2 and "trainyard login" in result.stderr


def test_python_dash_m_entry_point(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "trainyard", "jobs", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [j["id"] for j in json.loads(done.stdout)["results"]] == [job.pk]
    missing = subprocess.run(
        [sys.executable, "-m", "trainyard", "jobs", "show", "nope"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 1 and "Traceback" not in missing.stderr and "no such job" in missing.stderr


# Following over the WebSocket: the portal's real ASGI app under daphne, on the test database.


@pytest.fixture
def daphne_url(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """daphne serving `portal.asgi:application` (HTTP + `/ws/`) with the test settings and database, as the
    browser tests do (tests/e2e/conftest.py). One per test: it starts after the database was last
    flushed, so its content-type caches match the rows."""
    name = str(connection.settings_dict["NAME"])
    assert name.startswith("test_"), name
    port = free_port()
    env = os.environ | {
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "DATABASE_URL": f"postgres:///{name}",
    }
    with (tmp_path / "daphne.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, (tmp_path / "daphne.log").read_text()
                try:
                    with urllib.request.urlopen(f"{url}/healthz", timeout=1):  # noqa: S310 - local
                        break
                except OSError:
                    assert time.monotonic() < deadline, "daphne did not start"
                    time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def live_account(daphne_url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> Account:
    """An account on the daphne server; REST polling is forbidden, so following must use the WebSocket."""
    tenant = make_tenant()
    user = member(tenant)
    _, secret = token_create(user=user, name="cli-ws")
    monkeypatch.setenv(config.URL_ENV, daphne_url)
    monkeypatch.setenv(config.TOKEN_ENV, secret)

    def no_polling(*args: Any, **kwargs: Any) -> Iterator[Any]:
        raise AssertionError("followed by polling REST, not over the WebSocket")

    monkeypatch.setattr(Client, "poll_logs", no_polling)
    return Account(url=daphne_url, tenant=tenant, user=user, token=secret)


def publish(job: Job, texts: list[str], learner: int = 0) -> None:
    """Store a batch as the log follower does: committed, then published to the job's live group."""
    logs_append(
        job_id=job.pk, attempt=1, learner=learner, records=[(None, t) for t in texts], cursor=(None, 0)
    )


def test_logs_follow_over_the_websocket(live_account: Account) -> None:
    account = live_account
    job = with_learners(
        job_submit(tenant=account.tenant, user=account.user, document={**SPEC, "learners": 2})
    )
    publish(job, ["a1", "a2", "a3"])
    publish(job, ["b1"], learner=1)

    def finish() -> None:
        time.sleep(0.8)
        publish(job, ["a4", "a5"])
        publish(job, ["b2"], learner=1)
        time.sleep(0.3)
        publish(job, ["a6"])
        job_cancel(job=job, user=account.user)

    started = time.monotonic()
    with in_thread(finish):
        result = run("logs", job.pk, "-f")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("[0]")] == [f"[0] a{i}" for i in range(1, 7)]
    assert [line for line in lines if line.startswith("[1]")] == ["[1] b1", "[1] b2"]
    assert len(lines) == 8
    assert time.monotonic() - started < 20

    tail = run("logs", job.pk, "-f", "--tail", "2", "--learner", "0")  # a finished job: tail, then done
    assert tail.exit_code == 0 and tail.stdout.splitlines() == ["a5", "a6"], tail.output


def test_submit_follow_over_the_websocket_json_lines_are_exact(live_account: Account, tmp_path: Path) -> None:
    account = live_account
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(SPEC))

    def run_and_cancel() -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            job = Job.objects.first()
            if job is not None:
                with_learners(job)
                time.sleep(0.8)  # subscribed by now: these come live
                publish(job, ["x1", "x2"])
                publish(job, ["x3"])
                job_cancel(job=job, user=account.user)
                return
            time.sleep(0.05)

    with in_thread(run_and_cancel):
        result = run("submit", str(spec), "--follow", "--json")
    assert result.exit_code == 1, result.output
    decoder = json.JSONDecoder()
    submitted, end = decoder.raw_decode(result.stdout)
    lines = [json.loads(line) for line in result.stdout[end:].split("\n") if line.strip()]
    assert submitted["status"] == "queued"
    assert [(line["seq"], line["text"]) for line in lines] == [(1, "x1"), (2, "x2"), (3, "x3")]
    assert all(line["attempt"] == 1 for line in lines)  # read from REST: the frames carry no attempt
    assert "cancelled" in result.stderr


def test_list_and_show_print_a_queued_jobs_eta(account: Account) -> None:
    job = job_submit(tenant=account.tenant, user=account.user, document=SPEC)
    other = job_submit(tenant=account.tenant, user=account.user, document={**SPEC, "name": "other"})
    start = timezone.now() + timedelta(minutes=25, seconds=20)
    Job.objects.filter(pk=job.pk).update(
        eta=start, eta_low=start - timedelta(minutes=5), eta_high=start + timedelta(minutes=10)
    )
    Job.objects.filter(pk=other.pk).update(eta_reason="unknown: far back in the queue")
    assert "in ~25 min" in run("jobs", "list").stdout
    shown = run("jobs", "show", job.pk).stdout
    assert f"in ~25 min ({start:%Y-%m-%d %H:%M:%S} UTC, between" in shown
    assert "unknown: far back in the queue" in run("jobs", "show", other.pk).stdout
    assert json.loads(run("jobs", "show", job.pk, "--json").stdout)["eta_high"] is not None


def test_relative_times_read_in_minutes_then_hours() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert relative("2026-01-01T00:25:00Z", now) == "in ~25 min"
    assert relative("2026-01-01T03:00:00+00:00", now) == "in ~3 h"
    assert relative("2025-12-31T23:00:00Z", now) == "now"

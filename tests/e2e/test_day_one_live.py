"""A team's day one, end to end (issue 29's "done when"): a platform admin creates the team with its owner
(`manage.py tenant create`); the new owner, from the browser alone, adds a member; the member, in their own
browser, mints an API token on the Tokens page; with it, the `trainyard` command installed by `pip install .`
into a fresh virtual environment logs in and submits an example spec, which the job engine runs on kubesim to
success in that tenant, as the command itself reports."""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from jobs.models import Job
from tenants.models import Membership, Tenant
from tests.e2e.conftest import ROOT, add_member, create_token, login, open_page
from tests.factories import make_user

pytestmark = pytest.mark.slow

SPEC = ROOT / "examples" / "specs" / "demo-train.yaml"  # 100 steps of a small PyTorch MLP, 1 CPU
SUBMITTED = re.compile(r"submitted job (\S+) \(demo-mlp\) to vision: ")


@pytest.mark.timeout(600)
def test_a_new_owner_adds_a_member_who_mints_a_token_and_submits_with_the_installed_cli(
    live_page: Any, browser: Any, live_server_url: str, installed_cli: Path, tmp_path: Path
) -> None:
    make_user("olga")
    make_user("bob")
    call_command("tenant", "create", "vision", "--owner", "olga", stdout=io.StringIO())
    team = Tenant.objects.get(slug="vision")

    owner = live_page
    login(owner, "olga")
    owner.click("nav >> text=Team")
    add_member(owner, "bob", "member")
    assert Membership.objects.get(tenant=team, user__username="bob").role == "member"

    with open_page(browser, live_server_url) as page:
        login(page, "bob")
        secret = create_token(page, "laptop")
    assert secret.startswith("ty_")

    # The user's shell: a home of their own, no Trainyard variables from the test's environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")} | {"HOME": str(tmp_path)}

    def trainyard(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        command = [str(installed_cli / "trainyard"), *args]
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)

    logged_in = trainyard("login", live_server_url, "--token", secret, timeout=60)
    assert logged_in.returncode == 0, logged_in.stderr
    assert "(tenants: vision)" in logged_in.stdout
    assert (tmp_path / ".config" / "trainyard" / "config.json").exists()

    # --follow streams the log and exits 0 only if the job succeeded.
    submitted = trainyard("submit", str(SPEC), "--follow", timeout=360)
    found = SUBMITTED.search(submitted.stdout)
    assert found, (submitted.returncode, submitted.stdout[-2000:], submitted.stderr[-2000:])
    job = Job.objects.select_related("tenant", "owner").get(pk=found[1])
    assert submitted.returncode == 0, (job.status, job.reason, submitted.stderr[-2000:])
    assert "training done" in submitted.stdout
    assert f"job {job.pk} succeeded" in submitted.stderr
    assert (job.tenant, job.owner.username if job.owner else None, job.status) == (team, "bob", "succeeded")

    # The owner sees the member's job among the team's.
    owner.click("nav >> text=Jobs")
    row = owner.locator(f"tr[data-job-id='{job.pk}']")
    expect(row).to_contain_text("demo-mlp")
    expect(row).to_contain_text("bob")

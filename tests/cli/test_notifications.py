"""`trainyard notifications` against a live server: add a webhook (its secret printed once), list, send a
test that a local receiver gets signed, read the delivery log, disable, remove; field errors and another
tenant's subscription (404) end with exit code 1 and the server's words."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from typer.testing import CliRunner, Result

from jobs.notifications.delivery import deliver
from jobs.notifications.models import Notification, Subscription
from jobs.notifications.services import subscription_create
from jobs.notifications.signing import verify
from tests.cli.conftest import Account
from tests.factories import make_tenant, member
from tests.notifications.receiver import receiver
from trainyard import cli

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})


def test_add_list_test_deliveries_disable_and_remove(account: Account) -> None:
    slug = account.tenant.slug
    with receiver() as hook:
        added = run("notifications", "add", "ci", "--tenant", slug, "--webhook", hook.url, "-e", "failed")
        assert added.exit_code == 0, added.output
        secret = added.stdout.strip().splitlines()[-1]
        sub = Subscription.objects.get()
        assert secret.startswith("whsec_") and f"created subscription {sub.pk} (ci)" in added.stdout
        assert sub.events == ["failed"] and sub.user == account.user

        listed = run("notifications", "list")
        assert listed.exit_code == 0 and "ci" in listed.stdout and hook.url in listed.stdout
        assert secret not in listed.stdout and secret not in run("notifications", "list", "--json").stdout

        tested = run("notifications", "test", str(sub.pk))
        assert tested.exit_code == 0 and "queued test notification" in tested.stdout
        deliver(Notification.objects.get().pk)  # what the worker does with the queued task
        (got,) = hook.wait_for(1)
    assert verify(
        secret, got.headers["x-trainyard-timestamp"], got.body, got.headers["x-trainyard-signature"]
    )
    assert json.loads(got.body)["event"] == "test"

    log = run("notifications", "deliveries", str(sub.pk))
    assert log.exit_code == 0 and "test" in log.stdout and "delivered" in log.stdout and "200" in log.stdout
    assert run("notifications", "disable", str(sub.pk)).exit_code == 0
    assert Subscription.objects.get().enabled is False
    assert run("notifications", "remove", str(sub.pk)).exit_code == 0
    assert not Subscription.objects.exists()


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False)
def test_a_refused_target_and_a_bad_event_exit_1_with_the_field_messages(account: Account) -> None:
    slug = account.tenant.slug
    private = run("notifications", "add", "x", "--tenant", slug, "--webhook", "http://10.0.0.1/hook")
    assert private.exit_code == 1 and "not allowed as webhook targets" in private.stderr
    event = run("notifications", "add", "x", "--tenant", slug, "--email", "a@example.com", "-e", "exploded")
    assert event.exit_code == 1 and "is not a valid choice" in event.stderr
    both = run(
        "notifications", "add", "x", "--tenant", slug, "--email", "a@example.com", "--slack", "http://x/"
    )
    assert both.exit_code == 2
    assert not Subscription.objects.exists()


def test_another_tenants_subscription_is_not_found(account: Account) -> None:
    other = make_tenant()
    owner = member(other, "owner")
    sub = subscription_create(
        user=owner, tenant=other, scope="tenant", name="theirs", channel="email", email="a@example.com",
        events=["failed"],
    ).subscription  # fmt: skip
    for command in ("deliveries", "test", "remove", "disable"):
        result = run("notifications", command, str(sub.pk))
        assert result.exit_code == 1 and "no such subscription" in result.stderr, (command, result.output)
    assert "theirs" not in run("notifications", "list").stdout
    assert Subscription.objects.filter(pk=sub.pk, enabled=True).exists()

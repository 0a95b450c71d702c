"""`trainyard notifications`: list, add, enable/disable, remove and test notification subscriptions, and read
their delivery logs (a client of `/api/v1/notifications/` only)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import typer
from rich.table import Table

from trainyard.output import console, emit_json, table, when

EVENTS = ("succeeded", "failed", "preempted", "halted", "queued_too_long", "idle_gpu")

notifications_app = typer.Typer(
    help="Notifications when jobs succeed, fail, are preempted or halted, or wait too long.",
    no_args_is_help=True,
)
IdArg = Annotated[int, typer.Argument(metavar="ID", help="The subscription's id.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="The server's answer as JSON.")]


def _client(ctx: typer.Context) -> Any:
    from trainyard.cli import client

    return client(ctx)


def subscriptions_table(rows: Iterable[dict[str, Any]]) -> Table:
    """A row per subscription."""
    grid = table("ID", "NAME", "TENANT", "COVERS", "CHANNEL", "TARGET", "EVENTS", "STATE")
    for r in rows:
        events = ", ".join(r["events"]) + (f" ({r['queued_minutes']} min)" if r["queued_minutes"] else "")
        grid.add_row(
            str(r["id"]), r["name"], r["tenant"], "my jobs" if r["scope"] == "user" else "every job",
            r["channel"], r["target"], events, "enabled" if r["enabled"] else "disabled",
        )  # fmt: skip
    return grid


def deliveries_table(rows: Iterable[dict[str, Any]]) -> Table:
    """A row per attempt (a notification not yet tried: one row saying so)."""
    grid = table("NOTIFICATION", "EVENT", "JOB", "STATE", "ATTEMPT", "AT", "ANSWER", "NEXT RETRY")
    for n in rows:
        head = (str(n["id"]), n["event"], n["job"] or "-", n["state"])
        if not n["attempts"]:
            grid.add_row(*head, "-", when(n["created_at"]), "not tried yet", "-")
        for a in n["attempts"]:
            answer = " ".join(str(x) for x in (a["status_code"], a["error"]) if x) or "sent"
            grid.add_row(*head, str(a["number"]), when(a["at"]), answer, when(a["next_retry_at"]))
    return grid


@notifications_app.command("list")
def notifications_list(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List your subscriptions and those of tenants you own."""
    rows = _client(ctx).notifications(tenant=tenant)
    emit_json(rows) if as_json else console().print(subscriptions_table(rows))


@notifications_app.command("add")
def notifications_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="What it is for.")],
    tenant: Annotated[str, typer.Option("--tenant", help="The tenant's slug.")],
    webhook: Annotated[str | None, typer.Option("--webhook", help="A signed JSON webhook URL.")] = None,
    slack: Annotated[str | None, typer.Option("--slack", help="A Slack-compatible webhook URL.")] = None,
    email: Annotated[str | None, typer.Option("--email", help="An e-mail address.")] = None,
    event: Annotated[
        list[str] | None, typer.Option("--event", "-e", help=f"Repeatable: {', '.join(EVENTS)}.")
    ] = None,
    queued_minutes: Annotated[
        int | None, typer.Option("--queued-minutes", help="With -e queued_too_long: minutes a job may wait.")
    ] = None,
    every_job: Annotated[
        bool, typer.Option("--every-job", help="Cover every job of the tenant (owners only), not just yours.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Subscribe to job events; a webhook's signing secret is printed this once."""
    targets = [(c, v) for c, v in (("webhook", webhook), ("slack", slack), ("email", email)) if v]
    if len(targets) != 1:
        raise typer.BadParameter("give exactly one of --webhook, --slack or --email", param_hint="--webhook")
    channel, target = targets[0]
    fields: dict[str, Any] = {
        "tenant": tenant, "name": name, "channel": channel, "events": list(event or ["succeeded", "failed"]),
        "scope": "tenant" if every_job else "user", "queued_minutes": queued_minutes,
        ("email" if channel == "email" else "url"): target,
    }  # fmt: skip
    created = _client(ctx).notification_add(**fields)
    if as_json:
        emit_json(created)
        return
    typer.echo(f"created subscription {created['id']} ({created['name']}) to {created['target']}")
    if created.get("secret"):
        typer.echo("signing secret (copy it now, it is not shown again):")
        typer.echo(created["secret"])


@notifications_app.command("enable")
def notifications_enable(ctx: typer.Context, subscription_id: IdArg) -> None:
    """Enable a subscription."""
    _client(ctx).notification_update(subscription_id, enabled=True)
    typer.echo(f"enabled subscription {subscription_id}")


@notifications_app.command("disable")
def notifications_disable(ctx: typer.Context, subscription_id: IdArg) -> None:
    """Disable a subscription (nothing is sent until it is enabled again)."""
    _client(ctx).notification_update(subscription_id, enabled=False)
    typer.echo(f"disabled subscription {subscription_id}")


@notifications_app.command("remove")
def notifications_remove(ctx: typer.Context, subscription_id: IdArg) -> None:
    """Delete a subscription and its delivery log."""
    _client(ctx).notification_remove(subscription_id)
    typer.echo(f"removed subscription {subscription_id}")


@notifications_app.command("test")
def notifications_test(ctx: typer.Context, subscription_id: IdArg) -> None:
    """Send a test notification (see `trainyard notifications deliveries ID`)."""
    sent = _client(ctx).notification_test(subscription_id)
    typer.echo(f"queued test notification {sent['id']} to subscription {subscription_id}")


@notifications_app.command("deliveries")
def notifications_deliveries(ctx: typer.Context, subscription_id: IdArg, as_json: JsonOpt = False) -> None:
    """The delivery log: each attempt's time, answer or error, and next retry."""
    rows = _client(ctx).notification_deliveries(subscription_id)
    emit_json(rows) if as_json else console().print(deliveries_table(rows))

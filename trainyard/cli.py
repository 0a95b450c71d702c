"""The `trainyard` command: submit and watch training jobs from a terminal (a client of the REST API and
of the `/ws/` WebSocket, for following logs).

Exit codes: 0 success; 1 the server refused the request, could not be reached, or (with `--follow`)
the job did not succeed; 2 a usage error (bad option, no server configured).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from trainyard import __version__, config
from trainyard.archive import pack_code, unpack
from trainyard.client import Client, LogLine, TrainyardError
from trainyard.members_cli import members_app
from trainyard.notify_cli import notifications_app
from trainyard.output import (
    comparison_tables,
    console,
    emit_json,
    emit_yaml,
    events_table,
    job_panel,
    jobs_table,
    metric_buckets_table,
    metrics_table,
    nodes_table,
    print_logs,
    quota_table,
    report,
    results_table,
    tenants_table,
    tokens_table,
)
from trainyard.registries_cli import registries_app
from trainyard.sso import DeviceLoginError, device_login

STATES = (
    "queued",
    "starting",
    "running",
    "cancelling",
    "halting",
    "halted",
    "requeued",
    "succeeded",
    "failed",
    "cancelled",
)
POLL_SECONDS = 1.0
"""How often `logs -f` and `submit --follow` ask for new lines when they poll REST (no WebSocket)."""


class Output(StrEnum):
    """How a read command prints: a table for people, JSON or YAML (the server's answer) for scripts."""

    table = "table"
    json = "json"
    yaml = "yaml"


class TokenScope(StrEnum):
    """What a new API token may do (docs/operations.md)."""

    read = "read"
    submit = "submit"
    admin = "admin"


class LogOutput(StrEnum):
    """How log lines print: the text, or one JSON object a line."""

    text = "text"
    json = "json"


class ApiGroup(TyperGroup):
    """Turns a TrainyardError raised by any command into a readable message and exit code 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except TrainyardError as exc:
            report(exc)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=ApiGroup,
    name="trainyard",
    help="Submit, watch and manage Trainyard training jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
jobs_app = typer.Typer(help="List, inspect, cancel, halt, resume and retry jobs.", no_args_is_help=True)
app.add_typer(jobs_app, name="jobs")
tokens_app = typer.Typer(help="Your API tokens.", no_args_is_help=True)
app.add_typer(tokens_app, name="tokens")
app.add_typer(notifications_app, name="notifications")
app.add_typer(members_app, name="members")
app.add_typer(registries_app, name="registries")

JsonOpt = Annotated[bool, typer.Option("--json", help="Same as -o json.")]
OutputOpt = Annotated[
    Output | None,
    typer.Option("--output", "-o", help="table (default), or the server's answer as json or yaml."),
]
JobArg = Annotated[str, typer.Argument(metavar="JOB", help="The job id.", show_default=False)]


def client(ctx: typer.Context) -> Client:
    """A client of the configured server (options, then environment, then the config file)."""
    options = ctx.find_root().obj or {}
    settings = config.resolve(options.get("url"), options.get("token"))
    if not settings.url or not settings.token:
        missing = "server URL" if not settings.url else "API token"
        typer.echo(
            f"no {missing} configured: run `trainyard login URL --token TOKEN` "
            f"or set {config.URL_ENV} and {config.TOKEN_ENV}",
            err=True,
        )
        raise typer.Exit(2)
    api = Client(settings.url, settings.token)
    ctx.call_on_close(api.close)
    return api


def output_format(output: Output | None, as_json: bool) -> Output:
    """The chosen format: `-o`, else `--json`, else a table."""
    if as_json and output not in (None, Output.json):
        raise typer.BadParameter(f"--json contradicts -o {output}", param_hint="--json")
    return output or (Output.json if as_json else Output.table)


def emit(data: Any, fmt: Output, render: Callable[[], None]) -> None:
    """Print `data` as JSON or YAML, or call `render` for the table."""
    if fmt is Output.json:
        emit_json(data)
    elif fmt is Output.yaml:
        emit_yaml(data)
    else:
        render()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"trainyard {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option("--url", help=f"Server URL (else ${config.URL_ENV}).")] = None,
    token: Annotated[
        str | None, typer.Option("--token", help=f"API token (else ${config.TOKEN_ENV}).")
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Submit, watch and manage Trainyard training jobs."""
    ctx.obj = {"url": url, "token": token}


@app.command()
def login(
    ctx: typer.Context,
    server_url: Annotated[
        str | None,
        typer.Argument(
            metavar="URL", help="The Trainyard server, e.g. https://ty.example.com", show_default=False
        ),
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="Same as URL (kept for old scripts).")] = None,
    token: Annotated[
        str | None, typer.Option("--token", help="An API token (ty_...); asked for if left out.")
    ] = None,
    sso: Annotated[
        bool,
        typer.Option(
            "--sso",
            help="Sign in through the portal (and its identity provider) in a browser, approving the code "
            "shown here; the portal gives this machine a new API token.",
        ),
    ] = False,
    no_browser: Annotated[
        bool,
        typer.Option("--no-browser", help="With --sso: only print the URL to open (any device will do)."),
    ] = False,
) -> None:
    """Check a token against URL and store the URL and token in the config file (mode 0600); with --sso,
    get the token by signing in through the portal."""
    if server_url and url and config.normalize_url(server_url) != config.normalize_url(url):
        raise typer.BadParameter(f"URL {server_url} contradicts --url {url}", param_hint="--url")
    if sso and token:
        raise typer.BadParameter("--sso gets a new token: leave --token out", param_hint="--token")
    options = ctx.find_root().obj or {}
    chosen = server_url or url or options.get("url") or config.resolve().url
    if not chosen:
        raise typer.BadParameter("name the server: trainyard login URL", param_hint="URL")
    server = config.normalize_url(chosen)
    if sso:
        try:
            answer = device_login(
                server, say=lambda line: typer.echo(line, err=True), open_browser=not no_browser
            )
        except DeviceLoginError as exc:
            typer.echo(f"login failed: {exc}", err=True)
            raise typer.Exit(1) from None
        secret = str(answer["access_token"])
        expiry = f", expires {answer['expires_at']}" if answer.get("expires_at") else ""
        typer.echo(f"signed in: a new API token (scope {answer.get('scope')}{expiry})", err=True)
    else:
        secret = token or options.get("token") or typer.prompt("API token", hide_input=True)
    with Client(server, secret) as api:
        try:
            tenants = api.tenants()
        except TrainyardError as exc:
            if exc.status in (401, 403):
                typer.echo(f"login failed: {server} refused the token ({exc.detail})", err=True)
                raise typer.Exit(1) from None
            raise
    path = config.save(config.Settings(url=server, token=secret))
    names = ", ".join(t["slug"] for t in tenants) or "none yet"
    typer.echo(f"logged in to {server} (tenants: {names}); saved to {path}")


@app.command()
def logout() -> None:
    """Forget the stored token (it stays valid on the server: `trainyard tokens revoke ID` ends it)."""
    if config.forget_token():
        typer.echo(f"logged out: token removed from {config.config_path()}")
    else:
        typer.echo("no stored token")


def follow_to_end(api: Client, job_id: str, *, as_json: bool) -> None:
    """Stream a job's log until it ends; exit 0 if it succeeded, 1 otherwise."""
    job = api.job(job_id)
    multi = int(job["resources"]["learners"]) > 1
    lines = api.follow_logs(job_id, interval=POLL_SECONDS, exact=as_json)
    print_logs(lines, prefix=multi, as_json=as_json)
    job = api.job(job_id)
    ending = f"job {job_id} {job['status']}" + (f": {job['reason']}" if job.get("reason") else "")
    typer.echo(ending, err=True)
    raise typer.Exit(0 if job["status"] == "succeeded" else 1)


def next_commands(job_id: str) -> None:
    """What one usually does next with a job, on stderr (stdout stays the answer)."""
    hints = [
        (f"trainyard logs {job_id} -f", "follow its log until it ends"),
        (f"trainyard jobs show {job_id}", "state, learners and timing"),
        (f"trainyard jobs cancel {job_id}", "stop it"),
    ]
    width = max(len(command) for command, _ in hints)
    typer.echo("next:", err=True)
    for command, why in hints:
        typer.echo(f"  {command.ljust(width)}  # {why}", err=True)


@app.command()
def submit(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A job spec or FfDL manifest (YAML or JSON); - for stdin.")],
    tenant: Annotated[str | None, typer.Option(help="Tenant slug (needed if you belong to several).")] = None,
    code: Annotated[
        Path | None,
        typer.Option(help="Your code: a folder (zipped for you) or a .zip, unpacked into MODEL_DIR."),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Stream the logs until the job ends.")
    ] = False,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job and print its id and status (and the commands to follow, show or cancel it)."""
    fmt = output_format(output, as_json)
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {file}: {exc}", param_hint="FILE") from None
    try:
        archive = pack_code(code) if code is not None else None
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--code") from None
    api = client(ctx)
    job = api.submit(text, tenant=tenant, code=archive)

    def render() -> None:
        where = f", position {job['queue_position']} in the queue" if job.get("queue_position") else ""
        typer.echo(f"submitted job {job['id']} ({job['name']}) to {job['tenant']}: {job['status']}{where}")
        if not follow:
            next_commands(job["id"])

    emit(job, fmt, render)
    if follow:
        follow_to_end(api, job["id"], as_json=fmt is not Output.table)


def list_jobs(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's jobs.")] = None,
    status: Annotated[
        str | None, typer.Option(help=f"Only jobs in this state ({', '.join(STATES)}).")
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only jobs of this user (`me` for yours).")] = None,
    search: Annotated[str | None, typer.Option(help="Jobs whose name or id contains this.")] = None,
    page: Annotated[int, typer.Option(min=1, help="Page of 50 jobs.")] = 1,
    experiment: Annotated[str | None, typer.Option(help="Only runs of this experiment.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only jobs with this tag (a,b: with both).")] = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the jobs you may see, newest first."""
    fmt = output_format(output, as_json)
    if status and status not in STATES:
        raise typer.BadParameter(f"use one of {', '.join(STATES)}", param_hint="--status")
    body = client(ctx).jobs(
        tenant=tenant, status=status, owner=owner, search=search, page=page, experiment=experiment, tag=tag
    )

    def render() -> None:
        console().print(jobs_table(body["results"]))
        more = f"; next: --page {page + 1}" if body.get("next") else ""
        console().print(f"{body['count']} job(s), page {page}{more}", markup=False)

    emit(body, fmt, render)


def label(
    ctx: typer.Context,
    job_id: JobArg,
    experiment: Annotated[
        str | None, typer.Option(help="The experiment it is a run of ('' for none).")
    ] = None,
    tags: Annotated[str | None, typer.Option(help="Its tags, comma-separated ('' for none).")] = None,
) -> None:
    """Change a job's experiment and/or tags."""
    if experiment is None and tags is None:
        raise typer.BadParameter("give --experiment and/or --tags", param_hint="--experiment")
    tag_list = None if tags is None else [t.strip() for t in tags.split(",") if t.strip()]
    job = client(ctx).relabel(job_id, experiment=experiment, tags=tag_list)
    shown = ", ".join(job["tags"]) or "-"
    typer.echo(f"{job['id']}: experiment {job['experiment'] or '-'}, tags {shown}")


def show(ctx: typer.Context, job_id: JobArg, output: OutputOpt = None, as_json: JsonOpt = False) -> None:
    """Show one job: state, resources, timing and learners."""
    fmt = output_format(output, as_json)
    job = client(ctx).job(job_id)

    def render() -> None:
        out = console()
        for part in job_panel(job):
            out.print(part)

    emit(job, fmt, render)


def events(ctx: typer.Context, job_id: JobArg, output: OutputOpt = None, as_json: JsonOpt = False) -> None:
    """Show a job's history: each state change and why it happened."""
    fmt = output_format(output, as_json)
    rows = client(ctx).events(job_id)
    emit(rows, fmt, lambda: console().print(events_table(rows)))


def cancel(ctx: typer.Context, job_id: JobArg) -> None:
    """Cancel a job (a running one stops once its pods are gone)."""
    job = client(ctx).cancel(job_id)
    typer.echo(f"job {job['id']}: {job['status']}")


def halt(ctx: typer.Context, job_id: JobArg) -> None:
    """Halt a job, to resume it later from its checkpoint (a running one is halted once its pods are gone)."""
    job = client(ctx).halt(job_id)
    typer.echo(f"job {job['id']}: {job['status']}")


def resume(ctx: typer.Context, job_id: JobArg) -> None:
    """Send a halted job back to the queue; it goes on from its checkpoint."""
    job = client(ctx).resume(job_id)
    typer.echo(f"job {job['id']}: {job['status']}")


def retry(ctx: typer.Context, job_id: JobArg) -> None:
    """Submit a finished job again, as a new job."""
    job = client(ctx).retry(job_id)
    typer.echo(f"retried job {job_id} as {job['id']}: {job['status']}")
    typer.echo(f"next: trainyard logs {job['id']} -f", err=True)


def delete(ctx: typer.Context, job_id: JobArg) -> None:
    """Delete a finished job: its logs, metrics, result files and checkpoints go with it."""
    client(ctx).delete(job_id)
    typer.echo(f"deleted job {job_id}")


jobs_app.command("delete")(delete)
jobs_app.command("label")(label)

# `trainyard jobs list|show|events|cancel|halt|resume|retry`, and the same at the top level (hidden), as before.
for _name, _command in (
    ("list", list_jobs),
    ("show", show),
    ("events", events),
    ("cancel", cancel),
    ("halt", halt),
    ("resume", resume),
    ("retry", retry),
):
    jobs_app.command(_name)(_command)
    app.command(_name, hidden=True)(_command)


@app.command()
def logs(
    ctx: typer.Context,
    job_id: JobArg,
    learner: Annotated[int | None, typer.Option(min=0, help="Only this learner (0, 1, ...).")] = None,
    tail: Annotated[int | None, typer.Option(min=1, max=10000, help="Only the last N lines.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")] = False,
    output: Annotated[
        LogOutput | None, typer.Option("--output", "-o", help="text (default), or json: an object a line.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as -o json.")] = False,
) -> None:
    """Print a job's log (with `-f`, follow it live until the job ends and its log is read)."""
    if as_json and output is LogOutput.text:
        raise typer.BadParameter("--json contradicts -o text", param_hint="--json")
    as_json = as_json or output is LogOutput.json
    api = client(ctx)
    job = api.job(job_id)
    prefix = learner is None and int(job["resources"]["learners"]) > 1
    lines: Iterator[LogLine]
    if follow:
        lines = api.follow_logs(job_id, learner=learner, tail=tail, interval=POLL_SECONDS, exact=as_json)
    elif tail is not None:
        lines = iter(api.logs(job_id, learner=learner, tail=tail)["lines"])
    else:
        lines = api.iter_logs(job_id, learner=learner)
    print_logs(lines, prefix=prefix, as_json=as_json)


@app.command()
def download(
    ctx: typer.Context,
    job_id: JobArg,
    code: Annotated[bool, typer.Option("--code", help="The code the job ran, not its results.")] = False,
    results: Annotated[bool, typer.Option("--results", help="The job's result files (the default).")] = False,
    out: Annotated[Path, typer.Option("--output-dir", "-o", help="Where to unpack them.")] = Path("."),
) -> None:
    """Download a job's result files (what its learners left in RESULT_DIR) or its code, unpacked."""
    if code and results:
        raise typer.BadParameter("choose --results or --code", param_hint="--code")
    data = client(ctx).download(job_id, "code" if code else "results")
    try:
        written = unpack(data, out)
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--output-dir") from None
    for path in written:
        typer.echo(str(path))
    typer.echo(f"{len(written)} file(s) from job {job_id} in {out}", err=True)


@app.command()
def results(
    ctx: typer.Context,
    job_id: JobArg,
    attempt: Annotated[int | None, typer.Option(help="Which attempt (default: the latest with any).")] = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a job's result files (every page of them); `trainyard download` fetches them."""
    fmt = output_format(output, as_json)
    rows = client(ctx).results(job_id, attempt=attempt)
    emit(rows, fmt, lambda: console().print(results_table(rows)))


@app.command()
def metrics(
    ctx: typer.Context,
    job_id: JobArg,
    name: Annotated[str | None, typer.Option(help="Only this metric (e.g. loss).")] = None,
    buckets: Annotated[
        int | None,
        typer.Option(help="Instead of every point: each series in at most N step buckets (min, max, mean)."),
    ] = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a job's training metrics, as parsed from its log: every point (all pages), or downsampled."""
    fmt = output_format(output, as_json)
    if buckets is not None:
        series = client(ctx).metric_buckets(job_id, buckets, name=name)
        emit(series, fmt, lambda: console().print(metric_buckets_table(series)))
        return
    rows = client(ctx).metrics(job_id, name=name)
    emit(rows, fmt, lambda: console().print(metrics_table(rows)))


@app.command()
def compare(
    ctx: typer.Context,
    job_ids: Annotated[
        list[str], typer.Argument(metavar="JOB...", help="2 to 10 job ids.", show_default=False)
    ],
    as_csv: Annotated[
        bool, typer.Option("--csv", help="Print the comparison as CSV (a row per job).")
    ] = False,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare jobs side by side: hyperparameters (those that differ marked) and each metric's last and
    best value; --csv for a table a spreadsheet reads, -o json for the curves too."""
    api = client(ctx)
    if as_csv:
        if output is not None or as_json:
            raise typer.BadParameter("--csv prints CSV; leave out -o/--json", param_hint="--csv")
        typer.echo(api.compare_csv(job_ids), nl=False)
        return
    fmt = output_format(output, as_json)
    body = api.compare(job_ids)

    def render() -> None:
        out = console()
        for part in comparison_tables(body):
            out.print(part)

    emit(body, fmt, render)


@app.command()
def tenants(ctx: typer.Context, output: OutputOpt = None, as_json: JsonOpt = False) -> None:
    """Show your tenants: your role, quota and what is in use."""
    fmt = output_format(output, as_json)
    rows = client(ctx).tenants()
    emit(rows, fmt, lambda: console().print(tenants_table(rows)))


@app.command()
def quota(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (slug).")] = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show each of your tenants' quota against what is in use, as bars."""
    fmt = output_format(output, as_json)
    rows = client(ctx).tenants()
    if tenant is not None:
        rows = [row for row in rows if row["slug"] == tenant]
        if not rows:
            typer.echo(f"error: no tenant {tenant!r} among yours", err=True)
            raise typer.Exit(1)

    def render() -> None:
        out = console()
        if not rows:
            out.print("you belong to no tenant yet")
        for index, row in enumerate(rows):
            if index:
                out.print()
            out.print(quota_table(row))

    emit(rows, fmt, render)


@app.command()
def cluster(ctx: typer.Context, output: OutputOpt = None, as_json: JsonOpt = False) -> None:
    """Show the cluster's nodes with free/allocatable resources."""
    fmt = output_format(output, as_json)
    body = client(ctx).cluster()
    emit(body, fmt, lambda: console().print(nodes_table(body["nodes"])))


@tokens_app.command("list")
def tokens_list(ctx: typer.Context, output: OutputOpt = None, as_json: JsonOpt = False) -> None:
    """List your API tokens (never their secrets)."""
    fmt = output_format(output, as_json)
    rows = client(ctx).tokens()
    emit(rows, fmt, lambda: console().print(tokens_table(rows)))


@tokens_app.command("create")
def tokens_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="What the token is for, e.g. laptop or ci.")],
    scope: Annotated[
        TokenScope,
        typer.Option(help="read: only reads; submit: also job writes; admin: all your role allows."),
    ] = TokenScope.submit,
    expires_in_days: Annotated[
        int | None, typer.Option(min=1, help="Days until it stops working (default: the server's, 90).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create an API token (logged in with an admin-scoped token); its secret is printed this once."""
    expires_at = None
    if expires_in_days is not None:
        expires_at = (datetime.now(UTC) + timedelta(days=expires_in_days)).isoformat()
    token = client(ctx).token_create(name, scope=scope.value, expires_at=expires_at)
    if as_json:
        emit_json(token)
        return
    typer.echo(
        f"created token {token['id']} ({token['name']}, scope {token.get('scope')}, expires "
        f"{token.get('expires_at') or 'never'}); copy the secret now, it is not shown again:"
    )
    typer.echo(token["token"])


@tokens_app.command("revoke")
def tokens_revoke(
    ctx: typer.Context, token_id: Annotated[int, typer.Argument(metavar="ID", help="The token's id.")]
) -> None:
    """Revoke one of your API tokens at once."""
    client(ctx).token_revoke(token_id)
    typer.echo(f"revoked token {token_id}")


def main() -> None:
    """Entry point of the `trainyard` script and of `python -m trainyard`."""
    app(prog_name="trainyard")

"""How the CLI prints: API errors on stderr, rich tables for lists, raw JSON/YAML for scripts, log lines."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainyard.client import LogLine, TrainyardError


def console() -> Console:
    """A console on the current stdout (looked up at each call, so test runners can capture it). Nothing it
    prints is read as Rich markup or emoji codes: job names, commands and messages are users' text."""
    return Console(highlight=False, soft_wrap=False, markup=False, emoji=False)


class PlainTable(Table):
    """A table whose text cells are shown as written (`[[x] for x in y]` stays), whatever console prints it."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        cells = [Text(cell) if isinstance(cell, str) else cell for cell in renderables]
        super().add_row(*cells, **kwargs)


def report(exc: TrainyardError) -> None:
    """Print an API error readably on stderr: the message, then one line per field error."""
    if exc.unreachable:
        typer.echo(exc.detail.splitlines()[0] if exc.detail else "cannot reach the server", err=True)
        return
    try:
        label = f"{exc.status} {HTTPStatus(exc.status).phrase}"
    except ValueError:
        label = str(exc.status)
    fields = dict(exc.errors)
    general = fields.pop("", [])
    headline = "; ".join(general) or (exc.detail if not fields else "the server refused the request")
    typer.echo(f"error: {headline} [{label}]", err=True)
    for field, messages in fields.items():
        for message in messages:
            typer.echo(f"  {field}: {message}", err=True)


def emit_json(data: Any) -> None:
    """Print `data` as indented JSON."""
    typer.echo(json.dumps(data, indent=2))


def emit_yaml(data: Any) -> None:
    """Print `data` as YAML (block style, keys in the server's order)."""
    try:
        import yaml
    except ImportError:  # PyYAML is only needed for -o yaml
        typer.echo("-o yaml needs PyYAML: pip install pyyaml", err=True)
        raise typer.Exit(2) from None
    typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False), nl=False)


def print_logs(lines: Iterable[LogLine], *, prefix: bool, as_json: bool) -> None:
    """Print log lines as they arrive: the text (after `[learner]` with `prefix`), or one JSON object each."""
    for line in lines:
        if as_json:
            typer.echo(json.dumps(line))
        else:
            typer.echo(f"[{line['learner']}] {line['text']}" if prefix else line["text"])


def when(stamp: str | None) -> str:
    """An API timestamp shortened for a table: `2026-01-02 10:11:12`."""
    return stamp[:19].replace("T", " ") if stamp else "-"


def relative(stamp: str, now: datetime | None = None) -> str:
    """How far off an API timestamp is, roughly: `in ~25 min`, `in ~3 h`, `now`."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return "?"
    minutes = round(((moment - (now or datetime.now(UTC))).total_seconds()) / 60)
    if minutes <= 0:
        return "now"
    return f"in ~{minutes} min" if minutes < 120 else f"in ~{round(minutes / 60)} h"


def eta_text(job: dict[str, Any], *, brief: bool = False) -> str:
    """A queued job's estimated start: `in ~25 min` (with the time and range unless `brief`), or why it is
    unknown; `-` for a job that is not waiting."""
    if job.get("eta"):
        if brief:
            return relative(job["eta"])
        spread = f", between {when(job['eta_low'])} and {when(job['eta_high'])}" if job.get("eta_low") else ""
        return f"{relative(job['eta'])} ({when(job['eta'])} UTC{spread})"
    return str(job.get("eta_reason") or "-")


def expired(stamp: str | None) -> bool:
    """Whether an API timestamp lies in the past (False for none or an unreadable one)."""
    if not stamp:
        return False
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return False
    return moment.tzinfo is not None and moment <= datetime.now(UTC)


def table(*columns: str, title: str | None = None) -> Table:
    """A plain table whose first column (an id) never wraps; other cells too long for a narrow terminal
    fold onto more lines instead of losing their ends to an ellipsis (sweep runs differ at the end)."""
    grid = PlainTable(*columns, title=title, box=None, header_style="bold", pad_edge=False)
    grid.columns[0].no_wrap = True
    for column in grid.columns[1:]:
        column.overflow = "fold"
    return grid


def jobs_table(jobs: Iterable[dict[str, Any]]) -> Table:
    """A row per job; a job admitted on borrowed quota says so beside its status."""
    grid = table("ID", "NAME", "TENANT", "OWNER", "STATUS", "LEARNERS", "GPUS", "CREATED", "ETA")
    for job in jobs:
        res = job["resources"]
        status = job["status"] + (" (borrowed)" if job.get("borrowed") else "")
        grid.add_row(
            job["id"], job["name"], job["tenant"], job["owner"], status,
            str(res["learners"]), str(res["learners"] * res["gpus"]), when(job["created_at"]),
            eta_text(job, brief=True),
        )  # fmt: skip
    return grid


def job_panel(job: dict[str, Any]) -> list[Table]:
    """One job as a key/value grid, and its current learners as a table when it has any."""
    res, spec = job["resources"], job.get("spec") or {}
    state = job["status"] + (f" ({job['reason']})" if job.get("reason") else "")
    rows = [
        ("job", f"{job['id']}  {job['name']}"),
        ("tenant", job["tenant"]),
        ("owner", job["owner"]),
        ("status", state + (f": {job['message']}" if job.get("message") else "")),
        ("queue position", str(job["queue_position"]) if job.get("queue_position") else "-"),
        ("eta", eta_text(job)),
        ("quota", "borrowed (admitted above the tenant's nominal quota)" if job.get("borrowed") else "nominal"),
        ("priority", str(job["priority"])),
        ("attempt", f"{job['attempt']} (retries allowed: {job['max_retries']})"),
        ("image", str(spec.get("image", "-"))),
        ("command", " ".join(map(str, spec.get("command") or [])) or "-"),
        ("resources", f"{res['learners']} learner(s) x {res['gpus']} GPU, {res['cpu_millis']}m CPU, "
                      f"{res['memory_mib']} MiB"),
        ("source", str(job.get("source") or "-")),
        ("created", when(job["created_at"])),
        ("admitted", when(job.get("admitted_at"))),
        ("started", when(job.get("started_at"))),
        ("finished", when(job.get("finished_at"))),
    ]  # fmt: skip
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for key, value in rows:
        grid.add_row(key, value)
    if not job.get("learners"):
        return [grid]
    learners = table("LEARNER", "POD", "NODE", "PHASE", "EXIT", "REASON", title="learners")
    for row in job["learners"]:
        exit_code = "-" if row["exit_code"] is None else str(row["exit_code"])
        learners.add_row(
            str(row["index"]), row["pod_name"], row["node"] or "-", row["phase"], exit_code, row["reason"]
        )
    return [grid, learners]


def events_table(events: Iterable[dict[str, Any]]) -> Table:
    """A row per job event."""
    grid = table("TIME", "EVENT", "CHANGE", "REASON", "MESSAGE")
    for event in events:
        change = f"{event['from_status'] or '-'} -> {event['to_status']}" if event.get("to_status") else ""
        grid.add_row(when(event["created_at"]), event["kind"], change, event["reason"], event["message"])
    return grid


def metrics_table(points: Iterable[dict[str, Any]]) -> Table:
    """A row per metric point."""
    grid = table("NAME", "LEARNER", "ATTEMPT", "STEP", "VALUE", "TIME")
    for point in points:
        step = "-" if point["step"] is None else str(point["step"])
        grid.add_row(
            point["name"], str(point["learner"]), str(point["attempt"]), step, f"{point['value']:g}",
            when(point["ts"]),
        )  # fmt: skip
    return grid


def metric_buckets_table(series: Iterable[dict[str, Any]]) -> Table:
    """A row per step bucket of each downsampled series."""
    grid = table("NAME", "LEARNER", "STEP", "POINTS", "MIN", "MEAN", "MAX")
    for one in series:
        for i, step in enumerate(one["step"]):
            grid.add_row(
                one["name"], str(one["learner"]), str(step), str(one["count"][i]), f"{one['min'][i]:g}",
                f"{one['mean'][i]:g}", f"{one['max'][i]:g}",
            )  # fmt: skip
    return grid


def results_table(files: Iterable[dict[str, Any]]) -> Table:
    """A row per result file."""
    grid = table("PATH", "LEARNER", "ATTEMPT", "SIZE", "SHA256")
    for entry in files:
        grid.add_row(
            entry["path"],
            str(entry["learner"]),
            str(entry["attempt"]),
            str(entry["size"]),
            entry["sha256"][:12],
        )
    return grid


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def comparison_tables(comparison: dict[str, Any]) -> list[Table]:
    """Jobs side by side: one column per job; the runs, then hyperparameters (a `*` marks those that
    differ), then each metric's last / best value."""
    jobs = comparison["jobs"]
    names = [job["id"] for job in jobs]
    runs = table("", *names, title="runs")
    for label, key in (("name", "name"), ("status", "status"), ("experiment", "experiment")):
        runs.add_row(label, *[str(job.get(key) or "-") for job in jobs])
    runs.add_row("tags", *[", ".join(job.get("tags") or []) or "-" for job in jobs])
    runs.add_row("duration (s)", *[_number(job.get("duration_seconds")) for job in jobs])
    tables = [runs]
    if comparison["hyperparameters"]:
        hyper = table("HYPERPARAMETER", *names, title="hyperparameters (* differ)")
        for row in comparison["hyperparameters"]:
            values = [_number(v) if not isinstance(v, bool) else str(v).lower() for v in row["values"]]
            hyper.add_row(("* " if row["differs"] else "  ") + row["name"], *values)
        tables.append(hyper)
    if comparison["metrics"]:
        final = table("METRIC (last / best)", *names, title="final metrics")
        for row in comparison["metrics"]:
            cells = [
                "-" if cell["last"] is None else f"{_number(cell['last'])} / {_number(cell['best'])}"
                for cell in row["values"]
            ]
            final.add_row(f"{row['name']} ({row['mode']})", *cells)
        tables.append(final)
    return tables


def tenants_table(tenants: Iterable[dict[str, Any]]) -> Table:
    """A row per tenant: role, then used/quota of each resource, claim storage and claims included."""
    grid = table(
        "TENANT", "NAME", "ROLE", "GPUS", "CPU (m)", "MEMORY (MiB)", "RUNNING", "QUEUED", "STORAGE (GiB)", "CLAIMS"
    )  # fmt: skip
    for t in tenants:
        q, u = t["quota"], t["usage"]
        grid.add_row(
            t["slug"], t["name"], t["role"] or "-", f"{u['gpus']}/{q['gpus']}",
            f"{u['cpu_millis']}/{q['cpu_millis']}", f"{u['memory_mib']}/{q['memory_mib']}",
            f"{u['running_jobs']}/{q['max_running_jobs']}", f"{u['queued_jobs']}/{q['max_queued_jobs']}",
            f"{u.get('storage_gib', '-')}/{q.get('storage_gib', '-')}",
            f"{u.get('claims', '-')}/{q.get('max_claims', '-')}",
        )  # fmt: skip
    return grid


def nodes_table(nodes: Iterable[dict[str, Any]]) -> Table:
    """A row per cluster node: free/allocatable of each resource."""
    grid = table("NODE", "READY", "GPU TYPE", "GPUS free/all", "CPU (m) free/all", "MEMORY (MiB) free/all")
    for n in nodes:
        free, alloc = n["free"], n["allocatable"]
        grid.add_row(
            n["name"], "yes" if n["ready"] else "NO", n["gpu_type"] or "-",
            f"{free['gpus']}/{alloc['gpus']}", f"{free['cpu_millis']}/{alloc['cpu_millis']}",
            f"{free['memory_mib']}/{alloc['memory_mib']}",
        )  # fmt: skip
    return grid


def tokens_table(tokens: Iterable[dict[str, Any]]) -> Table:
    """A row per API token (prefix only, never the secret)."""
    grid = table("ID", "NAME", "SCOPE", "PREFIX", "CREATED", "LAST USED", "EXPIRES", "STATE")
    for t in tokens:
        state = "revoked" if t["revoked_at"] else "expired" if expired(t["expires_at"]) else "active"
        grid.add_row(
            str(t["id"]), t["name"], t.get("scope", ""), t["prefix"] + "...", when(t["created_at"]),
            when(t["last_used_at"]),
            when(t["expires_at"]), state,
        )  # fmt: skip
    return grid


QUOTA_ROWS = (
    ("GPUs", "gpus", "gpus", ""),
    ("CPU", "cpu_millis", "cpu_millis", "m"),
    ("memory", "memory_mib", "memory_mib", " MiB"),
    ("running jobs", "running_jobs", "max_running_jobs", ""),
    ("queued jobs", "queued_jobs", "max_queued_jobs", ""),
    ("claim storage", "storage_gib", "storage_gib", " GiB"),
    ("claims", "claims", "max_claims", ""),
)
BAR_WIDTH = 24


def bar(used: float, limit: float, width: int = BAR_WIDTH) -> Text:
    """A usage bar: green below 70%, yellow below 90%, red from there (and over the quota)."""
    share = used / limit if limit > 0 else (1.0 if used > 0 else 0.0)
    filled = min(width, round(min(share, 1.0) * width))
    style = "green" if share < 0.7 else "yellow" if share < 0.9 else "red"
    return Text("█" * filled, style=style) + Text("░" * (width - filled), style="dim")


def quota_table(tenant: dict[str, Any]) -> Table:
    """One tenant's quota against its usage: a row per resource with a bar."""
    role = f", you are {tenant['role']}" if tenant.get("role") else ""
    grid = table("RESOURCE", "USED", "QUOTA", "", "USE", title=f"{tenant['slug']} ({tenant['name']}{role})")
    grid.title_justify = "left"
    for label, used_key, quota_key, unit in QUOTA_ROWS:
        if used_key not in tenant["usage"] or quota_key not in tenant["quota"]:
            continue  # a server from before the row existed
        used, limit = tenant["usage"][used_key], tenant["quota"][quota_key]
        share = f"{used / limit:.0%}" if limit else ("-" if not used else "over")
        grid.add_row(label, f"{used}{unit}", f"{limit}{unit}", bar(used, limit), share)
    return grid

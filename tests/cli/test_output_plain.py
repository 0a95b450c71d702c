"""The CLI prints users' text as written: no Rich markup or emoji codes are read in job names, commands or
messages; at 80 columns a long name folds onto more lines instead of losing its end, so sweep runs that
differ only at the end stay apart."""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.console import Console

from trainyard import output
from trainyard.output import events_table, job_panel, jobs_table

JOB: dict[str, Any] = {
    "id": "j1", "name": "train", "tenant": "vision", "owner": "alice", "status": "running", "reason": "",
    "message": "", "priority": 0, "attempt": 1, "max_retries": 2, "queue_position": None,
    "resources": {"learners": 1, "gpus": 0, "cpu_millis": 1000, "memory_mib": 1024}, "borrowed": False,
    "source": "trainyard", "created_at": "2026-01-01T00:00:00Z", "admitted_at": None, "started_at": None,
    "finished_at": None,
}  # fmt: skip
CODE = "torch.tensor([[float(v) for v in row] for row in rows]) [bold]x[/bold] :thumbs_up:"


def render(*tables: Any, width: int = 200) -> str:
    """As a console that does read markup would print them (Rich's default)."""
    out = StringIO()
    console = Console(file=out, width=width)
    for table in tables:
        console.print(table)
    return out.getvalue()


def test_brackets_and_colons_in_users_text_print_as_written() -> None:
    job = {**JOB, "name": "[red]run[/red]", "message": CODE, "spec": {"command": ["python", "-c", CODE]}}
    event = {"created_at": "2026-01-01T00:00:00Z", "kind": "status", "from_status": "queued"}
    event |= {"to_status": "running", "reason": "Started", "message": CODE}
    assert "[red]run[/red]" in render(jobs_table([job]))
    text = render(*job_panel(job), events_table([event]), width=400)
    assert CODE in text


def test_the_clis_own_console_reads_no_markup(capsys: Any) -> None:
    output.console().print("[[float(v)]] [bold]x[/bold] :thumbs_up:")
    assert capsys.readouterr().out.strip() == "[[float(v)]] [bold]x[/bold] :thumbs_up:"


def test_at_80_columns_names_that_differ_at_the_end_stay_distinguishable() -> None:
    stem = "sweep-learning-rate-0.001-batch-256-warmup-cosine"
    jobs = [{**JOB, "id": f"j{i}", "name": f"{stem}-run-{i}"} for i in (1, 2)]
    lines = render(jobs_table(jobs), width=80).splitlines()
    header = lines[0]
    start, end = header.index("NAME"), header.index("TENANT")
    names: list[str] = []
    for line in lines[1:]:
        if line[:start].strip():
            names.append("")
        if names:
            names[-1] += line[start:end].strip()
    assert names == [f"{stem}-run-1", f"{stem}-run-2"]

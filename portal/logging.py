"""Structured logs: one JSON object per line, carrying the request id and the job id of their context.

The ids live in context variables, so every record logged while a request or a Celery task is handled
carries them without being passed around: `RequestIdMiddleware` (portal/middleware.py) sets the request id
(and the job id of `/jobs/<job_id>/...` URLs), the Celery signal handlers below set the task id and the job
id of tasks that take one, and `job_context` sets a job id anywhere else (the watch loop, a command).
Hand-written rather than python-json-logger: it is one small class, and that package is not a requirement.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from celery import signals

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
job_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("job_id", default=None)
task_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("task_id", default=None)

CONTEXT_FIELDS = ("request_id", "job_id", "task_id")
# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged as a field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "ids",
}


@contextlib.contextmanager
def job_context(job_id: str | None) -> Iterator[None]:
    """Tag every record logged inside the block with `job_id`."""
    token = job_id_var.set(job_id)
    try:
        yield
    finally:
        job_id_var.reset(token)


class ContextFilter(logging.Filter):
    """Copies the context's request, job and task ids onto each record (an `extra=` value wins).

    Django logs a 4xx/5xx response (`django.request`) after the middleware has returned, so outside the
    context; such a record carries the request, and its ids are read from that instead.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in (("request_id", request_id_var), ("job_id", job_id_var), ("task_id", task_id_var)):
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        request = getattr(record, "request", None)
        if request is not None:
            if record.request_id is None:  # type: ignore[attr-defined]
                record.request_id = getattr(request, "request_id", None)
            match = getattr(request, "resolver_match", None)
            if record.job_id is None and match is not None:  # type: ignore[attr-defined]
                job_id = match.kwargs.get("job_id")
                record.job_id = job_id if isinstance(job_id, str) else None
        return True


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "message", "request_id", "job_id", "task_id", ...}` on one line.

    Ids that are not set are left out; `extra=` fields are kept (as strings when not JSON-serialisable);
    an exception becomes `exc_info` (the formatted traceback).
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                entry[key] = value
        request = entry.pop("request", None)
        if request is not None and hasattr(request, "path"):  # django.request: the request object itself
            entry["method"], entry["path"] = getattr(request, "method", None), request.path
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """The human format (`make up`), with the ids in brackets when there are any."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(ids)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        ids = [f"{name}={getattr(record, name)}" for name in CONTEXT_FIELDS if getattr(record, name, None)]
        record.ids = f" [{' '.join(ids)}]" if ids else ""
        return super().format(record)


def _task_job_id(task: Any, args: Any, kwargs: Any) -> str | None:
    """The `job_id` argument of a task call, if the task takes one (every engine task does)."""
    if isinstance(kwargs, dict) and isinstance(kwargs.get("job_id"), str):
        return kwargs["job_id"]
    try:
        bound = inspect.signature(task.run).bind_partial(*(args or ()), **(kwargs or {}))
    except (TypeError, ValueError):
        return None
    value = bound.arguments.get("job_id")
    return value if isinstance(value, str) else None


_task_tokens: dict[str, tuple[contextvars.Token[str | None], contextvars.Token[str | None]]] = {}


@signals.task_prerun.connect
def _task_started(
    sender: Any = None,
    task_id: str | None = None,
    task: Any = None,
    args: Any = None,
    kwargs: Any = None,
    **_: Any,
) -> None:
    if task_id is None:
        return
    _task_tokens[task_id] = (task_id_var.set(task_id), job_id_var.set(_task_job_id(task, args, kwargs)))


@signals.task_postrun.connect
def _task_finished(task_id: str | None = None, **_: Any) -> None:
    tokens = _task_tokens.pop(task_id or "", None)
    if tokens is not None:
        with contextlib.suppress(ValueError):  # reset in another context (a thread pool): just clear
            task_id_var.reset(tokens[0])
            job_id_var.reset(tokens[1])
            return
        task_id_var.set(None)
        job_id_var.set(None)

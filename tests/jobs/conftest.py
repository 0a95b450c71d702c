"""Fixtures the jobs tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobs.services import lifecycle


@pytest.fixture
def held_launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, ...]]]:
    """Launch tasks that admission queues are kept here instead of reaching the worker: as if the worker
    that took them died before finishing. Other tasks pass through."""
    held: list[tuple[Any, ...]] = []
    send = lifecycle.enqueue

    def enqueue(task: str, *args: Any, countdown: float = 0) -> None:
        if task == "jobs.tasks.launch":
            held.append(args)
        else:
            send(task, *args, countdown=countdown)

    monkeypatch.setattr(lifecycle, "enqueue", enqueue)
    yield held

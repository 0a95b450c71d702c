"""Fixtures the jobs tests share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from jobs.services import lifecycle
from kubesim.testing import KubeSim


@pytest.fixture
def held_launches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, ...]]]:
    """Launch tasks that admission queues are kept here instead of reaching the worker: as if the worker
    that took them died before finishing. Other tasks pass through."""
    held: list[tuple[Any, ...]] = []
    send = lifecycle.enqueue

    def enqueue(task: str, *args: Any, countdown: float = 0) -> None:
        if task == "jobs.tasks.launch":
            # Once admission's transaction commits, as the real enqueue sends it: a test that sees the launch
            # held then reads the admitted attempt, never the row as it was before.
            transaction.on_commit(lambda: held.append(args))
        else:
            send(task, *args, countdown=countdown)

    monkeypatch.setattr(lifecycle, "enqueue", enqueue)
    yield held


@pytest.fixture
def nodes(engine: KubeSim) -> Iterator[list[str]]:
    """Names of the nodes a test adds to the session's kubesim; each is removed (with its kubelet) at the end."""
    added: list[str] = []
    yield added
    for name in added:
        if name in engine.cluster.kubelets:
            engine.lose_node(name)

"""Service entry points own their transaction: `durable_service` makes a call open a durable one.

A service promises all-or-nothing and pushes its news (Celery tasks, WebSocket frames) on commit. A caller
that wrapped it in a transaction of its own would silently break both: the pushes would wait for the
caller's commit, and the service's writes would share the caller's fate. A durable block makes that mistake
fail loudly (Django raises RuntimeError when it is opened inside another atomic block), as Zulip does for
its actions. A service or an admin view that composes services on purpose calls `.nested`, which runs the
same work in the caller's transaction, as a savepoint.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

from django.db import transaction

P = ParamSpec("P")
R = TypeVar("R")


class DurableService(Generic[P, R]):
    """A service function whose call runs in a durable transaction; `.nested(...)` runs it inside the
    caller's transaction instead (a savepoint: its writes roll back alone when it raises)."""

    def __init__(self, work: Callable[P, R]) -> None:
        functools.update_wrapper(self, work)
        self._work = work
        self.nested: Callable[P, R] = transaction.atomic()(work)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        with transaction.atomic(durable=True):
            return self._work(*args, **kwargs)


def durable_service(work: Callable[P, R]) -> DurableService[P, R]:
    """Decorate a service entry point: its whole body is one durable transaction."""
    return DurableService(work)

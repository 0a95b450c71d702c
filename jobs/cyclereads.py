"""What the scheduler cycle's snapshot reads beyond admission's input, for the cycle's later steps.

Why: the ETA step and the queue-position write need columns of the very rows the snapshot reads (the
waiting jobs' names and stored positions, the running jobs' tenants and names); reading them once, by the
snapshot's own queries in the same transaction, saves a query per step over thousands of rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Running(NamedTuple):
    """A job holding resources as the ETA's duration model sees it (`jobs.estimates`)."""

    job_id: str
    tenant: str
    name: str
    shape: tuple[int, int, int, int]
    max_runtime: float | None
    since: float | None


@dataclass
class CycleReads:
    """``positions``: each waiting job's `POSITION_COLUMNS` (`queue_positions_record` compares them);
    ``names``: each waiting job's name by id; ``running``: the jobs holding resources."""

    positions: list[tuple[Any, ...]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    running: list[Running] = field(default_factory=list)

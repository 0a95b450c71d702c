"""The TensorBoard process manager (jobs/tensorboard/manager.py) with real `tensorboard` processes: one per
job, reused while in use, a clear refusal beyond the cap, stopped (and its folder removed) once idle, by a
request's sweep or by the sweeper thread. Every process a test starts is stopped by the fixture."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobs.tensorboard.manager import BoardManager, TensorBoardBusy, path_prefix
from tests.jobs.engine import wait_until
from tests.jobs.tensorboard_files import write_scalars


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def manager_for(tmp_path: Path, clock: Clock | None = None, **options: float) -> BoardManager:
    settings = {
        "max_processes": 1,
        "idle_seconds": 60.0,
        "start_seconds": 120.0,
        "sync_seconds": 5.0,
    } | options
    return BoardManager(root=tmp_path / "boards", clock=clock or Clock(), **settings)  # type: ignore[arg-type]


@pytest.fixture
def managers() -> Iterator[list[BoardManager]]:
    made: list[BoardManager] = []
    yield made
    for manager in made:
        manager.stop_all()


def scalars_into(source: Path) -> Callable[[Path], None]:
    def sync(logdir: Path) -> None:
        run = logdir / "attempt-1" / "learner-0"
        run.mkdir(parents=True, exist_ok=True)
        (run / "events.out.tfevents.1.test").write_bytes(source.read_bytes())

    return sync


def test_one_process_per_job_reused_capped_and_stopped_when_idle(
    tmp_path: Path, clock: Clock, managers: list[BoardManager]
) -> None:
    write_scalars(tmp_path / "w", "loss", [1.0, 0.5])
    (source,) = (tmp_path / "w").glob("events.out.tfevents.*")
    manager = manager_for(tmp_path, clock)
    managers.append(manager)
    syncs: list[Path] = []

    def sync(logdir: Path) -> None:
        syncs.append(logdir)
        scalars_into(source)(logdir)

    board = manager.acquire("job1", sync)
    with urllib.request.urlopen(f"{board.url}{path_prefix('job1')}/data/runs", timeout=30) as answer:  # noqa: S310
        assert b"attempt-1/learner-0" in answer.read()
    pid = board.process.pid

    clock.now += 30
    again = manager.acquire("job1", sync)
    assert again.process.pid == pid and manager.running() == ["job1"], "reused, not started twice"
    assert len(syncs) == 2, "synced at start and again after sync_seconds of use"

    with pytest.raises(TensorBoardBusy, match="1 of 1 TensorBoard instances are in use"):
        manager.acquire("job2", sync)
    assert manager.running() == ["job1"]

    clock.now += 61
    assert manager.sweep() == ["job1"]
    assert board.process.poll() is not None and manager.running() == []
    assert not (manager.root / "job1").exists(), "its local copy is removed with it"


def test_the_sweeper_thread_stops_an_idle_process_by_itself(
    tmp_path: Path, managers: list[BoardManager]
) -> None:
    write_scalars(tmp_path / "w", "loss", [1.0])
    (source,) = (tmp_path / "w").glob("events.out.tfevents.*")
    manager = manager_for(tmp_path, Clock(), idle_seconds=0.5)
    manager.clock = time.monotonic
    managers.append(manager)
    board = manager.acquire("job1", scalars_into(source))
    assert board.ready and board.process.poll() is None, "a process still starting is never idle"
    sweeper = manager.sweeper
    assert sweeper is not None and sweeper.is_alive()
    wait_until(lambda: board.process.poll() is not None, timeout=30, what="the idle process to be stopped")
    assert manager.running() == []
    wait_until(
        lambda: not sweeper.is_alive(), timeout=5, what="the sweeper to end with nothing left to sweep"
    )
    assert manager.sweeper is None

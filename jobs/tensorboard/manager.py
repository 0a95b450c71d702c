"""One `tensorboard` process per job being looked at, started on demand and stopped when idle.

Each runs `python -m tensorboard.main` on 127.0.0.1 on a free port, with `--path_prefix /jobs/<id>/tensorboard`
(so its pages and requests work behind the portal's proxy) and `--logdir` the job's local folder. At most
`max_processes` run at once (`TensorBoardBusy` beyond, after idle ones are stopped); one unused for
`idle_seconds` since it first answered or was last used is stopped by the manager's sweeper thread (or by
the next request's sweep), and a process still starting is never idle. The processes belong to the web
process that started them and are stopped when it exits normally (atexit; daphne does on SIGTERM and
SIGINT). They are per web process, where a Celery task could not reach them: that is why the
manager sweeps, not a beat task.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from django.conf import settings

log = logging.getLogger(__name__)
STOP_GRACE_SECONDS = 10.0


class TensorBoardBusy(Exception):
    """As many TensorBoard processes as allowed are running, none of them idle."""


class TensorBoardFailed(Exception):
    """The process exited or did not answer in time; the message says what its log said."""


@dataclass
class Board:
    """One running TensorBoard: its job, folder, port and process, and when it was last used."""

    job_id: str
    logdir: Path
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    last_used: float
    synced_at: float = 0.0
    ready: bool = False
    sync_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def path_prefix(job_id: str) -> str:
    """Where a job's TensorBoard is served under the portal."""
    return f"/jobs/{job_id}/tensorboard"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BoardManager:
    """The TensorBoard processes of this web process."""

    def __init__(
        self,
        *,
        root: Path,
        max_processes: int,
        idle_seconds: float,
        start_seconds: float,
        sync_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(root) / str(os.getpid())  # web processes on one host keep apart
        self.max_processes = max_processes
        self.idle_seconds = idle_seconds
        self.start_seconds = start_seconds
        self.sync_seconds = sync_seconds
        self.clock = clock
        self.boards: dict[str, Board] = {}
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.sweeper: threading.Thread | None = None

    def acquire(self, job_id: str, sync: Callable[[Path], object]) -> Board:
        """The job's running TensorBoard, started if needed (its folder synced by `sync` first, and again
        every `sync_seconds` of use); TensorBoardBusy when the cap is reached, TensorBoardFailed when it
        cannot start."""
        self.sweep()
        with self.lock:
            board = self.boards.get(job_id)
            if board is None:
                if len(self.boards) >= self.max_processes:
                    raise TensorBoardBusy(
                        f"{len(self.boards)} of {self.max_processes} TensorBoard instances are in use; "
                        f"one stops after {self.idle_seconds:g} s unused: try again later"
                    )
                board = self._start(job_id, sync)
                self.boards[job_id] = board
                self._start_sweeper()
            board.last_used = self.clock()
        if self.clock() - board.synced_at >= self.sync_seconds:
            with board.sync_lock:
                sync(board.logdir)
                board.synced_at = self.clock()
        try:
            self._wait_ready(board)
        except TensorBoardFailed:
            self.stop(job_id)
            raise
        return board

    def _start(self, job_id: str, sync: Callable[[Path], object]) -> Board:
        logdir = self.root / job_id / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        sync(logdir)
        port = _free_port()
        log_path = self.root / job_id / "tensorboard.log"
        argv = [
            sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
            "--port", str(port), "--path_prefix", path_prefix(job_id), "--load_fast", "false",
            "--reload_interval", "5",
        ]  # fmt: skip
        with log_path.open("wb") as output:
            process = subprocess.Popen(
                argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        log.info("started TensorBoard for job %s on port %s (pid %s)", job_id, port, process.pid)
        now = self.clock()
        return Board(job_id, logdir, port, process, log_path, last_used=now, synced_at=now)

    def _wait_ready(self, board: Board) -> None:
        deadline = time.monotonic() + self.start_seconds
        while True:
            if board.process.poll() is not None:
                raise TensorBoardFailed(
                    f"TensorBoard exited with {board.process.returncode}: {self._tail(board)}"
                )
            if board.ready:
                return
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", board.port), timeout=1):
                board.ready, board.last_used = True, self.clock()
                return
            if time.monotonic() > deadline:
                raise TensorBoardFailed(f"TensorBoard did not answer within {self.start_seconds:g} s")
            self.closing.wait(0.1)

    @staticmethod
    def _tail(board: Board) -> str:
        try:
            return board.log_path.read_text(errors="replace").strip().splitlines()[-1][-300:]
        except (OSError, IndexError):
            return "(no output)"

    def sweep(self) -> list[str]:
        """Stop the processes unused for `idle_seconds` and forget those that exited; returns their jobs."""
        now = self.clock()
        with self.lock:
            gone = [
                job_id
                for job_id, board in self.boards.items()
                if (board.ready and now - board.last_used > self.idle_seconds)
                or board.process.poll() is not None
            ]
        for job_id in gone:
            self.stop(job_id)
        return gone

    def stop(self, job_id: str) -> None:
        """Stop one job's TensorBoard (SIGTERM, then SIGKILL after a grace period), forget it, and remove its
        local folder."""
        with self.lock:
            board = self.boards.pop(job_id, None)
        if board is None:
            return
        if board.process.poll() is None:
            board.process.terminate()
            try:
                board.process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                board.process.kill()
                board.process.wait()
        shutil.rmtree(self.root / job_id, ignore_errors=True)  # a cache of storage: synced again on start
        log.info("stopped TensorBoard of job %s", job_id)

    def stop_all(self) -> None:
        """Stop every process and the sweeper (at exit, and in tests)."""
        self.closing.set()
        sweeper = self.sweeper
        if sweeper is not None and sweeper is not threading.current_thread():
            sweeper.join(timeout=STOP_GRACE_SECONDS)
        for job_id in list(self.boards):
            self.stop(job_id)
        self.sweeper = None
        self.closing.clear()

    def touch(self, job_id: str) -> None:
        """Count a job's TensorBoard as used now (after a long answer, so idleness counts from its end)."""
        with self.lock:
            board = self.boards.get(job_id)
            if board is not None:
                board.last_used = self.clock()

    def running(self) -> list[str]:
        """The jobs whose TensorBoard runs now."""
        with self.lock:
            return sorted(self.boards)

    def _start_sweeper(self) -> None:
        """Start the sweeper thread unless it runs (called holding the lock, as it ends holding it)."""
        if self.sweeper is not None and self.sweeper.is_alive():
            return
        interval = max(min(self.idle_seconds / 2, 30.0), 0.05)

        def loop() -> None:
            while not self.closing.wait(interval):
                try:
                    self.sweep()
                except Exception:
                    log.exception("sweeping idle TensorBoard processes failed")
                with self.lock:
                    if not self.boards:
                        self.sweeper = None
                        return

        self.sweeper = threading.Thread(target=loop, name="tensorboard-sweeper", daemon=True)
        self.sweeper.start()


@lru_cache(maxsize=1)
def boards() -> BoardManager:
    """This web process's manager, from the TENSORBOARD_* settings; its processes stop when it exits."""
    manager = BoardManager(
        root=Path(settings.TENSORBOARD_ROOT),
        max_processes=settings.TENSORBOARD_MAX_PROCESSES,
        idle_seconds=settings.TENSORBOARD_IDLE_SECONDS,
        start_seconds=settings.TENSORBOARD_START_SECONDS,
        sync_seconds=settings.TENSORBOARD_SYNC_SECONDS,
    )
    atexit.register(manager.stop_all)
    return manager

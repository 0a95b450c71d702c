"""`make up`'s processes under honcho and deploy/local/respawn.py: a process that crashes is started again
while the others keep running, and honcho's Ctrl-C (SIGINT) still stops every one of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESPAWN = ROOT / "deploy" / "local" / "respawn.py"
HONCHO = Path(sys.executable).parent / "honcho"

# Crashes on its first run; on the next it writes its pid and stays up.
CRASHER = """
import os, pathlib, time
here = pathlib.Path('.')
if not (here / 'crashed').exists():
    (here / 'crashed').write_text('once')
    raise SystemExit(3)
(here / 'crasher.pid').write_text(str(os.getpid()))
while True:
    time.sleep(1)
"""
STEADY = """
import os, pathlib, time
pathlib.Path('steady.pid').write_text(str(os.getpid()))
while True:
    time.sleep(1)
"""


def _wait(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_crashed_process_is_started_again_and_ctrl_c_stops_everything(tmp_path: Path) -> None:
    (tmp_path / "crasher.py").write_text(CRASHER)
    (tmp_path / "steady.py").write_text(STEADY)
    wrap = f"{sys.executable} {RESPAWN}"
    (tmp_path / "Procfile").write_text(
        f"crasher: {wrap} crasher -- {sys.executable} crasher.py\nsteady: {wrap} steady -- {sys.executable} steady.py\n"
    )
    log = (tmp_path / "honcho.log").open("wb")
    honcho = subprocess.Popen(
        [str(HONCHO), "start", "-f", "Procfile"], cwd=tmp_path, stdout=log, stderr=log, start_new_session=True
    )
    pids: list[int] = []
    try:
        _wait(lambda: (tmp_path / "steady.pid").exists(), "the steady process")
        steady = int((tmp_path / "steady.pid").read_text())
        _wait(lambda: (tmp_path / "crasher.pid").exists(), "the crashed process to be started again")
        crasher = int((tmp_path / "crasher.pid").read_text())
        pids = [steady, crasher]
        assert honcho.poll() is None, "honcho stopped when one process exited"
        assert _alive(steady), "the other process was stopped with the crashed one"
        output = (tmp_path / "honcho.log").read_text()
        assert "respawn[crasher]: exited with status 3; starting it again in 1 s" in output, output

        os.killpg(honcho.pid, signal.SIGINT)  # what the terminal sends on Ctrl-C
        assert honcho.wait(timeout=30) is not None
        _wait(lambda: not any(_alive(pid) for pid in pids), "every process to stop after Ctrl-C")
    finally:
        if honcho.poll() is None:
            os.killpg(honcho.pid, signal.SIGKILL)
            honcho.wait(timeout=10)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        log.close()


def test_every_procfile_process_runs_under_respawn() -> None:
    for line in (ROOT / "Procfile").read_text().splitlines():
        name, _, command = line.partition(": ")
        assert command.startswith(f".venv/bin/python deploy/local/respawn.py {name} -- "), line

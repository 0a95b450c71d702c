"""Run one command of the Procfile and start it again whenever it exits, until told to stop.

honcho (`make up`) stops every process as soon as one exits: a crashed watcher took web, worker, kubesim
and its running pods down with it, and nothing started them again. Each Procfile line runs under this
wrapper instead, so honcho sees a process that keeps running: a command that exits (crash, OOM kill, a
dependency down at start) is started again after 1 s, then 2, 4, ... up to 30 s while it keeps failing
fast; a run that lasted RESET_AFTER seconds starts the count again. SIGTERM or SIGINT (honcho on Ctrl-C)
is passed to the command and ends the wrapper once the command is gone (SIGKILL after STOP_GRACE seconds).

No supervisor from PyPI does this inside honcho's one-command `make up` without a second configuration
file per process (supervisord, circus); this is the part of one that the Procfile needs. It imports nothing
of the project.

Usage: python deploy/local/respawn.py NAME -- COMMAND [ARG ...]
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from types import FrameType

FIRST_DELAY = 1.0
MAX_DELAY = 30.0
RESET_AFTER = 30.0
STOP_GRACE = 20.0


def _say(name: str, text: str) -> None:
    print(f"respawn[{name}]: {text}", file=sys.stderr, flush=True)


def supervise(name: str, command: list[str]) -> int:
    """Run `command` again and again until SIGTERM/SIGINT; the exit status to leave with (0 once stopped)."""
    stop = threading.Event()
    stopped_at: list[float] = []
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        stopped_at.append(time.monotonic())
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    delay = FIRST_DELAY
    while not stop.is_set():
        started = time.monotonic()
        try:
            child = subprocess.Popen(command)
        except OSError as exc:
            _say(name, f"cannot start {command[0]}: {exc}")
            return 127
        if stop.is_set():  # the signal came while it was being started
            child.terminate()
        while True:
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if stopped_at and time.monotonic() - stopped_at[0] > STOP_GRACE:
                    _say(name, f"still running {STOP_GRACE:.0f} s after the stop signal; killing it")
                    child.kill()
        if stop.is_set():
            break
        if time.monotonic() - started >= RESET_AFTER:
            delay = FIRST_DELAY
        _say(name, f"exited with status {code}; starting it again in {delay:.0f} s")
        if stop.wait(delay):
            break
        delay = min(delay * 2, MAX_DELAY)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    return supervise(argv[0], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

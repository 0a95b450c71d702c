"""Running one container as a local process group: command, env, paths, logs and resource limits."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from kubesim.cgroups import Cgroup, CgroupManager
from kubesim.procfs import process_identity, tree_usage
from kubesim.sandbox import PRELUDE

Obj = dict[str, Any]
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_PYTHON = re.compile(r"^(/usr(/local)?/bin/)?python(3(\.\d+)?)?$")
_PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "LD_LIBRARY_PATH", "TZ")
RATE_WINDOW = 2.0  # seconds of CPU samples a container's reported rate spans


def now_rfc3339(nanos: bool = False) -> str:
    """Current UTC time in RFC 3339, with nanoseconds for log lines."""
    stamp = datetime.now(UTC)
    if nanos:
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(value: str, env: dict[str, str]) -> str:
    """Expand ``$(VAR)`` references like the kubelet; ``$$`` escapes; unknown ones stay."""

    def repl(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR.sub(repl, value)


def resolve_executable(argv: list[str]) -> list[str]:
    """Point ``python``/``python3`` at the interpreter kubesim runs under, so jobs see the same venv."""
    if argv and _PYTHON.match(argv[0]):
        return [sys.executable, *argv[1:]]
    return argv


class PathMap:
    """Maps container mount paths to host folders by rewriting path prefixes in argv, env and workingDir."""

    def __init__(self, mounts: list[tuple[str, str]]):
        self.mounts = sorted(((m.rstrip("/") or "/", h) for m, h in mounts), key=lambda x: -len(x[0]))
        self.patterns = [
            (re.compile(r"(?<![\w./-])" + re.escape(m) + r"(?=/|$|[\s:;,'\"=])"), host)
            for m, host in self.mounts
        ]

    def rewrite(self, text: str) -> str:
        """Replace every mount-path prefix in ``text`` with its host folder."""
        for pattern, host in self.patterns:
            text = pattern.sub(host.replace("\\", "\\\\"), text)
        return text


@dataclass
class ContainerProcess:
    """A started container: its process group, log writer thread and limits."""

    name: str
    proc: subprocess.Popen[bytes] | None
    log_path: Path
    started_at: str
    cgroup: Cgroup = field(default_factory=Cgroup)
    memory_limit: int | None = None
    cpu_limit: float | None = None
    start_error: str | None = None
    oom_killed: bool = False
    reader: threading.Thread | None = None
    stopped: bool = False
    exit_code: int | None = None
    finished_at: str | None = None
    cpu_history: deque[tuple[float, float]] = field(default_factory=deque)  # (time, CPU seconds)
    cpu_nanocores: int = 0
    rss_bytes: int = 0

    @property
    def pid(self) -> int | None:
        """Process id (also the process group id), or None when it never started."""
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        """The exit code once the process has ended and its output is fully logged, else None."""
        if self.exit_code is not None:
            return self.exit_code
        if self.proc is None:
            self.exit_code = 128
            self.finished_at = self.started_at
            return self.exit_code
        code = self.proc.poll()
        if code is None:
            return None
        self.signal_group(signal.SIGKILL)
        if self.reader is not None:
            self.reader.join(timeout=2)
        self.exit_code = 128 - code if code < 0 else code
        self.finished_at = now_rfc3339()
        return self.exit_code

    def signal_group(self, sig: int, extra: list[int] | None = None) -> None:
        """Send a signal to the whole process group (and any stragglers still in its cgroup)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)
        for pid in extra or []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def sample(self, now: float, cgroups: CgroupManager | None = None) -> None:
        """Refresh the CPU rate (nanocores) and memory for metrics and RSS-polling limits: from the
        container's cgroups, as cAdvisor reads them (CPU time of every process that ever ran in it, the
        working set), else from /proc over the container's whole process tree (a command that started its
        own session, as the learner launcher does, included)."""
        if self.proc is None or self.exit_code is not None:
            self.cpu_nanocores, self.rss_bytes = 0, 0
            return
        cpu_seconds, memory = cgroups.usage(self.cgroup) if cgroups is not None else (None, None)
        if cpu_seconds is None or memory is None:
            usage = tree_usage(self.proc.pid)
            cpu_seconds = usage.cpu_seconds if cpu_seconds is None else cpu_seconds
            memory = usage.rss_bytes if memory is None else memory
        # The rate spans RATE_WINDOW seconds of samples (metrics-server's window is 15 s or more; a short one
        # reads the scheduler's jitter on a busy machine as usage).
        history = self.cpu_history
        while len(history) > 1 and now - history[1][0] >= RATE_WINDOW:
            history.popleft()
        if history and now > history[0][0]:
            first_time, first_cpu = history[0]
            self.cpu_nanocores = max(int((cpu_seconds - first_cpu) / (now - first_time) * 1e9), 0)
        history.append((now, cpu_seconds))
        self.rss_bytes = memory


def start_container(
    name: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    log_path: Path,
    cgroups: CgroupManager,
    cgroup_name: str,
    memory_limit: int | None,
    cpu_limit: float | None,
    pid_file: Path | None = None,
    sandboxed: bool = False,
) -> ContainerProcess:
    """Start ``argv`` in a new session with output captured to ``log_path`` in CRI log format; ``pid_file``
    records the process so that a later kubesim can kill it if this one dies without stopping it.

    A ``sandboxed`` argv is a bwrap command line: its own processes ignore SIGTERM (the ignore is
    inherited through exec; the sandbox restores the default for the command) so that a SIGTERM sent to
    the process group reaches only the command, and bwrap lives on while the command's handler runs."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    group = cgroups.create(cgroup_name, memory_limit, cpu_limit)
    prelude = PRELUDE if sandboxed else ""
    if group.procs_files or sandboxed:
        join = prelude + 'while [ "$1" != -- ]; do echo $$ > "$1"; shift; done; shift; exec "$@"'
        full = ["/bin/sh", "-c", join, "sh", *group.procs_files, "--", *argv]
    else:
        full = argv
    started = now_rfc3339()
    try:
        proc = subprocess.Popen(
            full,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        cgroups.remove(group)
        log_path.touch()
        return ContainerProcess(name, None, log_path, started, start_error=str(exc))
    assert proc.stdout is not None
    if pid_file is not None:
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{proc.pid} {process_identity(proc.pid) or ''}\n")
    container = ContainerProcess(name, proc, log_path, started, group, memory_limit, cpu_limit)
    container.reader = threading.Thread(
        target=_copy_log, args=(proc.stdout, log_path), name=f"log-{name}-{proc.pid}", daemon=True
    )
    container.reader.start()
    return container


def _copy_log(stream: IO[bytes], path: Path) -> None:
    with open(path, "ab", buffering=0) as out, stream:
        for line in iter(stream.readline, b""):
            tag = b" F " if line.endswith(b"\n") else b" P "
            if not line.endswith(b"\n"):
                line += b"\n"
            out.write(now_rfc3339(nanos=True).encode() + b" stdout" + tag + line)


def wait_all(containers: list[ContainerProcess], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for the given containers to exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(c.poll() is None for c in containers):
        time.sleep(0.02)


def kill_leftovers(pods_dir: Path) -> list[int]:
    """SIGKILL the process groups that an earlier kubesim started and did not stop (it was killed itself):
    each container's pid file names its process and that process's identity, so a pid reused by some other
    process is left alone. Returns the process groups killed."""
    killed = []
    for pid_file in sorted(pods_dir.glob("*/pids/*.pid")):
        try:
            pid_text, _, identity = pid_file.read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if identity and process_identity(pid) == identity:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
        pid_file.unlink(missing_ok=True)
    return killed

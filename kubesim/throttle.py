"""CPU limit fallback when no CPU cgroup is writable: duty-cycle a process group with SIGSTOP/SIGCONT."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable
from typing import Any

from kubesim.procfs import group_usage

_PERIOD = 0.1


class Throttle:
    """One small thread per CPU-limited container that stops it for the part of each period it overspent."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.threads: dict[int, threading.Thread] = {}
        self.stopping = threading.Event()

    def update(self, pods: Iterable[Any]) -> None:
        """Start throttling newly started CPU-limited containers that have no CPU cgroup."""
        if not self.enabled:
            return
        for pod in pods:
            for proc in pod.containers.values():
                if proc.cpu_limit is None or proc.pid is None or proc.exit_code is not None:
                    continue
                if proc.pid in self.threads or proc.cgroup.cpu_limited:
                    continue
                thread = threading.Thread(
                    target=self._run,
                    args=(proc.pid, proc.cpu_limit),
                    daemon=True,
                    name=f"throttle-{proc.pid}",
                )
                self.threads[proc.pid] = thread
                thread.start()

    def _run(self, pgid: int, limit: float) -> None:
        last = group_usage(pgid).cpu_seconds
        while not self.stopping.is_set():
            time.sleep(_PERIOD)
            usage = group_usage(pgid)
            if not usage.pids:
                break
            used, last = usage.cpu_seconds - last, usage.cpu_seconds
            overspent = used / limit - _PERIOD
            if overspent > 0:
                try:
                    os.killpg(pgid, signal.SIGSTOP)
                    time.sleep(min(overspent, 1.0))
                    os.killpg(pgid, signal.SIGCONT)
                except ProcessLookupError:
                    break
                last = group_usage(pgid).cpu_seconds
        self.threads.pop(pgid, None)

    def stop(self) -> None:
        """End all throttling threads."""
        self.stopping.set()

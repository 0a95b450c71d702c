"""`manage.py watch_cluster`: the long-running watch loop (pods → job states, logs → database).

With LEADER_ELECTION (the default) several of them may run: the one holding the `watcher` leader lock
(common/leader.py) watches, the others stand by, touching their heartbeat file, until it dies. A new leader
starts as any watcher does, from a full list (every active job judged afresh) and each learner's stored log
cursor, so nothing that happened while nobody led is lost and no log line is stored twice.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from common import telemetry
from common.leader import LeaderLock, lost_exit
from jobs import cluster
from jobs.watcher import Watcher


class Command(BaseCommand):
    help = "Watch the cluster's managed pods: move jobs through their states and store their logs."

    def handle(self, *args: Any, **options: Any) -> None:
        stopping = threading.Event()
        watcher: Watcher | None = None

        def stop(*_: Any) -> None:
            stopping.set()
            if watcher is not None:
                watcher.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        lock: LeaderLock | None = None
        if settings.LEADER_ELECTION:
            lock = LeaderLock(
                "watcher",
                lease_seconds=settings.LEADER_LEASE_SECONDS,
                retry_seconds=settings.LEADER_RETRY_SECONDS,
            )
            self.stdout.write(f"standing by as {lock.identity} until this watcher leads")
            if not lock.acquire(stopping, on_standby=lambda: telemetry.heartbeat("watcher")):
                return
            lock.hold(on_lost=lost_exit("watcher"))
            connection.close()  # whatever the standby's thread held; the watcher opens its own
        try:
            watcher = Watcher(cluster.cluster())
            if stopping.is_set():
                return
            self.stdout.write("watching managed pods")
            watcher.run()
        finally:
            if lock is not None:
                lock.release()

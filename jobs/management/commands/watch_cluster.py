"""`manage.py watch_cluster`: the long-running watch loop (pods → job states, logs → database)."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand

from jobs import cluster
from jobs.watcher import Watcher


class Command(BaseCommand):
    help = "Watch the cluster's managed pods: move jobs through their states and store their logs."

    def handle(self, *args: Any, **options: Any) -> None:
        watcher = Watcher(cluster.cluster())
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: watcher.stop())
        self.stdout.write("watching managed pods")
        watcher.run()

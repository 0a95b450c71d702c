"""Serve the embedded S3 of `make up`: moto's S3 server with the demo bucket (portal.demo_s3)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from portal import demo_s3


class Command(BaseCommand):
    help = (
        "Run moto's S3 server on S3_DEMO_HOST:S3_DEMO_PORT with the demo bucket and dataset, until stopped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=settings.S3_DEMO_HOST)
        parser.add_argument("--port", type=int, default=settings.S3_DEMO_PORT)

    def handle(self, *args: Any, host: str, port: int, **options: Any) -> None:
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        try:
            with demo_s3.demo_s3(host, port, settings.S3_DEMO_POD_HOST, settings.S3_DEMO_POD_PORT) as url:
                size = len(demo_s3.dataset_csv())
                self.stdout.write(
                    f"demo S3 at {url}: s3://{demo_s3.BUCKET}/{demo_s3.DATASET_KEY} ({size} bytes)"
                )
                self.stdout.flush()
                stop.wait()
        except OSError as exc:
            # honcho stops every process when one exits: say why, and keep `make up` running without it.
            self.stderr.write(f"demo S3 not started: {exc}; the examples that read S3 will fail to fetch")
            self.stderr.flush()
            stop.wait()
        self.stdout.write("demo S3 stopped")

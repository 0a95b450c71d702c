"""`manage.py spec validate FILE...`: check job specs and FfDL manifests offline, without a database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.core.spec import SpecError, parse_spec

MAX_FILE_BYTES = 65536


class Command(BaseCommand):
    """Validate spec files and print each valid one, normalized, as one JSON line; never prints secrets."""

    help = "Work with job spec files. `spec validate FILE...` prints each normalized spec as JSON."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        subcommands = parser.add_subparsers(dest="subcommand", required=True, parser_class=CommandParser)
        validate = subcommands.add_parser(
            "validate", help="Validate Trainyard specs or FfDL manifests; exit 1 if any is invalid."
        )
        validate.add_argument("files", nargs="+", metavar="FILE")
        validate.add_argument(
            "--indent", type=int, default=None, help="Pretty-print the JSON with this indent."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["subcommand"] == "validate":
            self._validate(options["files"], options["indent"])

    def _validate(self, files: list[str], indent: int | None) -> None:
        failed = 0
        for name in files:
            try:
                with Path(name).open("rb") as handle:
                    content = handle.read(MAX_FILE_BYTES + 1)
            except OSError as exc:
                self.stderr.write(f"{name}: cannot read the file: {exc.strerror or exc}")
                failed += 1
                continue
            try:
                parsed = parse_spec(content, max_bytes=MAX_FILE_BYTES)
            except SpecError as exc:
                for path, messages in exc.errors.items():
                    for message in messages:
                        self.stderr.write(f"{name}: {path}: {message}")
                failed += 1
                continue
            document = {"file": name, "source": parsed.source, "spec": parsed.spec}
            self.stdout.write(json.dumps(document, indent=indent, ensure_ascii=False))
        if failed:
            raise CommandError(f"{failed} of {len(files)} file(s) invalid", returncode=1)

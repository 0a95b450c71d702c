"""`manage.py spec validate FILE...`: check job specs and FfDL manifests offline, without a database;
`spec schema` prints the spec's JSON Schema, `spec docs` the reference docs/spec.md (both generated from
jobs/core/spec/schema/)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.core.spec import SpecError, parse_spec
from jobs.core.spec.json_schema import json_schema
from jobs.core.spec.reference import markdown

MAX_FILE_BYTES = 65536
DOCS_PATH = Path(__file__).resolve().parents[3] / "docs" / "spec.md"


class Command(BaseCommand):
    """Validate spec files and print each valid one, normalized, as one JSON line; never prints secrets."""

    help = (
        "Work with job spec files. `spec validate FILE...` prints each normalized spec as JSON; "
        "`spec schema` prints the JSON Schema; `spec docs` prints (or --write writes) docs/spec.md."
    )
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
        schema = subcommands.add_parser("schema", help="Print the spec's JSON Schema (draft 2020-12).")
        schema.add_argument("--indent", type=int, default=2, help="JSON indent (0: one line).")
        docs = subcommands.add_parser("docs", help="Print the spec reference (docs/spec.md) as Markdown.")
        mode = docs.add_mutually_exclusive_group()
        mode.add_argument("--write", action="store_true", help="Write it to docs/spec.md instead.")
        mode.add_argument(
            "--check", action="store_true", help="Exit 1 if docs/spec.md differs from what would be written."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["subcommand"] == "validate":
            self._validate(options["files"], options["indent"])
        elif options["subcommand"] == "schema":
            indent = options["indent"] or None
            self.stdout.write(json.dumps(json_schema(), indent=indent, ensure_ascii=False))
        elif options["subcommand"] == "docs":
            self._docs(write=options["write"], check=options["check"])

    def _docs(self, *, write: bool, check: bool) -> None:
        text = markdown()
        if check:
            current = DOCS_PATH.read_text(encoding="utf-8") if DOCS_PATH.exists() else ""
            if current != text:
                raise CommandError(
                    f"{DOCS_PATH} is out of date; run `python manage.py spec docs --write`", returncode=1
                )
            self.stdout.write(f"{DOCS_PATH} is up to date")
        elif write:
            DOCS_PATH.write_text(text, encoding="utf-8")
            self.stdout.write(f"wrote {DOCS_PATH}")
        else:
            self.stdout.write(text, ending="")

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

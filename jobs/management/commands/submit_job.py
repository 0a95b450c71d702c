"""`manage.py submit_job FILE --tenant SLUG --user NAME`: submit a spec as a user, from the shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.services import JobRejected, job_submit
from tenants.models import Tenant


class Command(BaseCommand):
    help = "Submit a Trainyard spec or FfDL manifest to a tenant as one of its members."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--user", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            document = options["file"].read_bytes()
            tenant = Tenant.objects.get(slug=options["tenant"])
            user = get_user_model().objects.get(username=options["user"])
        except OSError as exc:
            raise CommandError(f"cannot read {options['file']}: {exc.strerror}") from exc
        except Tenant.DoesNotExist as exc:
            raise CommandError(f"no tenant {options['tenant']!r}") from exc
        except get_user_model().DoesNotExist as exc:
            raise CommandError(f"no user {options['user']!r}") from exc
        try:
            job = job_submit(tenant=tenant, user=user, document=document)
        except JobRejected as exc:
            raise CommandError(f"rejected: {exc}") from exc
        self.stdout.write(f"{job.pk} queued ({job.name})")

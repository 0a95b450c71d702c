"""Create the local demo logins and tenant; refuses to run outside local settings."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from portal import demo_s3
from tenants.models import DataStoreSecret, Quota, Role, Tenant
from tenants.policy import policy_of, policy_set
from tenants.secrets import datastore_credentials, datastore_secret_create, datastore_secret_rotate
from tenants.services import membership_set

DEMO_QUOTA = {"gpus": 4, "cpu_millis": 4000, "memory_mib": 8192, "max_running_jobs": 4, "max_queued_jobs": 50}


class Command(BaseCommand):
    help = "Create superuser admin/admin, tenant 'demo' with a quota, and member demo/demo (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        if not getattr(settings, "LOCAL_SETUP", False):
            raise CommandError("seed_demo creates well-known passwords; it runs only under local settings.")
        User = get_user_model()
        with transaction.atomic():
            admin, created = User.objects.get_or_create(
                username="admin",
                defaults={"is_staff": True, "is_superuser": True, "email": "admin@localhost"},
            )
            if created:
                admin.set_password("admin")
                admin.save()
            demo_user, created = User.objects.get_or_create(
                username="demo", defaults={"email": "demo@localhost"}
            )
            if created:
                demo_user.set_password("demo")
                demo_user.save()
            tenant, _ = Tenant.objects.get_or_create(slug="demo", defaults={"name": "Demo team"})
            Quota.objects.get_or_create(tenant=tenant, defaults=DEMO_QUOTA)
            membership_set.nested(tenant=tenant, user=demo_user, role=Role.MEMBER)
            self._demo_s3(tenant, admin)
        self.stdout.write("demo data ready: admin/admin (superuser), demo/demo (member of tenant 'demo')")

    def _demo_s3(self, tenant: Tenant, admin: Any) -> None:
        """The embedded S3 (`manage.py s3_demo`) for the demo tenant: its endpoint allowed, and the data-store
        secret the example specs name (`volumes[].secret: demo-s3`)."""
        hosts = list(policy_of(tenant).datastore_hosts)
        if settings.S3_DEMO_POD_HOST not in hosts:
            policy_set.nested(tenant=tenant, datastore_hosts=[*hosts, settings.S3_DEMO_POD_HOST])
        values = {
            "access_key_id": demo_s3.ACCESS_KEY_ID,
            "secret_access_key": demo_s3.SECRET_ACCESS_KEY,
            "region": demo_s3.REGION,
            "endpoint": demo_s3.endpoint(settings.S3_DEMO_POD_HOST, settings.S3_DEMO_POD_PORT),
        }
        secret = DataStoreSecret.objects.filter(tenant=tenant, name=demo_s3.SECRET_NAME).first()
        if secret is None:
            datastore_secret_create.nested(tenant=tenant, user=admin, name=demo_s3.SECRET_NAME, values=values)
        elif datastore_credentials(tenant=tenant, names=[secret.name])[secret.name] != values:
            # One seeded before the secret carried its endpoint, or another pod address: the demo values are
            # public constants, so they are simply set again.
            datastore_secret_rotate.nested(secret=secret, user=admin, values=values)

from datetime import timedelta

from django.db import migrations, models
from django.utils import timezone

EXISTING_TOKENS_LIFETIME = timedelta(days=90)


def existing_tokens_expire(apps, schema_editor):
    """Tokens made before expiry existed never expired; they get 90 days from the upgrade (the default
    lifetime of a new token), so none stays valid for ever and their users have time to make new ones."""
    ApiToken = apps.get_model("tenants", "ApiToken")
    ApiToken.objects.filter(expires_at=None, revoked_at=None).update(
        expires_at=timezone.now() + EXISTING_TOKENS_LIFETIME
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0008_quota_storage"),
    ]

    operations = [
        # Existing tokens keep doing what they could do before scopes (admin): narrowing them would break
        # every script that manages secrets, members or notifications with its token, with no warning.
        migrations.AddField(
            model_name="apitoken",
            name="scope",
            field=models.CharField(
                choices=[
                    ("read", "read: safe methods only (GET, HEAD, OPTIONS)"),
                    (
                        "submit",
                        "submit: read, and job writes (submit, cancel, halt, resume, retry, labels, delete)",
                    ),
                    (
                        "admin",
                        "admin: everything the user's role allows (tenant settings, secrets, notifications, "
                        "tokens)",
                    ),
                ],
                default="admin",
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="scope",
            field=models.CharField(
                choices=[
                    ("read", "read: safe methods only (GET, HEAD, OPTIONS)"),
                    (
                        "submit",
                        "submit: read, and job writes (submit, cancel, halt, resume, retry, labels, delete)",
                    ),
                    (
                        "admin",
                        "admin: everything the user's role allows (tenant settings, secrets, notifications, "
                        "tokens)",
                    ),
                ],
                default="submit",
                max_length=8,
            ),
        ),
        migrations.RunPython(existing_tokens_expire, migrations.RunPython.noop),
    ]

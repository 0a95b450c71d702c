"""Settings come from the environment; production has no default secret."""

import os
import subprocess
import sys

from tests.conftest import ROOT

CHECK = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DATABASES['default']['NAME'])"
)


def _run(settings_module: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DATABASE_URL", "ALLOWED_HOSTS"}}
    return subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=ROOT,
        env=clean | {"DJANGO_SETTINGS_MODULE": settings_module} | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_production_without_secret_key_fails_loudly() -> None:
    result = _run("portal.settings.production", ALLOWED_HOSTS="example.org")
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_production_with_secret_key_and_hosts_starts() -> None:
    result = _run("portal.settings.production", SECRET_KEY="x" * 50, ALLOWED_HOSTS="example.org")
    assert result.returncode == 0, result.stderr


def test_database_url_comes_from_the_environment() -> None:
    result = _run("portal.settings.local", DATABASE_URL="postgres://u:p@db.example:5432/elsewhere")
    assert result.stdout.strip() == "elsewhere"

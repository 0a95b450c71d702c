"""Settings come from the environment (or mounted files); production has no default secret, passes
`check --deploy`, and sends secure cookies, HSTS and a Content-Security-Policy."""

import json
import os
import secrets
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from portal.secretkeys import local_secrets, weak_secret_key
from tests.conftest import ROOT

CHECK = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DATABASES['default']['NAME'])"
)
SECRETS = {"SECRET_KEY", "CREDENTIALS_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS"}
PRODUCTION = {
    "SECRET_KEY": secrets.token_urlsafe(64),
    "CREDENTIALS_KEY": Fernet.generate_key().decode(),
    "ALLOWED_HOSTS": "example.org",
}


def _run(settings_module: str, *args: str, code: str = CHECK, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.endswith("_FILE")}
    return subprocess.run(
        [sys.executable, *(args or ("-c", code))],
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


def test_production_without_credentials_key_fails_loudly() -> None:
    result = _run(
        "portal.settings.production", SECRET_KEY=PRODUCTION["SECRET_KEY"], ALLOWED_HOSTS="example.org"
    )
    assert result.returncode != 0
    assert "CREDENTIALS_KEY must be set" in result.stderr


def test_production_refuses_a_credentials_key_that_is_no_fernet_key() -> None:
    result = _run("portal.settings.production", **(PRODUCTION | {"CREDENTIALS_KEY": "not-a-key"}))
    assert result.returncode != 0
    assert "CREDENTIALS_KEY must be Fernet keys" in result.stderr


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("local-insecure-key-do-not-use-in-production", "publicly known"),
        ("test-key-not-secret", "publicly known"),
        ("django-insecure-" + secrets.token_urlsafe(64), "publicly known"),
        (secrets.token_urlsafe(30)[:49], "shorter than 50"),
        ("abcd" * 20, "fewer than 5 different"),
    ],
    ids=["local-key", "test-key", "django-insecure", "short", "repetitive"],  # the same on every xdist worker
)
def test_production_refuses_a_short_repetitive_or_known_secret_key(key: str, why: str) -> None:
    result = _run("portal.settings.production", **(PRODUCTION | {"SECRET_KEY": key}))
    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: SECRET_KEY is not fit for production" in result.stderr and why in result.stderr
    )


LOCAL_KEYS = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    "print(json.dumps([s.SECRET_KEY, s.CREDENTIALS_KEY]))"
)


def _local_keys(secrets_file: Path, **env: str) -> list[str]:
    result = _run("portal.settings.local", code=LOCAL_KEYS, LOCAL_SECRETS_FILE=str(secrets_file), **env)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


def test_each_local_setup_makes_its_own_keys_and_keeps_them_across_restarts(tmp_path: Path) -> None:
    first = _local_keys(tmp_path / "one" / "secrets.env")
    assert (tmp_path / "one" / "secrets.env").stat().st_mode & 0o777 == 0o600
    assert _local_keys(tmp_path / "one" / "secrets.env") == first, "a restart keeps the keys"
    other = _local_keys(tmp_path / "two" / "secrets.env")
    assert other[0] != first[0] and other[1] != first[1], "another machine gets other keys"
    for key in (first[0], other[0]):
        assert weak_secret_key(key) is None
    Fernet(first[1].encode())
    own = secrets.token_urlsafe(64)
    assert _local_keys(tmp_path / "one" / "secrets.env", SECRET_KEY=own) == [own, first[1]], "env wins"


def test_local_processes_starting_together_agree_on_one_set_of_keys(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    with ThreadPoolExecutor(8) as pool:
        seen = list(pool.map(lambda _: local_secrets(path), range(8)))
    assert all(s == seen[0] for s in seen) and local_secrets(path) == seen[0]


def test_production_with_its_secrets_and_hosts_starts() -> None:
    result = _run("portal.settings.production", **PRODUCTION)
    assert result.returncode == 0, result.stderr


def test_database_url_comes_from_the_environment(tmp_path: Path) -> None:
    result = _run(
        "portal.settings.local",
        DATABASE_URL="postgres://u:p@db.example:5432/elsewhere",
        LOCAL_SECRETS_FILE=str(tmp_path / "secrets.env"),
    )
    assert result.stdout.strip() == "elsewhere"


def test_secrets_may_come_from_mounted_files(tmp_path: Path) -> None:
    """`NAME_FILE=/path` (a Secret mounted as a volume) reads NAME from the file, trailing newline dropped."""
    key = Fernet.generate_key().decode()
    files = {
        "SECRET_KEY": "s" * 45 + "abcde",
        "CREDENTIALS_KEY": key,
        "DATABASE_URL": "postgres://u:p@db.example:5432/fromfile",
        "REDIS_URL": "redis://cache.example:6379/3",
    }
    env = {"ALLOWED_HOSTS": "example.org"}
    for name, value in files.items():
        (tmp_path / name).write_text(value + "\n")
        env[f"{name}_FILE"] = str(tmp_path / name)
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; print(json.dumps(["
        "s.SECRET_KEY, s.CREDENTIALS_KEY, s.DATABASES['default']['NAME'], s.REDIS_URL, s.CELERY_BROKER_URL]))"
    )
    result = _run("portal.settings.production", code=code, **env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        "s" * 45 + "abcde",
        key,
        "fromfile",
        files["REDIS_URL"],
        files["REDIS_URL"],
    ]


def test_a_secret_set_twice_differently_or_a_missing_file_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("from-the-file-" + "k" * 40)
    both = _run("portal.settings.production", **(PRODUCTION | {"SECRET_KEY_FILE": str(tmp_path / "key")}))
    assert both.returncode != 0 and "set SECRET_KEY or SECRET_KEY_FILE, not both" in both.stderr
    missing = _run(
        "portal.settings.production", **(PRODUCTION | {"DATABASE_URL_FILE": str(tmp_path / "nope")})
    )
    assert missing.returncode != 0 and "DATABASE_URL_FILE: cannot read" in missing.stderr


def test_check_deploy_passes_under_the_production_settings() -> None:
    result = _run(
        "portal.settings.production",
        "manage.py",
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        **PRODUCTION,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_fails_when_hsts_is_turned_off() -> None:
    """The check above has teeth: a production setting turned insecure is reported."""
    env = PRODUCTION | {"SECURE_HSTS_SECONDS": "0"}
    result = _run(
        "portal.settings.production", "manage.py", "check", "--deploy", "--fail-level", "WARNING", **env
    )
    assert result.returncode != 0 and "security.W004" in result.stderr + result.stdout


RESPONSES = """
import django, json
django.setup()
from django.conf import settings
from django.core.management import call_command
call_command("collectstatic", interactive=False, verbosity=0)  # the pages need WhiteNoise's manifest
from django.test import Client
client = Client(HTTP_X_FORWARDED_PROTO="https")
out = {"hosts": settings.ALLOWED_HOSTS, "labels": settings.TENANT_NAMESPACE_LABELS,
       "cookies": [settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE], "log": settings.LOG_FORMAT}
for path in ("/healthz", "/login/", "/api/docs/"):
    r = client.get(path, HTTP_HOST="trainyard.example.org")
    out[path] = {"status": r.status_code, "csp": r.get("Content-Security-Policy"),
                 "hsts": r.get("Strict-Transport-Security"),
                 "csrf_cookie_secure": bool(r.cookies["csrftoken"]["secure"]) if "csrftoken" in r.cookies else None}
out["plain"] = Client().get("/healthz", HTTP_HOST="trainyard.example.org").status_code
out["other_host"] = Client(HTTP_X_FORWARDED_PROTO="https").get("/healthz", HTTP_HOST="evil.example").status_code
print(json.dumps(out))
"""


def test_production_sends_csp_hsts_and_secure_cookies_and_takes_hosts_from_the_environment(
    tmp_path: Path,
) -> None:
    env = PRODUCTION | {
        "STATIC_ROOT": str(tmp_path / "static"),
        "ALLOWED_HOSTS": "trainyard.example.org,localhost",
        "TENANT_NAMESPACE_LABELS": "example.com/cost-center=ml,team=research",
    }
    result = _run("portal.settings.production", code=RESPONSES, **env)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["hosts"] == ["trainyard.example.org", "localhost"]
    assert out["labels"] == {"example.com/cost-center": "ml", "team": "research"}
    assert out["cookies"] == [True, True] and out["log"] == "json"
    assert out["plain"] == 301, "plain HTTP is redirected to HTTPS"
    assert out["other_host"] == 400, "a host outside ALLOWED_HOSTS is refused"
    for path in ("/healthz", "/login/"):
        assert out[path]["status"] == 200, (path, out[path])
        csp = out[path]["csp"]
        assert "default-src 'self'" in csp and "script-src 'self';" in csp and "frame-ancestors 'none'" in csp
        assert "max-age=31536000" in out[path]["hsts"] and "includeSubDomains" in out[path]["hsts"]
    assert out["/login/"]["csrf_cookie_secure"] is True
    assert out["/api/docs/"]["status"] == 200
    assert "script-src 'self' 'unsafe-inline'" in out["/api/docs/"]["csp"], "Swagger UI's inline script runs"


def test_broker_redelivers_a_dead_workers_task_soon_but_never_one_that_still_runs() -> None:
    from portal.celery import app

    app.loader.import_default_modules()
    visibility = app.conf.broker_transport_options["visibility_timeout"]
    limits = {
        name: task.time_limit or app.conf.task_time_limit
        for name, task in app.tasks.items()
        if not name.startswith("celery.")
    }
    assert "jobs.tasks.launch" in limits
    assert all(limit < visibility for limit in limits.values()), (visibility, limits)
    assert visibility <= 300, "a task lost with its worker runs again within minutes, not Celery's hour"


@pytest.mark.parametrize(
    ("value", "expected"), [("", "None"), ("namespace", "None"), ("1000650000", "1000650000"), (None, "1000")]
)
def test_pod_run_as_user_is_a_uid_or_left_to_the_namespace(
    tmp_path: Path, value: str | None, expected: str
) -> None:
    env = {"LOCAL_SECRETS_FILE": str(tmp_path / "secrets.env")}
    if value is not None:
        env["POD_RUN_AS_USER"] = value
    code = "import django; django.setup(); from django.conf import settings; print(settings.POD_RUN_AS_USER)"
    result = _run("portal.settings.local", code=code, **env)
    assert result.stdout.strip() == expected, result.stderr


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("POD_RUN_AS_USER", "0", "POD_RUN_AS_USER must be a uid above 0"),
        ("POD_RUN_AS_USER", "root", "POD_RUN_AS_USER must be a uid above 0"),
        (
            "NODE_LOCAL_DNS_CIDRS",
            "169.254.20.10/33",
            "NODE_LOCAL_DNS_CIDRS: '169.254.20.10/33' is not a CIDR",
        ),
    ],
)
def test_a_bad_pod_uid_or_dns_cache_address_fails_loudly(
    tmp_path: Path, name: str, value: str, message: str
) -> None:
    result = _run("portal.settings.local", LOCAL_SECRETS_FILE=str(tmp_path / "secrets.env"), **{name: value})
    assert result.returncode != 0 and message in result.stderr


def test_node_local_dns_cidrs_default_to_the_node_local_cache_and_may_be_emptied(tmp_path: Path) -> None:
    code = "import django; django.setup(); from django.conf import settings; print(settings.NODE_LOCAL_DNS_CIDRS)"
    secrets_file = str(tmp_path / "secrets.env")
    assert _run("portal.settings.local", code=code, LOCAL_SECRETS_FILE=secrets_file).stdout.strip() == (
        "['169.254.20.10/32']"
    )
    emptied = _run(
        "portal.settings.local", code=code, LOCAL_SECRETS_FILE=secrets_file, NODE_LOCAL_DNS_CIDRS=""
    )
    assert emptied.stdout.strip() == "[]"


def test_refused_pod_overrides_stop_the_process_with_the_field_named() -> None:
    overrides = json.dumps(
        {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "In"}],
            "patch": {"spec": {"hostNetwork": True}},
        }
    )
    result = _run("portal.settings.local", POD_OVERRIDES=overrides)
    assert result.returncode != 0
    assert (
        "ImproperlyConfigured: POD_OVERRIDES: tolerations[0].operator: must be Exists or Equal"
        in result.stderr
    )
    assert "patch.spec.hostNetwork: cannot be overridden" in result.stderr
    good = '{"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}'
    assert _run("portal.settings.local", POD_OVERRIDES=good).returncode == 0


WORKER_CHECK = (
    "import django; django.setup(); from django.conf import settings as s; import json, os; "
    "print(json.dumps([s.REDIS_URL, s.CELERY_BROKER_URL, s.CHANNEL_LAYERS['default']['CONFIG']['hosts'][0]"
    "['address'], s.ARTIFACT_STORAGE['OPTIONS']['location'], s.TENSORBOARD_ROOT, os.environ['REDIS_URL']]))"
)


def _as_worker(**env: str) -> subprocess.CompletedProcess[str]:
    """The test settings loaded as pytest-xdist sets up a worker's process (or a process a worker started)."""
    xdist = ("PYTEST_XDIST_WORKER", "TRAINYARD_TEST_WORKER", "ARTIFACT_ROOT", "TENSORBOARD_ROOT")
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS and k not in xdist}
    return subprocess.run(
        [sys.executable, "-c", WORKER_CHECK],
        cwd=ROOT,
        env=clean | {"DJANGO_SETTINGS_MODULE": "portal.settings.test", "TEST_DATABASE_NAME": "test_w"} | env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_each_xdist_worker_gets_its_own_redis_db_and_folders_and_its_children_the_same() -> None:
    worker = _as_worker(PYTEST_XDIST_WORKER="gw2", REDIS_URL="redis://127.0.0.1:6379/4")
    assert worker.returncode == 0, worker.stderr
    redis_url, broker, layer, artifacts, boards, environ = json.loads(worker.stdout)
    assert redis_url == broker == layer == environ == "redis://127.0.0.1:6379/2"
    assert artifacts.endswith("trainyard-artifacts-test_w_gw2") and boards.endswith(
        "trainyard-tensorboard-test_w_gw2"
    )
    # A process the worker starts (the web process, an engine) inherits its environment: nothing moves twice.
    child = _as_worker(PYTEST_XDIST_WORKER="gw2", TRAINYARD_TEST_WORKER="gw2", REDIS_URL=redis_url)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == [redis_url, broker, layer, artifacts, boards, environ]
    serial = _as_worker(REDIS_URL="redis://127.0.0.1:6379/4")
    assert json.loads(serial.stdout)[0] == "redis://127.0.0.1:6379/4"
    assert json.loads(serial.stdout)[3].endswith("trainyard-artifacts-test_w")
    too_many = _as_worker(PYTEST_XDIST_WORKER="gw5", REDIS_URL="redis://127.0.0.1:6379/4")
    assert (
        too_many.returncode != 0
        and "too few Redis dbs below it for pytest-xdist worker gw5" in too_many.stderr
    )

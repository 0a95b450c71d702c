"""Settings for `make test`: real PostgreSQL and Redis, fast hashing, its own Redis db."""

import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .base import *  # noqa: F403
from .base import ARTIFACT_STORAGE, channel_layer_host, env

SECRET_KEY = env("SECRET_KEY", default="test-key-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver", "host.kubesim.internal"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/15")


def worker_redis_url(url: str, worker: str) -> str:
    """The Redis db of pytest-xdist's worker `worker` ("gw0", "gw1", ...): counting down from `url`'s db (gw0
    keeps it, gw1 the one below, ...), so a run on db 15 with four workers uses 15 to 12."""
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0) - int(worker.removeprefix("gw"))
    if db < 0:
        raise ValueError(f"{url}: too few Redis dbs below it for pytest-xdist worker {worker}")
    return urlunsplit(parts._replace(path=f"/{db}"))


# `make test` runs the suite on several pytest-xdist workers (docs/testing.md): pytest-django gives each its
# own database (the test database's name + "_gw0", ...); here each gets its own Redis db and, below, its own
# artifact and TensorBoard folders. The processes a test starts (the web process, an engine) inherit the
# worker's REDIS_URL and TEST_WORKER from the environment, so they derive nothing twice.
TEST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if TEST_WORKER and os.environ.get("TRAINYARD_TEST_WORKER") != TEST_WORKER:
    REDIS_URL = os.environ["REDIS_URL"] = worker_redis_url(REDIS_URL, TEST_WORKER)
    os.environ["TRAINYARD_TEST_WORKER"] = TEST_WORKER
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [channel_layer_host(REDIS_URL)],
            "prefix": "ty-test",
            "capacity": 1000,
            "expiry": 30,
        },
    },
}
CELERY_BROKER_URL = REDIS_URL
LOGGING = {"version": 1, "disable_existing_loggers": False}
# Checkpoint claims as base sets them (ReadWriteOnce, one per learner, in the default class: kubesim's
# `standard`, like local-path). CHECKPOINT_ACCESS_MODE=ReadWriteMany needs
# CHECKPOINT_STORAGE_CLASS=kubesim-shared, the class that offers it.
# Two test runs on one machine (say, a developer and a helper) keep apart with their own database name
# and Redis db: TEST_DATABASE_NAME=test_trainyard_b REDIS_URL=redis://127.0.0.1:6379/13 make pytest
DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME", default="test_trainyard")}  # noqa: F405
# The database this process's tests run on: pytest-django adds the worker's suffix under pytest-xdist.
_run = DATABASES["default"]["TEST"]["NAME"] + (f"_{TEST_WORKER}" if TEST_WORKER else "")  # noqa: F405
# Generous API rates, so one process running the whole suite (one client address for every anonymous
# request, one in-memory throttle cache) never trips them; the throttling tests set tiny rates of their own.
REST_FRAMEWORK = REST_FRAMEWORK | {  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("API_THROTTLE_ANON", default="10000/hour"),
        "user": env("API_THROTTLE_USER", default="100000/hour"),
    },
}
# Artifacts of a test run live outside the repository, one folder per test database (so two runs on one
# machine keep apart); a browser test's server process computes the same folder.
if ARTIFACT_STORAGE["BACKEND"].endswith("FileSystemStorage"):
    _artifacts = Path(tempfile.gettempdir()) / f"trainyard-artifacts-{_run}"
    ARTIFACT_STORAGE["OPTIONS"]["location"] = env("ARTIFACT_ROOT", default=str(_artifacts))
# TensorBoard's local folders of a test run, apart per test database like the artifacts.
_boards = Path(tempfile.gettempdir()) / f"trainyard-tensorboard-{_run}"
TENSORBOARD_ROOT = env("TENSORBOARD_ROOT", default=str(_boards))
# Learners leave a NotReady node after 2 s (the kubesim fixtures notice a silent node within 1 s).
NODE_LOST_GRACE_SECONDS = env.int("NODE_LOST_GRACE_SECONDS", default=2)
# Learners get 10 s from SIGTERM to exit: long enough for the tests' slow-to-stop learners, short enough that
# a pod stranded on a dead node is force-deleted soon.
LEARNER_TERMINATION_GRACE_SECONDS = env.int("LEARNER_TERMINATION_GRACE_SECONDS", default=10)
# Notifications: webhooks to the tests' local receivers (127.0.0.1), e-mail kept in memory (mail.outbox).
NOTIFY_ALLOW_PRIVATE_TARGETS = True
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
NOTIFY_BASE_URL = env("NOTIFY_BASE_URL", default="http://testserver")
# Tests call reconcile right after changing the cluster and expect it to see the change: every round lists
# pods, Services, Secrets and claims. tests/jobs/test_reconcile_watch_cache.py turns the copies on and proves
# that path.
RECONCILE_FROM_WATCH_CACHE = env.bool("RECONCILE_FROM_WATCH_CACHE", default=False)
# The live sockets' read threads close their connection after every read: a test database is dropped at the
# end of the run, which a kept connection would prevent (tests/jobs/test_consumer_connect.py keeps them).
LIVE_DB_CONN_MAX_AGE = env.float("LIVE_DB_CONN_MAX_AGE", default=0.0)

"""Settings shared by every environment; every value comes from the environment."""

import ipaddress
from datetime import timedelta
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured
from environ.fileaware_mapping import FileAwareMapping

from common.podoverrides import OverridesError, overrides_clean
from common.ssoconfig import SsoConfigError, group_map_parse, providers_parse
from jobs.core.gputypes import DEFAULT_ALIASES as DEFAULT_GPU_TYPE_ALIASES
from jobs.core.gputypes import merge_aliases, parse_aliases

BASE_DIR = Path(__file__).resolve().parent.parent.parent

# Secrets from mounted files: `SECRET_KEY_FILE=/run/secrets/trainyard/SECRET_KEY` sets SECRET_KEY from
# that file's content (a Secret mounted as a volume, Docker/compose secrets), through django-environ's
# FileAwareEnv. Only these names may come from a file.
FILE_SECRETS = (
    "SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "CELERY_RESULT_BACKEND",
    "CREDENTIALS_KEY",
    "EMAIL_URL",
    "OIDC_PROVIDERS",
)


class SecretFiles(FileAwareMapping):
    """FileAwareEnv's `X_FILE` lookup made strict: only for FILE_SECRETS, the file's trailing newline
    dropped (editors and `kubectl create secret --from-file` add one), an unreadable file named, and X set
    as well as X_FILE refused unless both say the same (which of two values wins is not guessed)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        super().__init__()
        self.names = frozenset(names)

    def __getitem__(self, key: str) -> str:
        path = self.env.get(f"{key}_FILE", "")
        if key not in self.names or not path:
            return str(self.env[key])
        try:
            value = str(super().__getitem__(key)).strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{key}_FILE: cannot read {path}: {exc}") from exc
        if self.env.get(key, value) != value:
            raise ImproperlyConfigured(f"set {key} or {key}_FILE, not both")
        return value


class SecretFileEnv(environ.FileAwareEnv):
    ENVIRON = SecretFiles(FILE_SECRETS)


env = SecretFileEnv()
if (BASE_DIR / ".env").exists():
    SecretFileEnv.read_env(BASE_DIR / ".env")

SECRET_KEY = env("SECRET_KEY", default="")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS: list[str] = env.list("ALLOWED_HOSTS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served from here (no CDN)
    "django_filters",
    "guardian",
    "channels",
    "axes",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "portal",
    "tenants",
    "jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.middleware.RequestIdMiddleware",
    "portal.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
    "portal.middleware.DatabaseOutageMiddleware",
]

ROOT_URLCONF = "portal.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"

DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres:///trainyard"),
}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=0)

REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/0")

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out login before the password is checked
    "portal.sso.LocalPasswordSwitch",  # refuses every password when LOCAL_LOGIN_ENABLED is off
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row, nobody anonymous gets anything

# How often an open live socket (/ws/) checks that its token or session still holds (it also checks before
# every subscription); once revoked, logged out or deactivated, the socket closes with 4401.
LIVE_AUTH_RECHECK_SECONDS = env.float("LIVE_AUTH_RECHECK_SECONDS", default=30.0)
# The live sockets' database reads (session and user at the handshake, job, backlog, credentials checks) run
# in LIVE_DB_THREADS threads per web process, which keep their connections (unlike CONN_MAX_AGE 0 for the
# rest of web) for LIVE_DB_CONN_MAX_AGE seconds; 0 closes after every read. See common/livereads.py.
LIVE_DB_THREADS = env.int("LIVE_DB_THREADS", default=4)
LIVE_DB_CONN_MAX_AGE = env.float("LIVE_DB_CONN_MAX_AGE", default=60.0)

# API tokens (tenants/tokens.py): a new token expires API_TOKEN_DEFAULT_DAYS after its creation unless its
# owner picks another expiry, at most API_TOKEN_MAX_DAYS ahead (0: no default expiry / no maximum).
API_TOKEN_DEFAULT_DAYS = env.int("API_TOKEN_DEFAULT_DAYS", default=90)
API_TOKEN_MAX_DAYS = env.int("API_TOKEN_MAX_DAYS", default=365)
# Invitations to a tenant (tenants/invitations.py): a link e-mailed to an address, valid this many days.
INVITATION_MAX_AGE_DAYS = env.int("INVITATION_MAX_AGE_DAYS", default=7)

# /metrics: with a token, only `Authorization: Bearer <METRICS_TOKEN>` may scrape, and sees per-tenant queue
# series; without one anyone who reaches it may, and no tenant name appears (totals only).
METRICS_TOKEN = env("METRICS_TOKEN", default="")

# Login throttling (django-axes) on /login/ and /admin/login/: after LOGIN_FAILURE_LIMIT wrong passwords for
# one username from one address, that pair is refused for LOGIN_LOCKOUT_MINUTES (a 429 page saying so);
# after LOGIN_ADDRESS_FAILURE_LIMIT wrong passwords from one address across any usernames (password
# spraying), the whole address is. A successful login clears its own username's count at that address only
# (portal.login_throttle). Attempts are kept in the database.
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=10)
LOGIN_ADDRESS_FAILURE_LIMIT = env.int("LOGIN_ADDRESS_FAILURE_LIMIT", default=50)
AXES_COOLOFF_TIME = timedelta(minutes=env.float("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_HANDLER = "portal.login_throttle.AddressAwareAxesHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "portal/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "portal.middleware.client_ip"
AXES_VERBOSE = False
# How many reverse proxies (an ingress, a load balancer) sit in front of the web server: the client's
# address is then read from X-Forwarded-For that many hops from the right (0: the socket's address).
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env.path("STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

# Single sign-on with OpenID Connect (docs/sso.md), through django-allauth's openid_connect provider: code
# flow with PKCE, ID tokens checked against the provider's keys (JWKS). OIDC_PROVIDERS is a JSON list of
# {"id", "name", "issuer", "client_id", "secret"} (the provider's redirect URI for each is
# <portal>/accounts/oidc/<id>/login/callback/); users are created at their first sign-in. OIDC_GROUP_MAP
# ({"group": "tenant:role"}) gives memberships from the ID token's `groups` claim at every sign-in.
# LOCAL_LOGIN_ENABLED=false turns passwords off: the login page offers only the providers and every password
# login (the portal's and the admin console's) is refused.
try:
    OIDC_APPS = providers_parse(env("OIDC_PROVIDERS", default=""))
    OIDC_GROUP_MAP = group_map_parse(env("OIDC_GROUP_MAP", default=""))
except SsoConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None
LOCAL_LOGIN_ENABLED = env.bool("LOCAL_LOGIN_ENABLED", default=True)
if not LOCAL_LOGIN_ENABLED and not OIDC_APPS:
    raise ImproperlyConfigured(
        "LOCAL_LOGIN_ENABLED=false needs a provider in OIDC_PROVIDERS: nobody could log in"
    )
# Logging out of the portal after a single sign-on also signs out at the provider (its end_session_endpoint,
# RP-initiated logout), which sends the browser back to the login page; false: the portal's session only.
OIDC_LOGOUT_AT_PROVIDER = env.bool("OIDC_LOGOUT_AT_PROVIDER", default=True)
SOCIALACCOUNT_PROVIDERS = {"openid_connect": {"OAUTH_PKCE_ENABLED": True, "APPS": OIDC_APPS}}
SOCIALACCOUNT_ADAPTER = "portal.sso.SsoAccountAdapter"
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_VERIFICATION = "none"
SOCIALACCOUNT_STORE_TOKENS = False
ACCOUNT_EMAIL_VERIFICATION = "none"
ACCOUNT_UNIQUE_EMAIL = False
# The command line's sign-in by device code (`trainyard login --sso`, tenants/device.py): how long a code
# waits for its approval, the least interval between the command line's polls, and how many codes may wait
# for approval from one client address at once.
DEVICE_CODE_MINUTES = env.int("DEVICE_CODE_MINUTES", default=10)
DEVICE_POLL_SECONDS = env.int("DEVICE_POLL_SECONDS", default=5)
DEVICE_CODES_PER_ADDRESS = env.int("DEVICE_CODES_PER_ADDRESS", default=10)


def channel_layer_host(url: str) -> dict[str, object]:
    """The channel layer's Redis host: its socket timeout above channels_redis' 5 s blocking read, since
    redis-py's own 5 s default makes every idle receive fail ("Timeout reading from ...", the consumer's
    socket then closes with 4503); still short, so a read on a dead connection ends soon."""
    return {"address": url, "socket_timeout": 10, "socket_connect_timeout": 5}


CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # A viewer's channel holds at most 1,000 messages for 30 s; past that the consumer sees a gap in
        # the sequence numbers and tells the browser to backfill from the database (docs/streaming.md).
        "CONFIG": {"hosts": [channel_layer_host(REDIS_URL)], "capacity": 1000, "expiry": 30},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.tokens.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "common.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "EXCEPTION_HANDLER": "common.api.exception_handler",
    "NUM_PROXIES": TRUSTED_PROXY_COUNT or None,
    # Per user (by client address for anonymous requests), plus a stricter rate for anonymous ones; a
    # throttled request is a 429 with Retry-After and the usual error body.
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("API_THROTTLE_ANON", default="600/hour"),
        "user": env("API_THROTTLE_USER", default="6000/hour"),
    },
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "tenants.tokens.TokenScopePermission",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The OpenAPI schema (/api/schema/) and its Swagger UI (/api/docs/), with self-hosted UI files.
SPECTACULAR_SETTINGS = {
    "TITLE": "Trainyard API",
    "DESCRIPTION": (
        "Submit and follow deep-learning training jobs in your tenants. Authenticate with "
        "`Authorization: Bearer <token>` (see `manage.py token create`) or a browser session. Every error "
        'is `{"detail": "...", "errors": {field: [messages]}}`. The job spec\'s fields are described in the '
        "portal at [/spec/](/spec/) and in `docs/spec.md`; its JSON Schema is at `/api/v1/spec/schema/`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two choice sets share the field name `scope`: a subscription's (user/tenant, named as before) and a token's.
    # Two share `role` (names kept from before): a member's, and yours in a tenant (admin: a platform admin).
    "ENUM_NAME_OVERRIDES": {
        "ScopeEnum": ["user", "tenant"],
        "TokenScopeEnum": "tenants.models.TokenScope",
        "MemberRoleEnum": ["owner", "member", "viewer"],
        "CredentialEventActionEnum": ["created", "rotated", "deleted"],
        "TenantDataRoleEnum": ["owner", "member", "viewer", "admin"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "common.api.nullable_objects",
        "common.api.body_too_large",
        "common.api.scope_refusals",
        "common.api.database_outage",
    ],
}

# Celery: JSON only, late acks so a killed worker's task runs again, hard limits on every task.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
# No result backend: nothing reads a task's result, and with one every send subscribed to the result's
# channel first, retried 20 x 1 s while Redis was down (a submit waited 20 s). Tasks are sent through the
# outbox (jobs/outbox.py) with one publish attempt; a broker that does not answer within
# CELERY_BROKER_CONNECTION_TIMEOUT leaves the task there for the drain.
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default=None)
CELERY_BROKER_CONNECTION_TIMEOUT = env.float("CELERY_BROKER_CONNECTION_TIMEOUT", default=1.0)
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=120)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=150)
# Redis redelivers a task a worker took but never acknowledged (the worker died: acks_late) after this many
# seconds. Just above the longest task time limit, so a dead worker's task runs again within minutes
# (Celery's default is an hour) and a live one is never delivered twice while it runs.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=CELERY_TASK_TIME_LIMIT + 30),
    "socket_connect_timeout": CELERY_BROKER_CONNECTION_TIMEOUT,
    # A connection that fails is tried once more at once, not again and again until the connection
    # timeout: a send to a Redis that is down fails in milliseconds (the outbox keeps the task).
    "max_retries": 1,
    "interval_start": 0,
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)

# The cluster: a kubeconfig file (kubesim writes one), or in-cluster credentials when unset.
KUBECONFIG = env("KUBECONFIG", default="")
KUBE_CONTEXT = env("KUBE_CONTEXT", default="")
# Tenant namespaces are `<prefix>-<tenant slug>` (clusterio.names adds the dash): `ty` gives `ty-vision`.
TENANT_NAMESPACE_PREFIX = env("TENANT_NAMESPACE_PREFIX", default="ty")
# Extra labels on every tenant namespace, e.g. `example.com/cost-center=ml,team=research` (the platform's own
# tenant and managed-by labels win over these).
TENANT_NAMESPACE_LABELS: dict[str, str] = env.dict("TENANT_NAMESPACE_LABELS", default={})

# GPU types (docs/operations.md): a spec's `resources.gpu_type` matches a node whose product label
# (`nvidia.com/gpu.product`, else `cloud.google.com/gke-accelerator`) has the same canonical type. JSON,
# type name -> aliases (exact names or shell patterns, case-insensitive), merged over the defaults in
# jobs/core/gputypes.py: `{"A100-80GB": ["NVIDIA-A100-*80GB*", "nvidia-a100-80gb"]}`.
try:
    GPU_TYPE_ALIASES = merge_aliases(
        DEFAULT_GPU_TYPE_ALIASES, parse_aliases(env.json("GPU_TYPE_ALIASES", default={}))
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"GPU_TYPE_ALIASES: {exc}") from exc

# Fernet key(s) that seal data-store credentials at rest (common/sealing.py); comma-separated to rotate,
# the first seals. Empty: derived from SECRET_KEY.
CREDENTIALS_KEY = env("CREDENTIALS_KEY", default="")

# Artifacts (docs/artifacts.md): code ZIPs in, result files out. A local folder by default; ARTIFACT_STORAGE=s3
# for any S3-compatible store (django-storages), with credentials from env or the instance's role.
ARTIFACT_STORAGE_KIND = env("ARTIFACT_STORAGE", default="file")
if ARTIFACT_STORAGE_KIND == "s3":
    ARTIFACT_STORAGE: dict[str, Any] = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": env("ARTIFACT_S3_BUCKET", default="trainyard-artifacts"),
            "endpoint_url": env("ARTIFACT_S3_ENDPOINT", default=None),
            "region_name": env("ARTIFACT_S3_REGION", default=None),
            "access_key": env("ARTIFACT_S3_ACCESS_KEY", default=None),
            "secret_key": env("ARTIFACT_S3_SECRET_KEY", default=None),
            "file_overwrite": True,
        },
    }
else:
    ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": env("ARTIFACT_ROOT", default=str(BASE_DIR / "var" / "artifacts"))},
    }
# How pods reach this platform (their view of its URL); empty: no code fetch, no result upload.
ARTIFACTS_BASE_URL = env("ARTIFACTS_BASE_URL", default="")

# The embedded S3 of `make up` (`manage.py s3_demo`, moto): where it listens (S3_DEMO_HOST:S3_DEMO_PORT), and
# where pods reach it (S3_DEMO_POD_HOST:S3_DEMO_POD_PORT: kubesim forwards host.kubesim.internal:9000 to this
# machine's 127.0.0.1:S3_DEMO_PORT, Procfile's --expose-host-port 9000:PORT), so pods of each local
# installation see their own S3 at the same address whatever port it listens on. seed_demo allows that host
# for the demo tenant and gives it the data-store secret `demo-s3`, which carries the endpoint: the example
# specs name the secret, not a host and port.
S3_DEMO_HOST = env("S3_DEMO_HOST", default="127.0.0.1")
S3_DEMO_PORT = env.int("S3_DEMO_PORT", default=9000)
S3_DEMO_POD_HOST = env("S3_DEMO_POD_HOST", default="host.kubesim.internal")
S3_DEMO_POD_PORT = env.int("S3_DEMO_POD_PORT", default=9000)
ARTIFACT_FETCH_IMAGE = env("ARTIFACT_FETCH_IMAGE", default="ghcr.io/trainyard/trainyard:0.1.0")
ARTIFACT_CODE_TOKEN_SECONDS = env.int("ARTIFACT_CODE_TOKEN_SECONDS", default=3600)
CODE_MAX_BYTES = env.int("CODE_MAX_BYTES", default=64 * 1024 * 1024)
CODE_MAX_UNPACKED_BYTES = env.int("CODE_MAX_UNPACKED_BYTES", default=1024 * 1024 * 1024)
CODE_MAX_ENTRIES = env.int("CODE_MAX_ENTRIES", default=20_000)
RESULT_MAX_FILE_BYTES = env.int("RESULT_MAX_FILE_BYTES", default=4 * 1024 * 1024 * 1024)
# The most bytes of any other request body; the web process refuses a larger one before reading it
# (portal.bodylimits, portal.web).
REQUEST_BODY_MAX_BYTES = env.int("REQUEST_BODY_MAX_BYTES", default=16 * 1024 * 1024)
# Caps on what one attempt of a job writes into shared state (docs/operations.md "Caps on what a job writes");
# a tenant's policy may override each (tenants.policy.write_caps).
RESULT_MAX_FILES = env.int("RESULT_MAX_FILES", default=1000)
RESULT_MAX_BYTES = env.int("RESULT_MAX_BYTES", default=16 * 1024 * 1024 * 1024)
POD_REPORTS_MAX = env.int("POD_REPORTS_MAX", default=128)

# TensorBoard (docs/jobs.md, docs/operations.md): event files learners send, their scalars as metrics, and
# one `tensorboard` process per viewed job behind the portal.
TENSORBOARD_SYNC_SECONDS = env.float("TENSORBOARD_SYNC_SECONDS", default=5.0)
TENSORBOARD_UPLOAD_MAX_BYTES = env.int("TENSORBOARD_UPLOAD_MAX_BYTES", default=8 * 1024 * 1024)
TENSORBOARD_FILE_MAX_BYTES = env.int("TENSORBOARD_FILE_MAX_BYTES", default=256 * 1024 * 1024)
TENSORBOARD_MAX_FILES = env.int("TENSORBOARD_MAX_FILES", default=100)
TENSORBOARD_MAX_BYTES = env.int("TENSORBOARD_MAX_BYTES", default=1024 * 1024 * 1024)
TENSORBOARD_PIECE_MAX_ROWS = env.int("TENSORBOARD_PIECE_MAX_ROWS", default=20_000)
TENSORBOARD_MAX_ROWS = env.int("TENSORBOARD_MAX_ROWS", default=500_000)
# Seconds one parse of a piece may take on the worker before the rest of its file is given up.
TENSORBOARD_PARSE_SECONDS = env.int("TENSORBOARD_PARSE_SECONDS", default=120)
# Parsing runs on a queue of its own, so a tenant's flood of pieces never queues ahead of the engine's tasks
# (launch, schedule, teardown): `make up` runs a worker for it (Procfile `tensorboard`); deployments run one
# with `-Q tensorboard`, or have their workers consume both (`-Q celery,tensorboard`).
TENSORBOARD_QUEUE = env("TENSORBOARD_QUEUE", default="tensorboard")
CELERY_TASK_ROUTES = {"jobs.tensorboard.*": {"queue": TENSORBOARD_QUEUE}}
TENSORBOARD_ROOT = env("TENSORBOARD_ROOT", default=str(BASE_DIR / "var" / "tensorboard"))
TENSORBOARD_MAX_PROCESSES = env.int("TENSORBOARD_MAX_PROCESSES", default=4)
TENSORBOARD_IDLE_SECONDS = env.float("TENSORBOARD_IDLE_SECONDS", default=900.0)
TENSORBOARD_START_SECONDS = env.float("TENSORBOARD_START_SECONDS", default=90.0)

# Hard limits on what a job spec may carry; see jobs/core/spec/.
SPEC_MAX_BYTES = env.int("SPEC_MAX_BYTES", default=64 * 1024)

# Logs go to stderr, `plain` for people or `json` (one object per line, production's default) for a log
# pipeline; both carry the request id, job id and Celery task id of their context (portal/logging.py).
LOG_FORMAT = env("LOG_FORMAT", default="plain")
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "portal.logging.ContextFilter"}},
    "formatters": {
        "plain": {"()": "portal.logging.PlainFormatter"},
        "json": {"()": "portal.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["context"]}
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
}
# Celery keeps Django's logging (and so the format above) instead of installing its own handlers.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Modules every worker and beat import at start: the heartbeat and log-context signal handlers.
CELERY_IMPORTS = ["portal.health", "portal.logging"]
# Where worker and beat keep the heartbeat files their exec probes read (portal/health.py); empty: none.
HEARTBEAT_DIR = env("HEARTBEAT_DIR", default="")

# Content-Security-Policy of every response, in the shape of Django 6's SECURE_CSP (portal/middleware.py);
# empty: no header. Production sets one.
SECURE_CSP: dict[str, list[str] | bool] = {}

# Where checkpoints live when the cluster has no shared storage class (kubesim, single node): a node
# folder per job that outlives its pods, so a requeued attempt resumes. Empty: per-pod scratch only.
CHECKPOINT_HOST_ROOT = env("CHECKPOINT_HOST_ROOT", default="")
# Otherwise CHECKPOINT_DIR is a PersistentVolumeClaim of this size, kept across a job's attempts and deleted
# with the job (empty: no claim, checkpoints live and die with the pod).
CHECKPOINT_CLAIM_SIZE = env("CHECKPOINT_CLAIM_SIZE", default="10Gi")
# The claims' class. Empty: the cluster's default class.
CHECKPOINT_STORAGE_CLASS = env("CHECKPOINT_STORAGE_CLASS", default="")
# ReadWriteOnce (every class offers it): one claim per learner, which learner i mounts on every attempt.
# ReadWriteMany: one claim the learners share; only for a class that offers it (NFS, CephFS, EFS...), since
# a claim asking a mode its class lacks stays Pending and the job fails as Unschedulable. StorageClasses do
# not list their modes, so the platform cannot check: it is the operator's word.
CHECKPOINT_ACCESS_MODE = env("CHECKPOINT_ACCESS_MODE", default="ReadWriteOnce")
if CHECKPOINT_ACCESS_MODE not in ("ReadWriteOnce", "ReadWriteMany"):
    raise ImproperlyConfigured(
        f"CHECKPOINT_ACCESS_MODE must be ReadWriteOnce or ReadWriteMany, not {CHECKPOINT_ACCESS_MODE!r}"
    )
# Where learner pods may connect beyond their namespace and DNS (CIDRs, comma-separated): the address of
# ARTIFACTS_BASE_URL and of any S3 endpoint jobs read from. Empty: nothing else (default-deny egress).
TENANT_EGRESS_CIDRS = env.list("TENANT_EGRESS_CIDRS", default=[])
# The uid (also gid and fsGroup) learner pods run as. Empty or `namespace`: none is set, so the cluster
# assigns one from the namespace's range (OpenShift's restricted SCC refuses any other); runAsNonRoot stays.
_RUN_AS_USER = env.str("POD_RUN_AS_USER", default="1000").strip()
if _RUN_AS_USER in ("", "namespace"):
    POD_RUN_AS_USER: int | None = None
elif _RUN_AS_USER.isdigit() and int(_RUN_AS_USER) > 0:
    POD_RUN_AS_USER = int(_RUN_AS_USER)
else:
    raise ImproperlyConfigured(
        f"POD_RUN_AS_USER must be a uid above 0, empty or 'namespace' (pods run as non-root), not {_RUN_AS_USER!r}"
    )
# The node-local DNS cache learner pods may query on port 53 besides kube-dns in kube-system (CIDRs,
# comma-separated): NodeLocal DNSCache answers on a link-local address no namespace selector matches.
# Empty: kube-system only.
NODE_LOCAL_DNS_CIDRS = env.list("NODE_LOCAL_DNS_CIDRS", default=["169.254.20.10/32"])
for _cidr in NODE_LOCAL_DNS_CIDRS:
    try:
        ipaddress.ip_network(_cidr)
    except ValueError as _error:
        raise ImproperlyConfigured(f"NODE_LOCAL_DNS_CIDRS: {_cidr!r} is not a CIDR ({_error})") from None

# The engine's clocks (seconds): how long a starting job may wait for its pods before it is launched
# again, and how long its pods may stay pending before the job goes back to the queue.
LAUNCH_GRACE_SECONDS = env.int("LAUNCH_GRACE_SECONDS", default=30)
PENDING_TIMEOUT_SECONDS = env.int("PENDING_TIMEOUT_SECONDS", default=600)
# A job whose pods stay pending that long this many times (a cause admission cannot see: a taint put on
# its node after admission, a claim that cannot bind, its node gone) fails with the scheduler's message
# instead of looping.
PENDING_TIMEOUT_LIMIT = env.int("PENDING_TIMEOUT_LIMIT", default=3)
# Disruptions (evictions, preemption by the cluster, node loss, pod GC, kubelet admission rejections, webhook
# or apiserver errors at launch) send a job back to the queue without using its `retries`; this many of them
# per job, then it fails with DisruptionBudgetExhausted (a cluster that keeps taking it away is not waited on
# for ever).
INFRA_RETRY_LIMIT = env.int("INFRA_RETRY_LIMIT", default=10)
# The label value that marks this installation's pods, Services, Secrets and claims (trainyard.io/installation);
# the watcher, reconcile and teardown touch nothing else. Empty: derived from the database, so staging and
# production on one cluster keep apart (give them distinct TENANT_NAMESPACE_PREFIXes as well).
INSTALLATION_ID = env("INSTALLATION_ID", default="")
# How long a starting job waits for an image that fails to pull (ErrImagePull, ImagePullBackOff: the kubelet
# retries) before it fails with the registry's message.
IMAGE_PULL_GRACE_SECONDS = env.int("IMAGE_PULL_GRACE_SECONDS", default=180)
# What a learner that asks for GPUs tolerates, comma-separated in kubectl's taint spelling: `key:Effect` (any
# value), `key=value:Effect` (that value), no `:Effect` for every effect, `*` for every taint. Admission uses
# the same list: a node is a candidate for a job only if its pods tolerate all of the node's NoSchedule and
# NoExecute taints (CPU-only learners tolerate none, so they stay off tainted GPU nodes). The default covers
# GPU nodes tainted on `nvidia.com/gpu` with any value: GKE's `nvidia.com/gpu=present:NoSchedule`, the
# common `nvidia.com/gpu=true:NoSchedule`, a bare key. Add your own GPU pools' taints (AKS: `sku=gpu:NoSchedule`).
GPU_TOLERATIONS = env.list("GPU_TOLERATIONS", default=["nvidia.com/gpu:NoSchedule"])
# Operator overrides of every learner pod, as a JSON object (docs/operations.md, "Pod overrides"): tolerations,
# node_selector, node_affinity, priority_class_name, labels, annotations and a patch applied last; a tenant's
# policy may add its own, applied after these. Checked here: a misspelt or refused field stops every process.
try:
    POD_OVERRIDES = overrides_clean(env.json("POD_OVERRIDES", default={}))
except (OverridesError, ValueError) as exc:
    raise ImproperlyConfigured(f"POD_OVERRIDES: {exc}") from exc
# How long a learner may stay on a NotReady/unreachable node before the cluster deletes it and the job
# resumes elsewhere (the learners' NoExecute tolerationSeconds; clusters default to 300 s).
# Node pools the cluster autoscaler can grow (from zero too), as a JSON list: admission counts the nodes each
# may still add, and jobs placed on them get pods the autoscaler sees pending (docs/operations.md, "Node pools").
# [{"name": "a100", "gpu_type": "NVIDIA-A100-SXM4-80GB", "gpus": 8, "cpu_millis": 94000, "memory_mib": 1300000,
#   "taints": ["nvidia.com/gpu=present:NoSchedule"], "min_nodes": 0, "max_nodes": 4}]
NODE_POOLS = env.str("NODE_POOLS", default="")
# The node label whose value names a node's pool (GKE `cloud.google.com/gke-nodepool`, EKS
# `eks.amazonaws.com/nodegroup`, Karpenter `karpenter.sh/nodepool`, kubesim `kubesim.io/node-group`). Set, a
# pool's nodes are those carrying its name there, so CPU pools and two pools of one GPU type can be declared,
# and jobs placed on a pool's future nodes wait for that pool's. Empty: a pool's nodes are told by GPU type.
NODE_POOL_LABEL = env.str("NODE_POOL_LABEL", default="")
# Where the cluster autoscaler publishes its status (namespace/name): pools declared with a `node_group` take
# that group's min and max sizes from it, so resizing the group in the cloud needs no change here.
AUTOSCALER_STATUS_CONFIGMAP = env.str(
    "AUTOSCALER_STATUS_CONFIGMAP", default="kube-system/cluster-autoscaler-status"
)
# How long a gang placed on a pool's nodes-to-be waits for its ProvisioningRequest to be provisioned before it
# goes back to the queue (no retry used).
PROVISIONING_TIMEOUT_SECONDS = env.int("PROVISIONING_TIMEOUT_SECONDS", default=900)
NODE_LOST_GRACE_SECONDS = env.int("NODE_LOST_GRACE_SECONDS", default=60)
# How long a learner has from SIGTERM (eviction, cancel, drain) to checkpoint and exit before SIGKILL (the
# pods' terminationGracePeriodSeconds). A learner on an unreachable node cannot be told: its pod is
# force-deleted once this much time has passed since its deletion.
LEARNER_TERMINATION_GRACE_SECONDS = env.int("LEARNER_TERMINATION_GRACE_SECONDS", default=30)
# A job stops itself at its max_runtime (SIGTERM, the grace above, RESULT_DIR uploaded) and then fails,
# DeadlineExceeded; its pods' activeDeadlineSeconds, the kubelet's backstop for when the platform cannot stop
# it, is max_runtime + the grace + this.
MAX_RUNTIME_BACKSTOP_SECONDS = env.int("MAX_RUNTIME_BACKSTOP_SECONDS", default=60)
# A launch refused by the namespace's ResourceQuota (the previous attempt's pods still count while they
# terminate) is tried again with back-off this many times before the job goes back to the queue.
LAUNCH_QUOTA_RETRIES = env.int("LAUNCH_QUOTA_RETRIES", default=8)
# A job whose launch a namespace quota kept refusing, or whose namespace is not this installation's, goes back
# to the queue and is not offered again for this long, unless reconcile sees that quota or namespace change.
LAUNCH_HOLD_SECONDS = env.int("LAUNCH_HOLD_SECONDS", default=900)
# One launch chain per attempt: a launch task holds the attempt this long per try (and over each back-off),
# so a second launch of it stops at once; a worker that dies mid-launch delays the next one by this much.
LAUNCH_LEASE_SECONDS = env.int("LAUNCH_LEASE_SECONDS", default=30)
# Preemption (jobs.core.preemption): how victims are chosen ("checkpoint-aware": least work lost since their
# last checkpoint; "youngest": Kueue's lowest priority, then latest admitted; "off": no preemption), and how
# long a job runs after its admission before it may be preempted at all (doubled for each earlier preemption
# of the job: jobs.core.preemption.protection_seconds). A victim's pods get SIGTERM and
# LEARNER_TERMINATION_GRACE_SECONDS to save a checkpoint.
PREEMPTION = env.str("PREEMPTION", default="checkpoint-aware")
PREEMPTION_MIN_RUNTIME_SECONDS = env.int("PREEMPTION_MIN_RUNTIME_SECONDS", default=300)
SCHEDULE_INTERVAL_SECONDS = env.float("SCHEDULE_INTERVAL_SECONDS", default=3.0)
# Fair share over time (docs/operations.md): a tenant's past usage, decayed with this half-life, counts in
# its fair share next to what it holds now, so a team that used much lately yields. 0: off (usage now only).
FAIR_SHARE_HALF_LIFE_SECONDS = env.float("FAIR_SHARE_HALF_LIFE_SECONDS", default=0.0)
RECONCILE_INTERVAL_SECONDS = env.float("RECONCILE_INTERVAL_SECONDS", default=30.0)
# The watcher lists every managed pod afresh this often (and after any failure), re-judging every active
# job, so nothing a dropped event or a stalled watch hid stays wrong for longer.
WATCHER_RELIST_SECONDS = env.float("WATCHER_RELIST_SECONDS", default=300.0)
# How long the watcher waits for the log followers of an attempt's ended pods to store their logs to the end
# before it declares the job finished or sends it back to the queue (whose teardown deletes the pods, and a
# deleted pod's log can no longer be read): a flood's backlog must not hold the job forever.
LOG_DRAIN_SECONDS = env.float("LOG_DRAIN_SECONDS", default=15.0)
# /readyz answers 503 naming the watcher or the scheduler when its pulse in Redis is older than this many
# seconds (the watcher pulses every 5 s while its watch loop is healthy; each scheduler cycle pulses, and
# beat sends one every SCHEDULE_INTERVAL_SECONDS). 0 leaves that process out of /readyz.
READY_WATCHER_STALE_SECONDS = env.float("READY_WATCHER_STALE_SECONDS", default=30.0)
READY_SCHEDULER_STALE_SECONDS = env.float(
    "READY_SCHEDULER_STALE_SECONDS", default=max(30.0, 10 * SCHEDULE_INTERVAL_SECONDS)
)
# The watcher also keeps a watch-backed cache of nodes and every pod's requests and publishes a per-node
# capacity summary to Redis, which the scheduler cycle reads instead of listing every node and pod
# (docs/operations.md "API footprint"). Off: every reader lists the cluster itself.
NODE_CACHE_ENABLED = env.bool("NODE_CACHE_ENABLED", default=True)
# Reconcile reads the watcher's copy of the platform's own pods (published with the node summary) and lists
# pods only when that copy shows something to repair or is missing or stale; it lists the platform's
# Services, Secrets and claims once per RECONCILE_RESYNC_SECONDS (its resync) and reads its own copy of them
# in between (jobs/cluster/leftovers.py). Off: every round lists pods, Services, Secrets and claims.
RECONCILE_FROM_WATCH_CACHE = env.bool("RECONCILE_FROM_WATCH_CACHE", default=True)
RECONCILE_RESYNC_SECONDS = env.int(
    "RECONCILE_RESYNC_SECONDS", default=env.int("RECONCILE_FULL_PASS_SECONDS", default=600)
)
# Log caps per learner and attempt (jobs/core/logcaps.py, docs/operations.md "Log caps"); a tenant's policy
# may override each. Lines over a cap are dropped with one marker line and one LogsTruncated event.
LOG_MAX_LINES_PER_SECOND = env.int("LOG_MAX_LINES_PER_SECOND", default=1000)
LOG_MAX_BYTES_PER_SECOND = env.int("LOG_MAX_BYTES_PER_SECOND", default=1024 * 1024)
LOG_MAX_LINES = env.int("LOG_MAX_LINES", default=1_000_000)
LOG_MAX_BYTES = env.int("LOG_MAX_BYTES", default=256 * 1024 * 1024)
# Telemetry and the tuner (docs/tuning.md): how often running jobs are sampled and the tuner runs, how
# long a window of samples it judges, how steady the speed must be (coefficient of variation) to call a
# job stable, how many looks of a new attempt are its warm-up (never judged), how many changes one job may
# get, and how much slower "after" may be before it is reverted.
TELEMETRY_INTERVAL_SECONDS = env.float("TELEMETRY_INTERVAL_SECONDS", default=10.0)
# GPU utilisation (clusterio/gpumetrics.py): metrics.k8s.io has none, so it is read from NVIDIA's DCGM
# exporter where the cluster runs one: each node's exporter URL (http://<node>:9400/metrics), or one
# Prometheus federate URL; empty: GPU jobs say "not exposed by this cluster".
GPU_METRICS_URLS = env.list("GPU_METRICS_URLS", default=[])
GPU_METRICS_TIMEOUT_SECONDS = env.float("GPU_METRICS_TIMEOUT_SECONDS", default=5.0)
# Idle GPUs (docs/tuning.md, "Idle GPUs"): a GPU job whose every learner's GPUs stay below IDLE_GPU_THRESHOLD
# (0-1) over IDLE_GPU_WINDOW_SECONDS is flagged on its page and to its owner, and halted where its tenant's
# policy sets idle_gpu_halt_after_seconds; checked every IDLE_GPU_CHECK_SECONDS.
IDLE_GPU_THRESHOLD = env.float("IDLE_GPU_THRESHOLD", default=0.05)
IDLE_GPU_WINDOW_SECONDS = env.float("IDLE_GPU_WINDOW_SECONDS", default=600.0)
IDLE_GPU_CHECK_SECONDS = env.float("IDLE_GPU_CHECK_SECONDS", default=30.0)
TUNING_INTERVAL_SECONDS = env.float("TUNING_INTERVAL_SECONDS", default=30.0)
TUNING_WINDOW_SECONDS = env.float("TUNING_WINDOW_SECONDS", default=120.0)
TUNING_MIN_SAMPLES = env.int("TUNING_MIN_SAMPLES", default=5)
TUNING_WARMUP_LOOKS = env.int("TUNING_WARMUP_LOOKS", default=2)
TUNING_STABLE_CV = env.float("TUNING_STABLE_CV", default=0.15)
TUNING_CPU_HIGH = env.float("TUNING_CPU_HIGH", default=0.85)
TUNING_MAX_CHANGES = env.int("TUNING_MAX_CHANGES", default=3)
TUNING_REGRESSION_TOLERANCE = env.float("TUNING_REGRESSION_TOLERANCE", default=0.05)
# A distributed job is communication-bound (jobs.core.tuning.scaling) when more learners bought less than this
# fraction of the ideal speed-up over fewer (0.2: 2 learners must be 1.2x as fast as 1).
TUNING_SCALING_MIN_GAIN = env.float("TUNING_SCALING_MIN_GAIN", default=0.2)
# Tasks that waited in the outbox while the broker was down are sent this often once it is back.
OUTBOX_DRAIN_SECONDS = env.float("OUTBOX_DRAIN_SECONDS", default=5.0)
# Leader election (common/leader.py): of the watchers and of the beats, only the one holding its PostgreSQL
# advisory lock acts; the others stand by and try every LEADER_RETRY_SECONDS, so a standby leads within that
# time of a leader's death, and within LEADER_LEASE_SECONDS of its machine's (the server ends a silent
# session). A leader that cannot prove its lock for two thirds of the lease exits. Off: every process acts.
LEADER_ELECTION = env.bool("LEADER_ELECTION", default=True)
LEADER_LEASE_SECONDS = env.float("LEADER_LEASE_SECONDS", default=15.0)
LEADER_RETRY_SECONDS = env.float("LEADER_RETRY_SECONDS", default=1.0)
CELERY_BEAT_SCHEDULER = "portal.beat:LeaderScheduler"
CELERY_BEAT_SCHEDULE = {
    "schedule": {"task": "jobs.tasks.schedule", "schedule": SCHEDULE_INTERVAL_SECONDS},
    "reconcile": {"task": "jobs.tasks.reconcile", "schedule": RECONCILE_INTERVAL_SECONDS},
    "telemetry": {"task": "jobs.tasks.telemetry", "schedule": TELEMETRY_INTERVAL_SECONDS},
    "autotune": {"task": "jobs.tasks.autotune", "schedule": TUNING_INTERVAL_SECONDS},
    "idle-gpu": {"task": "jobs.tasks.idle_gpu", "schedule": IDLE_GPU_CHECK_SECONDS},
    "outbox": {"task": "jobs.tasks.outbox_drain", "schedule": OUTBOX_DRAIN_SECONDS},
}

# Notifications when jobs change state (docs/notifications.md): each delivery is tried up to
# NOTIFY_MAX_ATTEMPTS times, waiting NOTIFY_BACKOFF_SECONDS after the first failure and twice as long after
# each next one (at most NOTIFY_BACKOFF_MAX_SECONDS), each attempt at most NOTIFY_TIMEOUT_SECONDS per phase
# (connect, send, answer). Webhooks never go to private, loopback or link-local addresses unless
# NOTIFY_ALLOW_PRIVATE_TARGETS (tests only). NOTIFY_BASE_URL: the portal's public address, for the job
# links in notifications. A sweep every NOTIFY_SWEEP_SECONDS reports jobs queued too long and re-queues
# deliveries whose task was lost.
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=6)
NOTIFY_BACKOFF_SECONDS = env.float("NOTIFY_BACKOFF_SECONDS", default=30.0)
NOTIFY_BACKOFF_MAX_SECONDS = env.float("NOTIFY_BACKOFF_MAX_SECONDS", default=3600.0)
NOTIFY_TIMEOUT_SECONDS = env.float("NOTIFY_TIMEOUT_SECONDS", default=10.0)
NOTIFY_ALLOW_PRIVATE_TARGETS = env.bool("NOTIFY_ALLOW_PRIVATE_TARGETS", default=False)
# Private webhook targets an operator allows (on-prem chat, incident tools): CIDRs and host names (`*.corp.example`
# for subdomains), comma-separated; jobs/notifications/targets.py says what each opens.
NOTIFY_ALLOWED_TARGETS = env.list("NOTIFY_ALLOWED_TARGETS", default=[])
NOTIFY_BASE_URL = env("NOTIFY_BASE_URL", default="")
NOTIFY_SWEEP_SECONDS = env.float("NOTIFY_SWEEP_SECONDS", default=30.0)
# "Send a test" (page and API): at most NOTIFY_TEST_PER_TARGET tests to one address or URL and
# NOTIFY_TEST_PER_USER by one user per NOTIFY_TEST_WINDOW_SECONDS; past that a 429 saying when to retry.
NOTIFY_TEST_PER_TARGET = env.int("NOTIFY_TEST_PER_TARGET", default=5)
NOTIFY_TEST_PER_USER = env.int("NOTIFY_TEST_PER_USER", default=20)
NOTIFY_TEST_WINDOW_SECONDS = env.int("NOTIFY_TEST_WINDOW_SECONDS", default=3600)
# E-mail targets: a link valid NOTIFY_VERIFY_MAX_AGE_SECONDS verifies the address before anything is sent
# there; a new link at most every NOTIFY_VERIFY_RESEND_SECONDS.
NOTIFY_VERIFY_MAX_AGE_SECONDS = env.int("NOTIFY_VERIFY_MAX_AGE_SECONDS", default=3 * 24 * 3600)
NOTIFY_VERIFY_RESEND_SECONDS = env.int("NOTIFY_VERIFY_RESEND_SECONDS", default=60)
CELERY_BEAT_SCHEDULE["notifications"] = {"task": "jobs.notifications.sweep", "schedule": NOTIFY_SWEEP_SECONDS}
# TensorBoard pieces whose parse task was lost (Redis holds only what can be lost) are queued again.
TENSORBOARD_SWEEP_SECONDS = env.float("TENSORBOARD_SWEEP_SECONDS", default=60.0)
CELERY_BEAT_SCHEDULE["tensorboard"] = {
    "task": "jobs.tensorboard.sweep",
    "schedule": TENSORBOARD_SWEEP_SECONDS,
}
# E-mail notifications go through Django's mail backend: EMAIL_URL like smtp+tls://user:pass@host:587
# (django-environ's form; consolemail:// prints them), from DEFAULT_FROM_EMAIL.
vars().update(env.email_url("EMAIL_URL", default="smtp://localhost:25"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="trainyard@localhost")

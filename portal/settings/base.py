"""Settings shared by every environment; every value comes from the environment."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

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
    "guardian",
    "channels",
    "portal",
    "tenants",
    "jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
    "django.contrib.auth.backends.ModelBackend",
    "guardian.backends.ObjectPermissionBackend",
]
ANONYMOUS_USER_NAME = None  # guardian: no anonymous user row, nobody anonymous gets anything

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

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # A viewer's channel holds at most 1,000 messages for 30 s; past that the consumer sees a gap in
        # the sequence numbers and tells the browser to backfill from the database (docs/streaming.md).
        "CONFIG": {"hosts": [REDIS_URL], "capacity": 1000, "expiry": 30},
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.tokens.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "EXCEPTION_HANDLER": "portal.apiutil.exception_handler",
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
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
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
        'is `{"detail": "...", "errors": {field: [messages]}}`.'
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery: JSON only, late acks so a killed worker's task runs again, hard limits on every task.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=120)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=150)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)

# The cluster: a kubeconfig file (kubesim writes one), or in-cluster credentials when unset.
KUBECONFIG = env("KUBECONFIG", default="")
KUBE_CONTEXT = env("KUBE_CONTEXT", default="")
TENANT_NAMESPACE_PREFIX = env("TENANT_NAMESPACE_PREFIX", default="ty-")

# Fernet key(s) that seal data-store credentials at rest (jobs/credentials.py); comma-separated to rotate,
# the first seals. Empty: derived from SECRET_KEY.
CREDENTIALS_KEY = env("CREDENTIALS_KEY", default="")

# Hard limits on what a job spec may carry; see jobs/spec.py.
SPEC_MAX_BYTES = env.int("SPEC_MAX_BYTES", default=64 * 1024)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
}

# Where checkpoints live when the cluster has no shared storage class (kubesim, single node): a node
# folder per job that outlives its pods, so a requeued attempt resumes. Empty: per-pod scratch only.
CHECKPOINT_HOST_ROOT = env("CHECKPOINT_HOST_ROOT", default="")

# The engine's clocks (seconds): how long a starting job may wait for its pods before it is launched
# again, and how long its pods may stay pending before the job goes back to the queue.
LAUNCH_GRACE_SECONDS = env.int("LAUNCH_GRACE_SECONDS", default=30)
PENDING_TIMEOUT_SECONDS = env.int("PENDING_TIMEOUT_SECONDS", default=600)
SCHEDULE_INTERVAL_SECONDS = env.float("SCHEDULE_INTERVAL_SECONDS", default=3.0)
RECONCILE_INTERVAL_SECONDS = env.float("RECONCILE_INTERVAL_SECONDS", default=30.0)
CELERY_BEAT_SCHEDULE = {
    "schedule": {"task": "jobs.tasks.schedule", "schedule": SCHEDULE_INTERVAL_SECONDS},
    "reconcile": {"task": "jobs.tasks.reconcile", "schedule": RECONCILE_INTERVAL_SECONDS},
}

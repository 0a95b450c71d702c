"""Settings for a real deployment: no defaults for secrets, secure cookies, CSP, hosts from env."""

from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

from portal.secretkeys import weak_secret_key

from .base import *  # noqa: F403
from .base import LOGGING, MIDDLEWARE, env

SECRET_KEY = env("SECRET_KEY", default="")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set in production (environment variable SECRET_KEY or SECRET_KEY_FILE)."
    )
if _weak := weak_secret_key(SECRET_KEY):
    raise ImproperlyConfigured(
        f"SECRET_KEY is not fit for production: {_weak}. Use a random one of 50 characters or more, "
        "`python -c 'import secrets; print(secrets.token_urlsafe(64))'`."
    )
# Data-store credentials are sealed with it (common/sealing.py): without one of its own the key would
# follow SECRET_KEY, and rotating SECRET_KEY would make every stored credential unreadable.
CREDENTIALS_KEY = env("CREDENTIALS_KEY", default="")
if not CREDENTIALS_KEY:
    raise ImproperlyConfigured(
        "CREDENTIALS_KEY must be set in production (environment variable CREDENTIALS_KEY or "
        "CREDENTIALS_KEY_FILE): a Fernet key, `python -c 'from cryptography.fernet import Fernet; "
        "print(Fernet.generate_key().decode())'`."
    )
for _key in CREDENTIALS_KEY.split(","):
    try:
        Fernet(_key.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(
            "CREDENTIALS_KEY must be Fernet keys (32 url-safe base64 bytes), comma-separated."
        ) from exc

DEBUG = False
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Scripts, styles, fonts, images and connections (fetch, the /ws/ WebSocket: CSP3's 'self' covers wss: on
# the same host) only from this server. Inline styles stay allowed: the pages' meters set widths in style
# attributes and ansi_up colours log lines with them. No framing, no plugins, forms post here only.
SECURE_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
# Swagger UI (drf-spectacular) starts from an inline script; that page alone may run one.
SECURE_CSP_PATH_OVERRIDES = {"/api/docs/": {"script-src": ["'self'", "'unsafe-inline'"]}}

# One JSON object per line for the cluster's log pipeline (LOG_FORMAT=plain for people).
LOG_FORMAT = env("LOG_FORMAT", default="json")
LOGGING["handlers"]["console"]["formatter"] = LOG_FORMAT
# Worker and beat keep heartbeat files here for their exec probes (deploy/k8s/base/worker.yaml, beat.yaml).
HEARTBEAT_DIR = env("HEARTBEAT_DIR", default="/tmp")  # noqa: S108 (the pods' private emptyDir)

# daphne serves no files: WhiteNoise serves the collected static files, compressed and cache-busted. It
# goes right after SecurityMiddleware, as WhiteNoise asks.
_security = MIDDLEWARE.index("django.middleware.security.SecurityMiddleware")
MIDDLEWARE = [
    *MIDDLEWARE[: _security + 1],
    "whitenoise.middleware.WhiteNoiseMiddleware",
    *MIDDLEWARE[_security + 1 :],
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

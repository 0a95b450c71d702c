"""Settings for `make test`: real PostgreSQL and Redis, fast hashing, its own Redis db."""

from .base import *  # noqa: F403
from .base import env

SECRET_KEY = env("SECRET_KEY", default="test-key-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/15")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL], "prefix": "ty-test"},
    },
}
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
LOGGING = {"version": 1, "disable_existing_loggers": False}

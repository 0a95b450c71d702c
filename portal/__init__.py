"""The Django project: settings, URLs, ASGI app, Celery app and the pages' base views."""

from .celery import app as celery_app

__all__ = ("celery_app",)

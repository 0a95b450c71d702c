"""The Celery app: configured from Django settings (CELERY_*), tasks autodiscovered from apps."""

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.local")

app = Celery("trainyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.task_failure.connect
def _count_failure(sender: object = None, **_: object) -> None:
    """Every failed task shows in /metrics as trainyard_task_failures."""
    from common.telemetry import count

    count("task_failures")

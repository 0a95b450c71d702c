"""System checks of the jobs app's settings: a misspelt value fails `manage.py check` and every process's
start, not the first scheduler cycle or launch that reads it."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register


@register()
def gpu_tolerations_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """GPU_TOLERATIONS must parse: admission and the learner pods both use it."""
    from jobs.cluster import gpu_tolerations

    try:
        gpu_tolerations()
    except ValueError as exc:
        return [Error(f"GPU_TOLERATIONS: {exc}", id="jobs.E001")]
    return []

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


@register()
def preemption_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """PREEMPTION must name a victim order or be "off"; the minimum runtime cannot be negative."""
    from django.conf import settings

    from jobs.core.preemption import ORDERS

    errors = []
    if settings.PREEMPTION not in (*ORDERS, "off"):
        choices = ", ".join((*ORDERS, "off"))
        errors.append(Error(f"PREEMPTION: {settings.PREEMPTION!r} is not one of {choices}", id="jobs.E002"))
    if settings.PREEMPTION_MIN_RUNTIME_SECONDS < 0:
        errors.append(Error("PREEMPTION_MIN_RUNTIME_SECONDS cannot be negative", id="jobs.E003"))
    return errors


@register()
def notify_allowed_targets_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """NOTIFY_ALLOWED_TARGETS must be CIDRs and host names: every webhook check reads it."""
    from jobs.notifications.targets import allowed_targets

    try:
        allowed_targets()
    except ValueError as exc:
        return [Error(f"NOTIFY_ALLOWED_TARGETS: {exc}", id="jobs.E011")]
    return []


@register()
def node_pools_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """NODE_POOLS must parse: every cycle counts the pools' potential nodes."""
    from jobs.cluster import node_pools

    try:
        node_pools()
    except ValueError as exc:
        return [Error(f"NODE_POOLS: {exc}", id="jobs.E010")]
    return []


@register()
def pod_overrides_check(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """POD_OVERRIDES must be valid overrides (settings check the environment's; this checks the value the
    process runs with), or every launch would fail."""
    from jobs.cluster import global_pod_overrides

    try:
        global_pod_overrides()
    except ValueError as exc:
        return [Error(f"POD_OVERRIDES: {exc}", id="jobs.E012")]
    return []

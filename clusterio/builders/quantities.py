"""Kubernetes quantity strings; integers in, strings out, so no float ever reaches the API."""

from __future__ import annotations


def cpu_quantity(cpu_millis: int) -> str:
    """Render millicores as a CPU quantity: whole cores as `"2"`, anything else as `"1500m"`."""
    return str(cpu_millis // 1000) if cpu_millis % 1000 == 0 else f"{cpu_millis}m"


def memory_quantity(memory_mib: int) -> str:
    """Render mebibytes as a memory quantity, e.g. `"4096Mi"`."""
    return f"{memory_mib}Mi"

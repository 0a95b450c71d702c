"""Trainyard jobs as FfDL's `Model` objects (swagger `definitions/Model`), and errors as FfDL's `Error`."""

from __future__ import annotations

import shlex
from datetime import datetime
from http import HTTPStatus
from typing import Any

import yaml

from jobs.core.ffdl_status import ffdl_status
from jobs.models import Job, MetricSample

API_PREFIX = "/v1/models/"
"""Locations are relative to the API's base (DLAAS_URL), as FfDL's CLI expects (`LocationToID`)."""


def millis(value: datetime | None) -> str:
    """A time as FfDL's trainer wrote it: milliseconds since the epoch, as a string ("" for none)."""
    return "" if value is None else str(int(value.timestamp() * 1000))


def ffdl_manifest(job: Job) -> dict[str, Any]:
    """The FfDL manifest the job was submitted with ({} for a Trainyard spec; credentials are masked in the
    stored text, and only ids, types and URLs are read from it here)."""
    if job.source != "ffdl":
        return {}
    try:
        data = yaml.safe_load(job.document)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _framework(job: Job, manifest: dict[str, Any]) -> dict[str, str]:
    framework = manifest.get("framework")
    if isinstance(framework, dict) and framework.get("name"):
        return {"name": str(framework["name"]), "version": str(framework.get("version", ""))}
    return {"name": "custom", "version": str(job.spec.get("image", ""))}


def _command(job: Job, manifest: dict[str, Any]) -> str:
    framework = manifest.get("framework")
    if isinstance(framework, dict) and isinstance(framework.get("command"), str):
        return str(framework["command"]).strip()
    command = job.spec.get("command") or []
    return shlex.join(str(part) for part in command)


def _stores(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    stores = manifest.get("data_stores")
    out = []
    for store in stores if isinstance(stores, list) else []:
        if not isinstance(store, dict):
            continue
        connection = store.get("connection")
        url = connection.get("auth_url") if isinstance(connection, dict) else None
        out.append(
            {
                "data_store_id": str(store.get("id", "")),
                "type": str(store.get("type", "")),
                "connection": {"auth_url": str(url)} if url else {},
                "_data": "training_data" in store,
                "_results": "training_results" in store,
            }
        )
    return out


def model(job: Job, *, metrics: list[MetricSample] | None = None) -> dict[str, Any]:
    """The job as FfDL's `Model`: id, location, name, framework, training (resources, command, data, status),
    data stores (ids, types, endpoint; never credentials) and, when given, its latest metrics."""
    manifest = ffdl_manifest(job)
    stores = _stores(manifest)
    status = ffdl_status(job.status)
    return {
        "model_id": job.pk,
        "location": API_PREFIX + job.pk,
        "name": job.name,
        "description": str(manifest.get("description") or job.spec.get("description") or ""),
        "framework": _framework(job, manifest),
        "training": {
            "command": _command(job, manifest),
            "cpus": job.cpu_millis / 1000,
            "gpus": float(job.gpus),
            "memory": float(job.memory_mib),
            "memory_unit": "MiB",
            "learners": job.learners,
            "input_data": [s["data_store_id"] for s in stores if s["_data"]],
            "output_data": [s["data_store_id"] for s in stores if s["_results"]],
            "training_status": {
                "status": status.value,
                "status_description": status.value,
                "status_message": job.message,
                "error_code": job.reason if status.value == "FAILED" else "",
                "submitted": millis(job.created_at),
                "completed": millis(job.finished_at),
                "trainyard_status": job.status,
            },
        },
        "data_stores": [{k: v for k, v in s.items() if not k.startswith("_")} for s in stores],
        "metrics": _metric_data(metrics or []),
    }


def _metric_data(samples: list[MetricSample]) -> list[dict[str, Any]]:
    """The latest value of each metric (`samples` by name, then in log order) as one FfDL `MetricData`."""
    if not samples:
        return []
    latest: dict[str, MetricSample] = {}
    for sample in samples:
        latest[sample.name] = sample
    last = max(latest.values(), key=lambda s: s.log_seq)
    return [
        {
            "type": "train",
            "timestamp": millis(last.ts),
            "iteration": last.step or 0,
            "Values": {name: sample.value for name, sample in sorted(latest.items())},
        }
    ]


def ffdl_error(status: int, description: str, errors: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """FfDL's `Error` (`code`, `error`, `description`) with Trainyard's per-field messages beside it."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return {"code": status, "error": phrase, "description": description, "errors": errors or {}}

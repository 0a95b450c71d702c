"""Trainyard jobs as FfDL's `Model` objects (swagger `definitions/Model`), and errors as FfDL's `Error`."""

from __future__ import annotations

import shlex
from datetime import datetime
from http import HTTPStatus
from typing import Any

from jobs.core.ffdl_status import ffdl_status
from jobs.models import Job, MetricSample

API_PREFIX = "/v1/models/"
"""Locations are relative to the API's base (DLAAS_URL), as FfDL's CLI expects (`LocationToID`)."""


def millis(value: datetime | None) -> str:
    """A time as FfDL's trainer wrote it: milliseconds since the epoch, as a string ("" for none)."""
    return "" if value is None else str(int(value.timestamp() * 1000))


def _framework(job: Job) -> dict[str, str]:
    """FfDL's framework as the manifest named it (kept in the spec), else `custom` with the image."""
    framework = job.spec.get("framework")
    if isinstance(framework, dict) and framework.get("name"):
        return {"name": str(framework["name"]), "version": str(framework.get("version") or "")}
    return {"name": "custom", "version": str(job.spec.get("image", ""))}


def _command(job: Job) -> str:
    """The command as one line: an FfDL command runs as `/bin/sh -c <command>`, shown as written."""
    command = [str(part) for part in job.spec.get("command") or []]
    if len(command) == 3 and command[:2] == ["/bin/sh", "-c"]:
        return command[2].strip()
    return shlex.join(command)


def _stores(job: Job) -> list[dict[str, Any]]:
    """The job's data stores (its S3 volumes, grouped by the store id their secret carries), in order."""
    stores: dict[str, dict[str, Any]] = {}
    for volume in job.spec.get("volumes") or []:
        if not isinstance(volume, dict) or not volume.get("secret"):
            continue
        store = stores.setdefault(
            str(volume["secret"]),
            {"type": str(volume.get("type", "")), "url": volume.get("endpoint"), "kinds": set()},
        )
        store["kinds"].add(volume.get("kind"))
    return [{"data_store_id": key} | value for key, value in stores.items()]


def model(job: Job, *, metrics: list[MetricSample] | None = None) -> dict[str, Any]:
    """The job as FfDL's `Model`: id, location, name, framework, training (resources, command, data, status),
    data stores (ids, types, endpoint; never credentials) and, when given, its latest metrics."""
    stores = _stores(job)
    status = ffdl_status(job.status)
    return {
        "model_id": job.pk,
        "location": API_PREFIX + job.pk,
        "name": job.name,
        "description": str(job.spec.get("description") or ""),
        "framework": _framework(job),
        "training": {
            "command": _command(job),
            "cpus": job.cpu_millis / 1000,
            "gpus": float(job.gpus),
            "memory": float(job.memory_mib),
            "memory_unit": "MiB",
            "learners": job.learners,
            "input_data": [s["data_store_id"] for s in stores if "data" in s["kinds"]],
            "output_data": [s["data_store_id"] for s in stores if "results" in s["kinds"]],
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
        "data_stores": [
            {
                "data_store_id": s["data_store_id"],
                "type": s["type"],
                "connection": {"auth_url": str(s["url"])} if s["url"] else {},
            }
            for s in stores
        ],
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

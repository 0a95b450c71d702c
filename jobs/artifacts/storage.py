"""The artifact store: a Django storage built from the ARTIFACT_STORAGE setting (a local folder by
default, django-storages' S3Storage for any S3-compatible service), and the names things get in it."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.files.storage import Storage
from django.utils.module_loading import import_string


def artifact_storage() -> Storage:
    """The configured artifact store (one instance per configuration)."""
    return _storage(json.dumps(settings.ARTIFACT_STORAGE, sort_keys=True, default=str))


@lru_cache(maxsize=4)
def _storage(config_json: str) -> Storage:
    config: dict[str, Any] = json.loads(config_json)
    backend: type[Storage] = import_string(config["BACKEND"])
    return backend(**config.get("OPTIONS", {}))


def code_name(tenant_slug: str, sha256: str) -> str:
    """Where a tenant's code ZIP lives: content-addressed, so an identical upload is stored once."""
    return f"code/{tenant_slug}/{sha256}.zip"


def result_name(tenant_slug: str, job_id: str, attempt: int, learner: int, path: str) -> str:
    """Where one result file of one learner of one attempt lives."""
    return f"results/{tenant_slug}/{job_id}/{attempt}/{learner}/{path}"


def artifacts_delete(names: list[str]) -> int:
    """Delete stored artifacts by name (missing ones are skipped); returns how many were there."""
    storage = artifact_storage()
    gone = 0
    for name in names:
        if storage.exists(name):
            storage.delete(name)
            gone += 1
    return gone

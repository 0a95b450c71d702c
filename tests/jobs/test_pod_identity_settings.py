"""POD_RUN_AS_USER reaches the learner pods the platform builds: a fixed uid, or none where the cluster
assigns each namespace its own range (OpenShift's restricted SCC)."""

from __future__ import annotations

from typing import Any

import pytest

from clusterio.builders import make_learner_pod, to_dict
from jobs.cluster import pods_spec
from jobs.core.spec import parse_spec
from jobs.models import Job
from tests.factories import make_tenant

BASE = {"name": "mnist", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}


def _identity(settings: Any, uid: int | None) -> dict[str, Any]:
    settings.POD_RUN_AS_USER = uid
    job = Job(id="uidjob", tenant=make_tenant(), spec=parse_spec(BASE).spec, attempt=1)
    return to_dict(make_learner_pod(pods_spec(job, credentials={}), 0))["spec"]


@pytest.mark.django_db
def test_learner_pods_run_as_the_configured_uid(settings: Any) -> None:
    spec = _identity(settings, 1000650000)
    assert spec["securityContext"]["runAsUser"] == spec["securityContext"]["fsGroup"] == 1000650000
    assert {c["securityContext"]["runAsUser"] for c in spec["containers"]} == {1000650000}


@pytest.mark.django_db
def test_learner_pods_leave_the_uid_to_the_namespace_when_it_is_unset(settings: Any) -> None:
    spec = _identity(settings, None)
    assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for container in spec.get("initContainers", []) + spec["containers"]:
        assert "runAsUser" not in container["securityContext"]
        assert container["securityContext"]["runAsNonRoot"] is True

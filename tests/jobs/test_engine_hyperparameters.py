"""Hyperparameters reach the training process on kubesim: `HP_<NAME>` each and TRAINYARD_HYPERPARAMETERS as
JSON, through the real pod the launch builds; the job's experiment and tags come from its spec."""

from __future__ import annotations

import json

import pytest

from jobs.models import LogLine
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import wait_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPT = (
    "import json, os\n"
    "print('lr=' + os.environ['HP_LR'], 'amp=' + os.environ['HP_AMP'], 'opt=' + os.environ['HP_OPTIMIZER'])\n"
    "print('all=' + json.dumps(json.loads(os.environ['TRAINYARD_HYPERPARAMETERS']), sort_keys=True))"
)


def test_hyperparameters_reach_the_process_as_env(engine: KubeSim) -> None:
    tenant = make_tenant()
    hyper = {"lr": 0.0003, "amp": True, "optimizer": "adam", "batch_size": 32}
    document = {
        "name": "hp",
        "image": "python:3.11",
        "command": ["python", "-u", "-c", SCRIPT],
        "resources": {"cpu": "500m", "memory": "256Mi"},
        "experiment": "sweep",
        "tags": ["hp"],
        "hyperparameters": hyper,
    }
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    assert (job.experiment, job.tags) == ("sweep", ["hp"])
    job = wait_status(job, "succeeded")
    lines = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert "lr=0.0003 amp=true opt=adam" in lines, lines
    assert f"all={json.dumps(hyper, sort_keys=True)}" in lines, lines

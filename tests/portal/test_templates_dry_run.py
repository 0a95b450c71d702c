"""Every example spec (examples/specs/) and every template the submit page offers passes a dry run as tenant
`demo` of a fresh `make up` (seed_demo's quota, policy and data-store secret) on the cluster `make up` runs
(kubesim with one 4-GPU node, as in the Procfile): valid, within the quota, and "would start now"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import override_settings

from jobs.forms import spec_templates
from jobs.scheduling import job_dry_run
from jobs.services.submit import JobRejected
from jobs.views import cluster_nodes
from kubesim.testing import KubeSim
from tenants.models import Tenant

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "specs").glob("*.y*ml"))
DOCUMENTS = [(path.name, path.read_text()) for path in EXAMPLES]


@pytest.fixture
def demo(kubesim_cluster: KubeSim, settings: Any, db: None) -> tuple[Tenant, User]:
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    with override_settings(LOCAL_SETUP=True):
        call_command("seed_demo")
    return Tenant.objects.get(slug="demo"), User.objects.get(username="demo")


def test_every_example_is_offered_or_documented() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "demo-train.yaml",
        "ffdl-manifest.yml",
        "pytorch-single.yaml",
        "pytorch-two-learners.yaml",
        "train-cpu.yaml",
        "with-code.yaml",
    }


@pytest.mark.parametrize(("name", "text"), DOCUMENTS, ids=[n for n, _ in DOCUMENTS])
def test_each_example_would_start_now_for_the_demo_tenant(
    demo: tuple[Tenant, User], name: str, text: str
) -> None:
    tenant, user = demo
    result = job_dry_run(tenant=tenant, user=user, document=text, nodes=cluster_nodes())
    assert result.starts, (name, result.reason)


def test_each_page_template_would_start_now_for_the_demo_tenant(demo: tuple[Tenant, User]) -> None:
    tenant, user = demo
    templates = spec_templates()
    assert len(templates) == 4
    for key, (_, text) in templates.items():
        result = job_dry_run(tenant=tenant, user=user, document=text, nodes=cluster_nodes())
        assert result.starts, (key, result.reason)


def test_without_the_demo_secret_the_s3_example_is_refused_not_would_start(demo: tuple[Tenant, User]) -> None:
    tenant, user = demo
    tenant.datastore_secrets.all().delete()
    text = (ROOT / "examples" / "specs" / "pytorch-single.yaml").read_text()
    with pytest.raises(JobRejected) as info:
        job_dry_run(tenant=tenant, user=user, document=text, nodes=cluster_nodes())
    assert "no data-store secret 'demo-s3' in tenant 'demo'" in info.value.errors["volumes[0].secret"][0]

"""Sidecars end to end on kubesim: with a sidecar injected into every pod of the tenant's namespace (a classic
one that never ends, as Istio's or Linkerd's webhook adds, or a native one), the job ends on its learner
container's exit code and its pod is deleted, so the sidecar stops and the GPU is free."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jobs import cluster
from jobs.models import Learner
from jobs.services import job_submit
from kubesim.sidecars import INJECT_LABEL, SIDECAR_NAME
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.kubesim_only, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def injecting(engine: KubeSim, settings: Any) -> Iterator[KubeSim]:
    """Tenant namespaces carry the injection label (as an operator sets `istio-injection`)."""
    settings.TENANT_NAMESPACE_LABELS = {INJECT_LABEL: "true"}
    try:
        yield engine
    finally:
        engine.inject_sidecars(None)


@pytest.mark.parametrize(
    ("mode", "code", "status", "reason"),
    [
        ("classic", 0, "succeeded", "Completed"),
        ("classic", 3, "failed", "ExitCode3"),
        ("native", 0, "succeeded", "Completed"),
        ("native", 3, "failed", "ExitCode3"),
    ],
)
def test_a_job_beside_an_injected_sidecar_ends_on_its_learners_exit_code_and_its_pod_is_deleted(
    injecting: KubeSim, mode: str, code: int, status: str, reason: str
) -> None:
    injecting.inject_sidecars(mode)
    tenant = make_tenant()
    script = f"import sys, time; print('trained', flush=True); time.sleep(2); sys.exit({code})"
    job = job_submit(tenant=tenant, user=member(tenant), document=python_spec("meshed", script, retries=0))

    def sidecar_pod() -> dict[str, Any] | None:
        job.refresh_from_db()
        pods = cluster.job_pods(job) if job.attempt else []
        return pods[0] if pods else None

    try:
        pod = wait_until(sidecar_pod, what="the learner pod")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe(job)}") from None
    spec = pod["spec"]
    where = spec.get("initContainers") if mode == "native" else spec["containers"]
    assert SIDECAR_NAME in [c["name"] for c in where or []], "the injector added its sidecar"

    job = wait_status(job, status, timeout=60)
    assert job.reason == reason, describe(job)
    wait_until(lambda: not cluster.job_pods(job), timeout=30, what="the pod to be deleted")


def test_a_learner_past_its_init_containers_shows_no_podinitializing_reason(injecting: KubeSim) -> None:
    """A native sidecar is an init container: the learner waits PodInitializing until it has started, and
    that reason goes from its row once the learner runs (the job page showed "Running PodInitializing")."""
    injecting.inject_sidecars("native")
    tenant = make_tenant()
    script = "import time; print('training', flush=True); time.sleep(4)"
    job = job_submit(
        tenant=tenant, user=member(tenant), document=python_spec("init-first", script, retries=0)
    )

    def running() -> Learner | None:
        return Learner.objects.filter(job=job, phase="Running").first()

    try:
        learner = wait_until(running, timeout=60, what="the learner to run")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {describe(job)}") from None
    assert learner.reason == "", describe(job)
    wait_status(job, "succeeded", timeout=60)

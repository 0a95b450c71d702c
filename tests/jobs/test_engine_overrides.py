"""Operator overrides end to end on kubesim (issue 30): a CPU job that only a GPU-tainted node has room for
waits, and runs there once the operator adds the toleration to its tenant's policy; node selectors and
affinity (global, a tenant's) steer admission and reach the pods. Nodes added here are removed
at the end: the cluster is shared by the whole session."""

from __future__ import annotations

from typing import Any

import pytest

from jobs import cluster
from jobs.models import Job
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tenants.policy import policy_set
from tests.factories import make_tenant, member
from tests.jobs.engine import describe, python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.kubesim_only]

GKE_GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pods_of(job: Job) -> list[dict[str, Any]]:
    job.refresh_from_db()
    return [p for p in cluster.job_pods(job) if not p["metadata"].get("deletionTimestamp")]


def test_an_operator_toleration_lets_a_cpu_job_run_on_a_gpu_tainted_node(
    engine: KubeSim, nodes: list[str]
) -> None:
    # 100 cores: only the tainted GPU node has room (kubesim's own nodes have far fewer).
    engine.add_gpu_node(
        "ov-gpu-0", gpus=1, cpu=128, labels={"nvidia.com/gpu.product": "OV-GPU"}, taints=[GKE_GPU_TAINT]
    )
    nodes.append("ov-gpu-0")
    wait_until(lambda: "ov-gpu-0" in {n.name for n in cluster.nodes()}, what="the node summary")
    tenant = make_tenant(cpu_millis=200_000)
    job = job_submit(
        tenant=tenant, user=member(tenant), document=python_spec("wide", "print('ran')", cpu="100")
    )

    wait_until(
        lambda: "taints the job does not tolerate" in (Job.objects.get(pk=job.pk).message or ""), what="why"
    )
    job.refresh_from_db()
    assert job.status == "queued" and job.attempt == 0 and not pods_of(job), describe(job)

    # The platform admin adds the toleration to the tenant's policy (the admin console's and API's service).
    policy_set(
        tenant=tenant, pod_overrides={"tolerations": [GPU_TOLERATION], "labels": {"example.com/ok": "yes"}}
    )
    job = wait_status(job, "running", "succeeded", timeout=60)
    assert job.placements == ["ov-gpu-0"], describe(job)
    [pod] = wait_until(lambda: pods_of(job), what="the learner pod")
    assert pod["spec"]["nodeName"] == "ov-gpu-0"
    assert GPU_TOLERATION in pod["spec"]["tolerations"]
    assert pod["metadata"]["labels"]["example.com/ok"] == "yes"
    wait_status(job, "succeeded", timeout=60)
    # Another tenant's CPU jobs still stay off the tainted node.
    other = make_tenant(cpu_millis=200_000)
    kept = job_submit(
        tenant=other, user=member(other), document=python_spec("kept", "print('no')", cpu="100")
    )
    wait_until(
        lambda: "taints the job does not tolerate" in (Job.objects.get(pk=kept.pk).message or ""), what="why"
    )
    assert Job.objects.get(pk=kept.pk).status == "queued"


def test_a_global_node_selector_keeps_admission_and_the_pods_to_matching_nodes(
    engine: KubeSim, nodes: list[str], settings: Any
) -> None:
    # Admission's best fit for 100 cores is ov-plain (least CPU left over); the selector allows ov-training only.
    engine.add_gpu_node("ov-plain", gpus=0, cpu=110)
    engine.add_gpu_node("ov-training", gpus=0, cpu=128, labels={"example.com/pool": "training"})
    nodes.extend(["ov-plain", "ov-training"])
    wait_until(
        lambda: {"ov-plain", "ov-training"} <= {n.name for n in cluster.nodes()}, what="the node summary"
    )
    settings.POD_OVERRIDES = {"node_selector": {"example.com/pool": "training"}}
    tenant = make_tenant(cpu_millis=200_000)
    job = job_submit(
        tenant=tenant, user=member(tenant), document=python_spec("selected", "print('ok')", cpu="100")
    )
    job = wait_status(job, "running", "succeeded", timeout=60)
    assert job.placements == ["ov-training"], describe(job)
    [pod] = wait_until(lambda: pods_of(job), what="the learner pod")
    assert pod["spec"]["nodeSelector"] == {"example.com/pool": "training"}
    assert pod["spec"]["nodeName"] == "ov-training"
    wait_status(job, "succeeded", timeout=60)


def test_a_tenants_node_selector_places_its_jobs_and_leaves_other_tenants_alone(
    engine: KubeSim, nodes: list[str]
) -> None:
    engine.add_gpu_node("ov-a", gpus=0, cpu=110, labels={"example.com/pool": "a"})
    engine.add_gpu_node("ov-b", gpus=0, cpu=128, labels={"example.com/pool": "b"})
    nodes.extend(["ov-a", "ov-b"])
    wait_until(lambda: {"ov-a", "ov-b"} <= {n.name for n in cluster.nodes()}, what="the node summary")
    vision, other = make_tenant(cpu_millis=200_000), make_tenant(cpu_millis=200_000)
    policy_set(
        tenant=vision,
        pod_overrides={"node_affinity": [{"key": "example.com/pool", "operator": "In", "values": ["b"]}]},
    )
    script = "import time\ntime.sleep(3)\nprint('ok')"
    selected = job_submit(
        tenant=vision, user=member(vision), document=python_spec("b-only", script, cpu="100")
    )
    free = job_submit(tenant=other, user=member(other), document=python_spec("anywhere", script, cpu="100"))
    selected = wait_status(selected, "running", "succeeded", timeout=60)
    free = wait_status(free, "running", "succeeded", timeout=60)
    assert selected.placements == ["ov-b"] and free.placements == ["ov-a"], (
        describe(selected),
        describe(free),
    )
    for job in (selected, free):
        wait_status(job, "succeeded", timeout=60)


def test_an_override_naming_a_missing_priority_class_holds_the_job_until_the_class_exists(
    engine: KubeSim,
) -> None:
    from kubernetes import client as k8s

    from jobs import tasks

    scheduling = k8s.SchedulingV1Api(cluster.cluster().api_client)
    name = "ty-test-batch"
    tenant = make_tenant(cpu_millis=32_000)
    policy_set(tenant=tenant, pod_overrides={"priority_class_name": name})
    job = job_submit(
        tenant=tenant, user=member(tenant), document=python_spec("prio", "print('ran')", retries=0)
    )

    # The cluster refuses the pod (403 from the Priority admission plugin): the operator's doing, so the
    # job waits without using a retry, saying what to fix, and later cycles do not launch it again.
    job = wait_status(job, "requeued")
    assert job.reason == "PriorityClassMissing", describe(job)
    assert f"no PriorityClass with name {name} was found" in job.message
    assert "a platform admin must create it or change the overrides" in job.message
    for _ in range(3):
        tasks.schedule()
    job.refresh_from_db()
    assert (job.status, job.attempt) == ("requeued", 1), describe(job)
    assert tasks.reconcile()["released"] == 0

    scheduling.create_priority_class(k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name=name), value=100))
    try:
        assert tasks.reconcile()["released"] == 1
        job = wait_status(job, "running", "succeeded", timeout=60)
        [pod] = wait_until(lambda: pods_of(job), what="the learner pod")
        assert (pod["spec"]["priorityClassName"], pod["spec"]["priority"]) == (name, 100)
        job = wait_status(job, "succeeded", timeout=60)
        assert job.attempt == 2 and job.events.filter(to_status="requeued").get().data == {"counts": False}
    finally:
        scheduling.delete_priority_class(name)

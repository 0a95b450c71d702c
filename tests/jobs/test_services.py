"""Submit and cancel: validation, quota, permissions; nothing stored when refused."""

from dataclasses import replace

import pytest

from clusterio.capacity import NodeInfo, Resources
from clusterio.errors import Unavailable
from jobs.core.states import IllegalTransition, JobStatus
from jobs.models import Job, JobEvent, Learner, LogLine
from jobs.scheduling import job_dry_run, run_cycle
from jobs.services import JobRejected, PermissionDenied, job_cancel, job_submit, job_transition
from jobs.services.logs import logs_append
from tenants.models import Quota
from tests.conftest import SHARED_DATA
from tests.factories import FFDL_S3_HOST, allow, make_tenant, member

pytestmark = pytest.mark.django_db

GOOD = """
name: mnist
image: pytorch/pytorch:2.3
command: ["python", "train.py"]
learners: 2
resources: {gpus: 1, cpu: 2, memory: 4Gi}
"""


def test_submit_stores_a_queued_job_with_its_demand_and_an_event() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=GOOD)
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert (job.learners, job.gpus, job.cpu_millis, job.memory_mib) == (2, 1, 2000, 4096)
    assert job.owner == user and job.tenant == tenant
    assert job.spec["image"] == "pytorch/pytorch:2.3"
    assert list(job.events.values_list("kind", flat=True)) == ["submitted"]


def test_invalid_spec_is_refused_with_field_errors_and_nothing_stored() -> None:
    tenant = make_tenant()
    user = member(tenant)
    with pytest.raises(JobRejected) as info:
        job_submit(tenant=tenant, user=user, document="name: x\nimage: y\ncommand: [a]\nlearners: -1\n")
    assert "learners" in info.value.errors
    assert info.value.status == 400
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_job_that_can_never_fit_the_quota_is_refused_with_a_clear_reason() -> None:
    tenant = make_tenant()
    Quota.objects.filter(tenant=tenant).update(gpus=1)
    user = member(tenant)
    with pytest.raises(JobRejected, match="needs 2 GPUs in all, the tenant's quota is 1"):
        job_submit(tenant=tenant, user=user, document=GOOD)
    assert not Job.objects.exists()


def test_full_queue_is_refused_with_429() -> None:
    tenant = make_tenant()
    Quota.objects.filter(tenant=tenant).update(max_queued_jobs=1)
    user = member(tenant)
    job_submit(tenant=tenant, user=user, document=GOOD)
    with pytest.raises(JobRejected, match="already has 1 jobs waiting") as info:
        job_submit(tenant=tenant, user=user, document=GOOD)
    assert info.value.status == 429
    assert Job.objects.count() == 1


def test_viewer_cannot_submit() -> None:
    tenant = make_tenant()
    with pytest.raises(PermissionDenied):
        job_submit(tenant=tenant, user=member(tenant, "viewer"), document=GOOD)


def test_nobody_submits_into_another_tenant() -> None:
    mine, other = make_tenant(), make_tenant()
    with pytest.raises(PermissionDenied):
        job_submit(tenant=other, user=member(mine, "owner"), document=GOOD)
    assert not Job.objects.exists()


def test_inactive_tenant_accepts_no_jobs() -> None:
    tenant = make_tenant(active=False)
    with pytest.raises(JobRejected, match="inactive"):
        job_submit(tenant=tenant, user=member(tenant), document=GOOD)


def test_cancel_of_a_queued_job_ends_it_at_once() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_cancel(job=job_submit(tenant=tenant, user=user, document=GOOD), user=user)
    assert job.status == JobStatus.CANCELLED and job.finished_at is not None
    assert job.events.values_list("reason", flat=True).last() == "CancelledByUser"


def test_cancel_of_a_running_job_waits_for_its_pods() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=GOOD)
    job_transition(job_id=job.pk, to=JobStatus.STARTING, reason="Admitted")
    job_transition(job_id=job.pk, to=JobStatus.RUNNING, reason="PodsRunning")
    assert job_cancel(job=job, user=user).status == JobStatus.CANCELLING


def test_viewer_cannot_cancel() -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=GOOD)
    with pytest.raises(PermissionDenied):
        job_cancel(job=job, user=member(tenant, "viewer"))
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED


def test_cancelling_a_finished_job_is_a_conflict() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = job_cancel(job=job_submit(tenant=tenant, user=user, document=GOOD), user=user)
    with pytest.raises(JobRejected, match="already finished") as info:
        job_cancel(job=job, user=user)
    assert info.value.status == 409


def test_illegal_transition_changes_nothing() -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=GOOD)
    with pytest.raises(IllegalTransition):
        job_transition(job_id=job.pk, to=JobStatus.SUCCEEDED, reason="Nope")
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED
    assert job.events.count() == 1


def test_ffdl_manifest_is_accepted_and_its_credentials_are_not_stored() -> None:
    tenant = allow(make_tenant(), datastore_hosts=[FFDL_S3_HOST])
    manifest = (SHARED_DATA / "ffdl-manifests" / "pytorch-model-manifest.yml").read_text()
    job = job_submit(tenant=tenant, user=member(tenant), document=manifest)
    assert job.source == "ffdl"
    stored = str(Job.objects.filter(pk=job.pk).values("spec", "message").get())
    assert "password" not in stored and "'test'" not in stored


def test_log_lines_with_nul_bytes_are_stored_with_a_visible_replacement() -> None:
    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document={"name": "a", "image": "b", "command": ["c"]}
    )
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")
    logs_append(
        job_id=job.pk,
        attempt=1,
        learner=0,
        records=[(None, "before"), (None, "binary\x00junk"), (None, "after")],
        cursor=(None, 0),
    )
    stored = list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert stored == ["before", "binary\ufffdjunk", "after"]


A100_NODE = NodeInfo(
    name="a100-0",
    ready=True,
    gpu_type="NVIDIA-A100-SXM4-40GB",
    allocatable=Resources(4, 32000, 65536),
    free=Resources(4, 32000, 65536),
)
T4_NODE = replace(A100_NODE, name="t4-0", gpu_type="Tesla-T4")


def typed(gpu_type: str, *, learners: int = 1, gpus: int = 1) -> str:
    return (
        f"name: typed\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\nlearners: {learners}\n"
        f"resources: {{gpus: {gpus}, cpu: 1, memory: 1Gi, gpu_type: {gpu_type}}}\n"
    )


@pytest.fixture
def gpu_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobs.cluster.gpu_products", lambda: [A100_NODE.gpu_type, T4_NODE.gpu_type])


def test_a100_job_is_admitted_onto_a_node_labelled_with_the_full_product_name(gpu_nodes: None) -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=typed("a100"))
    assert job.spec["resources"]["gpu_type"] == "a100"  # stored as written
    assert run_cycle(nodes=[A100_NODE, T4_NODE]).admitted == [job.pk]
    job.refresh_from_db()
    assert job.status == JobStatus.STARTING and job.placements == ["a100-0"]


def test_a_gang_larger_than_its_types_total_waits_with_the_total_named(gpu_nodes: None) -> None:
    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document=typed("nvidia-tesla-a100", learners=2, gpus=4)
    )
    assert run_cycle(nodes=[A100_NODE, T4_NODE]).admitted == []
    job.refresh_from_db()
    assert job.message == (
        "can never fit: 2 learner(s) x 4 GPUs of type A100, 1000m CPU, 1024 MiB; "
        "together they need 8 GPUs, the cluster's A100 nodes have 4 GPUs in total"
    )


def test_a_gpu_type_no_node_has_is_refused_with_the_known_types_and_nothing_stored(gpu_nodes: None) -> None:
    tenant = make_tenant()
    with pytest.raises(JobRejected) as info:
        job_submit(tenant=tenant, user=member(tenant), document=typed("H100"))
    assert info.value.status == 400
    assert info.value.errors == {
        "resources.gpu_type": ["no node of the cluster has GPU type H100; known types: A100, T4"]
    }
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_gpu_type_is_accepted_while_the_cluster_cannot_be_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable() -> list[str]:
        raise Unavailable("connection refused")

    monkeypatch.setattr("jobs.cluster.gpu_products", unreachable)
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=typed("H100"))
    assert job.status == JobStatus.QUEUED


def test_dry_run_matches_aliases_on_the_nodes_it_is_given_and_refuses_unknown_types() -> None:
    tenant = make_tenant()
    user = member(tenant)
    nodes = ([A100_NODE, T4_NODE], "")
    dry = job_dry_run(tenant=tenant, user=user, document=typed("A100"), nodes=nodes)
    assert dry.starts and dry.nodes == ["a100-0"]
    dry = job_dry_run(tenant=tenant, user=user, document=typed("t4"), nodes=nodes)
    assert dry.starts and dry.nodes == ["t4-0"]
    with pytest.raises(JobRejected, match="no node of the cluster has GPU type V100; known types: A100, T4"):
        job_dry_run(tenant=tenant, user=user, document=typed("V100"), nodes=nodes)
    dry = job_dry_run(tenant=tenant, user=user, document=typed("V100"), nodes=(None, "connection refused"))
    assert not dry.starts and "cluster unreachable" in dry.reason


def test_events_a_person_caused_name_them_and_the_platforms_own_name_nobody() -> None:
    tenant = make_tenant()
    user = member(tenant, "owner")
    job = job_submit(tenant=tenant, user=user, document={"name": "a", "image": "b", "command": ["c"]})
    job_cancel(job=job, user=user)
    events = list(JobEvent.objects.filter(job=job).order_by("created_at", "id"))
    assert [(e.reason, e.actor) for e in events] == [("Submitted", user), ("CancelledByUser", user)]
    job_transition(
        job_id=job_submit(tenant=tenant, user=user, document=job.spec).pk, to="cancelled", reason="X"
    )
    assert JobEvent.objects.filter(reason="X").get().actor is None

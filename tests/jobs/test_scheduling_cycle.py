"""The fast scheduler cycle's database side: the snapshot read as tuples is the one the old instance-based
read gave, and queue positions are written only where they change, skipping rows locked elsewhere."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench import cycle_baseline
from clusterio.capacity import NodeInfo, Resources
from clusterio.taints import Taint
from jobs.core.admission import Pending
from jobs.core.choices import EventKind, Reason
from jobs.core.eta import Eta
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent
from jobs.scheduling import build_snapshot, run_cycle
from jobs.services import lifecycle
from jobs.services.lifecycle import queue_positions_record
from tests.factories import make_job, make_tenant

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


def _ctids() -> dict[str, str]:
    """Each job's physical row version: any UPDATE of a row gives it a new one, even to equal values."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, ctid::text FROM jobs_job")
        return dict(cursor.fetchall())


def _updates(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]


def _pending(jobs: list[Job], reason: str = "waiting: no room") -> list[Pending]:
    return [Pending(job.pk, k, reason) for k, job in enumerate(jobs, start=1)]


@pytest.mark.django_db
def test_only_the_rows_whose_position_reason_or_eta_change_are_written() -> None:
    tenant = make_tenant()
    jobs = [make_job(tenant) for _ in range(3)]
    pending = _pending(jobs)
    assert queue_positions_record(pending) == 3
    before = _ctids()

    start = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC).timestamp()
    moved = [pending[0], Pending(jobs[1].pk, 2, "waiting: quota"), pending[2]]
    etas = {jobs[2].pk: Eta(jobs[2].pk, start, start - 60, start + 60, "")}
    with CaptureQueriesContext(connection) as queries:
        assert queue_positions_record(moved, etas) == 2
    assert len(_updates(queries)) == 1
    after = _ctids()
    assert after[jobs[0].pk] == before[jobs[0].pk]
    assert after[jobs[1].pk] != before[jobs[1].pk] and after[jobs[2].pk] != before[jobs[2].pk]

    stored = {job.pk: job for job in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    assert (stored[jobs[1].pk].queue_position, stored[jobs[1].pk].message) == (2, "waiting: quota")
    assert stored[jobs[1].pk].reason == Reason.WAITING
    assert stored[jobs[2].pk].eta == datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    assert stored[jobs[2].pk].eta_low == stored[jobs[2].pk].eta - timedelta(seconds=60)
    events = JobEvent.objects.filter(kind=EventKind.SCHEDULING)
    assert [events.filter(job=job).count() for job in jobs] == [1, 2, 1]  # an ETA alone makes no event

    with CaptureQueriesContext(connection) as queries:
        assert queue_positions_record(moved, etas) == 0
    assert _updates(queries) == [] and _ctids() == after


@pytest.mark.django_db
def test_positions_are_written_in_chunks_with_and_without_etas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "_WRITE_CHUNK", 2)
    tenant = make_tenant()
    jobs = [make_job(tenant) for _ in range(5)]
    start = timezone.now().timestamp() + 600
    etas = {jobs[4].pk: Eta(jobs[4].pk, start, start, start + 1, "")}  # the last chunk's alone
    long_reason = "waiting: " + "x" * 2000
    with CaptureQueriesContext(connection) as queries:
        assert queue_positions_record(_pending(jobs, long_reason), etas) == 5
    assert len(_updates(queries)) == 3
    rows = Job.objects.order_by("queue_position").values_list("queue_position", "message", "eta", "eta_high")
    assert [row[:2] for row in rows] == [(k, long_reason) for k in range(1, 6)]
    assert [row[2] is None for row in rows] == [True, True, True, True, False]
    assert rows[4][3] is not None and rows[4][3].timestamp() == pytest.approx(start + 1)


@pytest.mark.django_db
def test_a_job_that_stopped_waiting_is_not_given_a_queue_position() -> None:
    tenant = make_tenant()
    job = make_job(tenant, status=JobStatus.CANCELLED, reason=Reason.CANCELLED)
    assert queue_positions_record(_pending([job])) == 0
    job.refresh_from_db()
    assert (job.queue_position, job.reason) == (None, Reason.CANCELLED)


@pytest.mark.django_db(transaction=True)
def test_rows_locked_by_another_transaction_are_skipped_without_waiting() -> None:
    tenant = make_tenant()
    jobs = [make_job(tenant) for _ in range(3)]
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=jobs[1].pk)
                locked.set()
                release.wait(timeout=30)
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        finally:
            locked.set()
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(timeout=10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '5s'")  # a wait would fail the test, not hang it
            assert queue_positions_record(_pending(jobs)) == 2
    finally:
        release.set()
        holder.join(timeout=30)
    assert not errors and not holder.is_alive()
    positions = dict(Job.objects.values_list("id", "queue_position"))
    assert [positions[job.pk] for job in jobs] == [1, None, 3]
    assert not JobEvent.objects.filter(job=jobs[1], kind=EventKind.SCHEDULING).exists()
    with transaction.atomic():
        assert queue_positions_record(_pending(jobs)) == 1  # the next cycle catches up


def _nodes() -> list[NodeInfo]:
    gpu = Resources(8, 64_000, 262_144)
    return [
        NodeInfo("a100-0", True, "NVIDIA-A100-SXM4-40GB", gpu, Resources(4, 32_000, 131_072), taints=(GPU_TAINT,)),
        NodeInfo("a100-1", True, "NVIDIA-A100-SXM4-40GB", gpu, gpu, taints=(GPU_TAINT,)),
        NodeInfo("t4-0", True, "Tesla-T4", Resources(4, 32_000, 65_536), Resources(4, 32_000, 65_536)),
        NodeInfo("cpu-0", True, None, Resources(0, 16_000, 65_536), Resources(0, 8_000, 32_768)),
        NodeInfo("cordoned", True, None, Resources(0, 16_000, 65_536), Resources(0, 16_000, 65_536),
                 unschedulable=True),
        NodeInfo("down", False, None, Resources(0, 16_000, 65_536), Resources(0, 16_000, 65_536)),
    ]  # fmt: skip


def _spec(gpu_type: str | None = None, runtime: int | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"name": "train", "image": "busybox", "command": ["x"], "resources": {}}
    if gpu_type is not None:
        spec["resources"] = {"gpu_type": gpu_type}
    if runtime is not None:
        spec["max_runtime_seconds"] = runtime
    return spec


@pytest.mark.django_db
def test_the_snapshot_is_the_one_the_old_instance_read_gave_on_a_mixed_queue() -> None:
    now = timezone.now()
    lender = make_tenant(gpus=16, cohort="lab")
    borrower = make_tenant(gpus=4, gpus_borrowing_limit=8, cohort="lab", max_running_jobs=10)
    unlimited = make_tenant(gpus=2, gpus_borrowing_limit=None)
    gone = make_tenant(active=False)
    started = now - timedelta(seconds=500)
    make_job(
        borrower,
        status=JobStatus.STARTING,
        placements=["a100-0", "a100-0"],
        gpus=2,
        cpu_millis=4000,
        memory_mib=8192,
        learners=2,
        admitted_at=started,
        borrowed=True,
        spec=_spec("A100", 3600),
    )
    make_job(
        lender,
        status=JobStatus.RUNNING,
        placements=["t4-0"],
        gpus=1,
        started_at=started,
        admitted_at=started - timedelta(seconds=5),
        spec=_spec("tesla-t4", 900),
    )
    make_job(
        lender,
        status=JobStatus.RUNNING,
        placements=["cpu-0", "gone-node"],
        learners=2,
        admitted_at=started,
        spec=_spec(),
    )
    make_job(lender, status=JobStatus.HALTING, placements=["cpu-0"], started_at=started, spec=_spec(None, 60))
    make_job(lender, status=JobStatus.SUCCEEDED, placements=["cpu-0"], started_at=started, finished_at=now)
    shapes = [("A100", 1, 1), ("a100", 4, 2), ("tesla-t4", 1, 1), ("Tesla-T4", 2, 1), ("H100", 1, 1),
              (None, 0, 3), (None, 2, 1), ("", 0, 1)]  # fmt: skip
    for k, (gpu_type, gpus, learners) in enumerate(shapes * 2):
        make_job(
            [lender, borrower, unlimited][k % 3], gpus=gpus, learners=learners, priority=k % 3,
            status=JobStatus.REQUEUED if k % 5 == 0 else JobStatus.QUEUED,
            created_at=now - timedelta(seconds=k * 7.123457), spec=_spec(gpu_type, [None, 120, 7200][k % 3]),
        )  # fmt: skip
    make_job(gone, spec=_spec("A100", 60))

    nodes, at = _nodes(), now.timestamp()
    snapshot = build_snapshot(nodes=nodes, now=at)
    assert snapshot == cycle_baseline.build_snapshot(nodes=nodes, now=at)
    assert len(snapshot.jobs) == 16 and len(snapshot.running) == 4 and len(snapshot.tenants) == 3
    assert {j.gpu_type for j in snapshot.jobs} == {"A100", "T4", "H100", None, ""}
    assert any(j.tolerated for j in snapshot.jobs) and any(n.taints for n in snapshot.nodes)
    a100 = next(n for n in snapshot.nodes if n.name == "a100-0")  # less the starting job's two learners
    assert a100.free.as_shape() == (0, 24_000, 114_688)


@pytest.mark.django_db
def test_a_second_cycle_over_an_unchanged_queue_writes_nothing() -> None:
    tenant = make_tenant()
    jobs = [make_job(tenant, spec=_spec(None, 600)) for _ in range(3)]
    full = [NodeInfo("cpu-0", True, None, Resources(0, 8000, 32768), Resources(0, 0, 0))]
    assert run_cycle(nodes=full).pending == 3
    assert set(Job.objects.values_list("queue_position", flat=True)) == {1, 2, 3}
    before = _ctids()
    with CaptureQueriesContext(connection) as queries:
        assert run_cycle(nodes=full).pending == len(jobs)
    assert _updates(queries) == [] and _ctids() == before

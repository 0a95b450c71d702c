"""Celery tasks of the engine: thin, id-taking, idempotent; the logic lives in scheduling and lifecycle."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from common.telemetry import gauge as metrics_gauge
from jobs import cluster
from jobs.cluster import ClusterError, Conflict, Forbidden, Invalid, QuotaExceeded, Unavailable
from jobs.core import reconcile as repair
from jobs.core.choices import Reason
from jobs.core.states import ACTIVE, STOPPING, JobStatus
from jobs.endpoints import EndpointRefused, job_endpoint_problems
from jobs.models import Job
from jobs.notifications import tasks as notification_tasks  # noqa: F401 (registers them with the worker)
from jobs.scheduling import CycleResult, run_cycle
from jobs.services.idlegpu import idle_gpu_check_running
from jobs.services.lifecycle import (
    deadline_exceeded,
    job_launched,
    job_pods_gone,
    job_repair,
    launch_refused,
    launch_requeued,
)
from jobs.services.tuning import autotune_running
from jobs.telemetry import telemetry_record_running
from jobs.tensorboard import tasks as tensorboard_tasks  # noqa: F401 (registers them with the worker)

log = logging.getLogger(__name__)
LAUNCH_CONFLICT_RETRIES = 3


@shared_task(name="jobs.tasks.schedule", acks_late=True, soft_time_limit=30, time_limit=45)
def schedule() -> dict[str, object]:
    """One admission cycle (a no-op if another worker is in one)."""
    try:
        nodes = cluster.nodes()
    except ClusterError as exc:
        log.warning("scheduler cycle skipped: cluster unreachable (%s)", exc)
        return {"ran": False, "error": str(exc)}
    started = time.monotonic()
    result: CycleResult = run_cycle(nodes=nodes)
    if result.ran:
        metrics_gauge("admission_cycle_seconds", time.monotonic() - started)
    return {"ran": result.ran, "admitted": result.admitted, "pending": result.pending}


@shared_task(
    name="jobs.tasks.launch",
    bind=True,
    acks_late=True,
    soft_time_limit=60,
    time_limit=90,
    max_retries=None,
)
def launch(self: Any, job_id: str, attempt: int) -> list[str]:
    """Create the pods of one attempt; safe to run twice (names are deterministic, existing pods adopted).

    An attempt starts only once the pods of earlier attempts are gone (they hold the tenant's quota and
    the job's checkpoint while they terminate); pods stranded on a dead node past their grace period are
    force-deleted meanwhile. A quota refusal is retried with back-off (LAUNCH_QUOTA_RETRIES times, then the
    job goes back to the queue without using a retry); an API outage is retried five times; only a
    refusal that cannot change (invalid object, RBAC) fails the job, with everything created torn down. The
    job's S3 endpoints are checked again first (jobs.endpoints: a name may resolve elsewhere than at submit);
    one that is not public now fails the job (`EndpointRefused`, naming the address) before anything is made.
    """
    job = Job.objects.select_related("tenant", "tenant__quota").get(pk=job_id)
    if job.attempt != attempt or job.status != JobStatus.STARTING:
        return []
    refused = job_endpoint_problems(job)
    if refused:
        launch_refused(
            job_id, attempt, EndpointRefused("; ".join(refused)), reason=Reason.ENDPOINT_REFUSED,
            what="not launched, an S3 endpoint is not public now",
        )  # fmt: skip
        return []
    retries = self.request.retries or 0
    try:
        earlier = cluster.earlier_attempt_pods(job)
        if earlier:
            cluster.force_delete_stranded(earlier)
            raise self.retry(countdown=min(2 ** min(retries, 4), 10))
        pods = cluster.launch(job)
    except QuotaExceeded as exc:
        if retries < settings.LAUNCH_QUOTA_RETRIES:
            raise self.retry(exc=exc, countdown=min(2**retries, 30)) from exc
        launch_requeued(
            job_id, attempt, Reason.QUOTA_BUSY, f"the namespace quota stayed full: {exc}", counts=False
        )
        return []
    except Conflict as exc:
        # A name held by an object that is still being deleted frees up; one that belongs to something
        # else does not: a few tries, then the job fails with the API's words.
        if retries < LAUNCH_CONFLICT_RETRIES:
            raise self.retry(exc=exc, countdown=2**retries) from exc
        launch_refused(job_id, attempt, exc)
        return []
    except (Forbidden, Invalid) as exc:
        launch_refused(job_id, attempt, exc)
        return []
    except ValueError as exc:
        # The builder refuses the spec (what submit checks; a spec stored before a check existed, or a
        # setting changed since): it will never build, so the job fails now rather than at every reconcile.
        launch_refused(job_id, attempt, exc, reason=Reason.INVALID_SPEC, what="its pods cannot be built")
        return []
    except Unavailable as exc:
        if retries < 5:
            raise self.retry(exc=exc, countdown=2**retries) from exc
        launch_requeued(job_id, attempt, Reason.CLUSTER_UNAVAILABLE, f"could not launch: {exc}", infra=True)
        return []
    job_launched(job_id=job_id, attempt=attempt, pod_names=pods)
    return pods


@shared_task(name="jobs.tasks.teardown", acks_late=True, soft_time_limit=60, time_limit=90)
def teardown(job_id: str, attempt: int) -> int:
    """Delete an attempt's pods and services once the job no longer needs them.

    A stopping (cancelling or halting) job whose attempt has no pod at all (stopped before its launch
    created any) is cancelled or halted here; otherwise the watch loop does it when the last pod is gone.
    The job's checkpoint claims are not touched: they go only with the job (`job_delete`).
    """
    job = Job.objects.select_related("tenant").get(pk=job_id)
    if job.attempt == attempt and job.status in ACTIVE and job.status not in STOPPING:
        return 0
    deleted = cluster.teardown(job, attempt)
    if job.attempt == attempt and job.status in STOPPING and not cluster.job_pods(job):
        job_pods_gone(job_id=job.pk, attempt=attempt)
    return deleted


@shared_task(name="jobs.tasks.reconcile", acks_late=True, soft_time_limit=60, time_limit=90)
def reconcile() -> dict[str, int]:
    """Repair drift between the database and the cluster (the watch loop is the fast path; this is the net).

    Pods stranded on a dead node past their grace period are force-deleted; pods no admitted attempt owns
    are deleted (also those whose job row is gone or that carry no job label); a cancelling or halting job
    whose pods are still there is torn down again (a launch may have raced its teardown), one with no pods
    left is cancelled or halted; a starting job whose pods never all appeared (a launch
    that died half-way) is launched again; a running job whose pods vanished is requeued; a starting job
    whose unscheduled learner is bound to a node that no longer exists, or one stuck pending past
    PENDING_TIMEOUT_SECONDS, goes back to the queue without using up a retry; a job whose pod
    ran past its `activeDeadlineSeconds` (max_runtime) fails with DeadlineExceeded, for clusters whose
    kubelet does not enforce it (kubesim).
    """
    pods, _ = cluster.cluster().managed_pods()
    forced = cluster.force_delete_stranded(pods)
    now = timezone.now()
    facts, unowned = _pod_facts(pods, now)
    active = {(j.pk, j.attempt): j for j in Job.objects.filter(status__in=ACTIVE).select_related("tenant")}
    counts = {
        "orphans": unowned + _remove_orphans(pods, set(facts) - set(active)) + _remove_leftovers(),
        "forced": forced,
        "relaunched": 0,
        "requeued": 0,
        "cancelled": 0,
        "halted": 0,
        "deadline": 0,
    }
    views = [
        repair.ActiveJob(
            id=job.pk,
            attempt=job.attempt,
            status=job.status,
            learners=job.learners,
            admitted_seconds_ago=(now - (job.admitted_at or now)).total_seconds(),
            placements=tuple(job.placements or ()),
        )
        for job in active.values()
    ]
    clocks = repair.Clocks(settings.LAUNCH_GRACE_SECONDS, settings.PENDING_TIMEOUT_SECONDS)
    nodes = cluster.node_names() if repair.needs_nodes(views, facts, clocks) else None
    for decision in repair.decide(views, facts, clocks, nodes):
        _carry_out(decision, active[decision.job.key], counts)
    return counts


def _pod_facts(pods: list[dict[str, Any]], now: datetime) -> tuple[dict[repair.Key, repair.PodFacts], int]:
    """What the cluster holds per attempt (learners with a pod, those not on a node, one past its deadline),
    and how many pods were deleted for carrying no job or attempt label (managed by us, yet nobody's)."""
    live: dict[repair.Key, set[int]] = defaultdict(set)
    overdue: dict[repair.Key, int] = {}
    unbound: dict[repair.Key, list[int]] = defaultdict(list)
    unowned = 0
    for pod in pods:
        key = cluster.pod_owner(pod)
        if key is None:
            unowned += cluster.delete_pod(pod)
            continue
        learner = cluster.pod_learner(pod) or 0
        live[key].add(learner)
        if not pod.get("spec", {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            unbound[key].append(learner)
        if key not in overdue and _past_deadline(pod, now):
            overdue[key] = learner
    facts = {
        key: repair.PodFacts(
            learners=frozenset(learners), unbound=tuple(unbound.get(key, ())), overdue=overdue.get(key)
        )
        for key, learners in live.items()
    }
    return facts, unowned


def _remove_orphans(pods: list[dict[str, Any]], attempts: set[repair.Key]) -> int:
    """Delete the pods of attempts that are not admitted: through the job's teardown when its row exists,
    pod by pod when it is gone (deleted, or another installation's)."""
    removed = 0
    for job_id, attempt in attempts:
        job = Job.objects.select_related("tenant").filter(pk=job_id).first()
        if job is not None:
            removed += cluster.teardown(job, attempt)
        else:
            removed += sum(cluster.delete_pod(p) for p in pods if cluster.pod_owner(p) == (job_id, attempt))
    return removed


def _carry_out(decision: repair.Decision, job: Job, counts: dict[str, int]) -> None:
    """Do what reconcile decided about one job, counting it."""
    if decision.action == "deadline":
        counts["deadline"] += deadline_exceeded(job, decision.learner or 0)
    elif decision.action == "teardown":
        teardown.delay(job.pk, job.attempt)  # again: a launch may have raced the first teardown
    elif decision.action == "requeue":
        counts["requeued"] += job_repair(job, decision.reason, decision.message)
    elif decision.action == "launch":
        launch.delay(job.pk, job.attempt)
        counts["relaunched"] += 1
    elif decision.action in ("cancelled", "halted"):
        counts[decision.action] += job_pods_gone(job_id=job.pk, attempt=job.attempt) is not None


def _remove_leftovers() -> int:
    """Tear down the Services and Secrets of attempts that are not running (a teardown that never ran or
    failed half-way), and delete the checkpoint claims of jobs whose rows are gone. The cluster is read
    before the database: an attempt launched meanwhile is already active by then, never torn down."""
    leftovers = cluster.leftover_attempts()
    claims = cluster.checkpoint_claims()
    active = set(Job.objects.filter(status__in=ACTIVE).values_list("pk", "attempt"))
    removed = 0
    for (job_id, attempt), namespace in leftovers.items():
        if (job_id, attempt) not in active:
            removed += cluster.teardown_in(namespace, job_id, attempt)
    known = set(Job.objects.filter(pk__in={job_id for _, _, job_id in claims}).values_list("pk", flat=True))
    for namespace, name, job_id in claims:
        if job_id not in known:
            removed += cluster.delete_claim(namespace, name)
    return removed


def _past_deadline(pod: dict[str, Any], now: datetime) -> bool:
    """Whether an unfinished pod has run longer than its `activeDeadlineSeconds` since its startTime."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    status = pod.get("status") or {}
    if not deadline or not status.get("startTime") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    try:
        started = datetime.fromisoformat(status["startTime"])
    except (TypeError, ValueError):
        return False
    return bool((now - started).total_seconds() > int(deadline))


@shared_task(name="jobs.tasks.telemetry", acks_late=True, soft_time_limit=30, time_limit=45)
def record_telemetry() -> dict[str, int]:
    """Record one telemetry look at every running job (beat runs it every TELEMETRY_INTERVAL_SECONDS)."""
    return telemetry_record_running()


@shared_task(name="jobs.tasks.autotune", acks_late=True, soft_time_limit=30, time_limit=45)
def autotune() -> dict[str, int]:
    """One tuner pass over running jobs that declare a range (beat: every TUNING_INTERVAL_SECONDS)."""
    return autotune_running()


@shared_task(name="jobs.tasks.idle_gpu", acks_late=True, soft_time_limit=30, time_limit=45)
def idle_gpu() -> dict[str, int]:
    """Flag, clear or halt running GPU jobs by their GPUs' idleness (beat: every IDLE_GPU_CHECK_SECONDS)."""
    return idle_gpu_check_running()

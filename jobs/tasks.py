"""Celery tasks of the engine: thin, id-taking, idempotent; the logic lives in scheduling and lifecycle."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from celery import shared_task
from celery.exceptions import Retry
from django.conf import settings
from django.utils import timezone

from common.telemetry import gauge as metrics_gauge
from common.telemetry import pulse as metrics_pulse
from jobs import cluster
from jobs.cluster import (
    ClusterError,
    Conflict,
    Forbidden,
    Invalid,
    NamespaceNotOwned,
    PriorityClassMissing,
    ProvisioningFailed,
    ProvisioningPending,
    QuotaExceeded,
    Unavailable,
)
from jobs.core import reconcile as repair
from jobs.core.choices import Reason
from jobs.core.states import ACTIVE, STOPPING
from jobs.endpoints import EndpointRefused, job_endpoint_problems
from jobs.models import Job
from jobs.notifications import tasks as notification_tasks  # noqa: F401 (registers them with the worker)
from jobs.outbox import outbox_drain
from jobs.scheduling import CycleResult, run_cycle
from jobs.services.idlegpu import idle_gpu_check_running
from jobs.services.launches import (
    held_keys,
    holds_release,
    launch_held,
    launch_lease_drop,
    launch_lease_take,
    launch_waiting,
    launching,
)
from jobs.services.lifecycle import (
    job_deadline_exceeded,
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
_QUOTA_NAME = re.compile(r"exceeded quota: ([^,\s]+)")


@shared_task(name="jobs.tasks.schedule", acks_late=True, soft_time_limit=30, time_limit=45)
def schedule() -> dict[str, object]:
    """One admission cycle (a no-op if another worker is in one)."""
    metrics_pulse("scheduler")  # /readyz: the cycles run (beat sends them, a worker takes them)
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

    One chain per attempt (`jobs.services.launches`): the task and its retries hold the attempt's lease; a
    second launch of the attempt meanwhile (reconcile, a duplicate message) stops at once. A quota that still
    refuses after the retries, and a namespace that is not this installation's (`NamespaceNotOwned`, left
    untouched), send the job back to the queue without using a retry, held there with the reason until
    reconcile sees the quota or the namespace change (or LAUNCH_HOLD_SECONDS pass).
    """
    token = str(self.request.id or uuid.uuid4().hex)
    if not launch_lease_take(
        job_id=job_id, attempt=attempt, token=token, seconds=settings.LAUNCH_LEASE_SECONDS
    ):
        return []  # another chain launches this attempt (or it moved on)
    keep = False
    try:
        return _launch(self, job_id, attempt, token)
    except _LeaseLost:
        return []  # this try outlasted its lease and another chain took the attempt over: it goes on alone
    except Retry:
        keep = True  # the chain goes on after its back-off, holding the lease meanwhile
        raise
    finally:
        if not keep:
            launch_lease_drop(job_id=job_id, attempt=attempt, token=token)


def _launch(task: Any, job_id: str, attempt: int, token: str) -> list[str]:
    """One try of the launch chain: a retry extends the lease over its back-off."""
    job = Job.objects.select_related("tenant", "tenant__quota").get(pk=job_id)

    def again(countdown: float, exc: Exception | None = None) -> Retry:
        seconds = countdown + settings.LAUNCH_LEASE_SECONDS
        if not launch_lease_take(job_id=job_id, attempt=attempt, token=token, seconds=seconds):
            raise _LeaseLost
        return task.retry(exc=exc, countdown=countdown)

    retries = task.request.retries or 0
    try:
        # The S3 endpoints again (also those the job's data-store secrets carry: opening them raises
        # MissingSecret, a ValueError, for one deleted since submit).
        refused = job_endpoint_problems(job)
        if refused:
            launch_refused(
                job_id, attempt, EndpointRefused("; ".join(refused)), reason=Reason.ENDPOINT_REFUSED,
                what="not launched, an S3 endpoint is not public now",
            )  # fmt: skip
            return []
        earlier = cluster.earlier_attempt_pods(job)
        if earlier:
            cluster.force_delete_stranded(earlier)
            raise again(min(2 ** min(retries, 4), 10))
        pods = cluster.launch(job)
    except ProvisioningPending as exc:
        return _await_provisioning(job, exc, lambda: again(min(2 ** min(retries, 4), 10)))
    except ProvisioningFailed as exc:
        launch_requeued(job_id, attempt, Reason.UNSCHEDULABLE, str(exc), infra=True)
        return []
    except NamespaceNotOwned as exc:
        _hold(
            job,
            f"{exc}: a platform admin must resolve it (the tenant's page says how)",
            Reason.NAMESPACE_NOT_OWNED,
            f"namespace:{exc.namespace}:{job.tenant.slug}",
        )
        return []
    except PriorityClassMissing as exc:
        # The operator's overrides name a class the cluster lacks: no fault of the user's, so the job waits
        # (no retry used) and is offered again once the class exists.
        _hold(
            job,
            f"{exc}: the pod overrides (POD_OVERRIDES or the tenant policy) name it; a platform admin must "
            "create it or change the overrides",
            Reason.PRIORITY_CLASS_MISSING,
            f"priorityclass:{exc.name}",
        )
        return []
    except QuotaExceeded as exc:
        if retries < settings.LAUNCH_QUOTA_RETRIES:
            raise again(min(2**retries, 30), exc) from exc
        _hold_on_quota(job, exc)
        return []
    except Conflict as exc:
        # A name held by an object that is still being deleted frees up; one that belongs to something
        # else does not: a few tries, then the job fails with the API's words.
        if retries < LAUNCH_CONFLICT_RETRIES:
            raise again(2**retries, exc) from exc
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
            raise again(2**retries, exc) from exc
        launch_requeued(job_id, attempt, Reason.CLUSTER_UNAVAILABLE, f"could not launch: {exc}", infra=True)
        return []
    job_launched(job_id=job_id, attempt=attempt, pod_names=pods)
    return pods


def _await_provisioning(job: Job, exc: ProvisioningPending, again: Callable[[], Retry]) -> list[str]:
    """Wait for the gang's ProvisioningRequest, its words the job's wait reason; after
    PROVISIONING_TIMEOUT_SECONDS from admission the job goes back to the queue without using a retry."""
    waited = (timezone.now() - (job.admitted_at or timezone.now())).total_seconds()
    if waited > settings.PROVISIONING_TIMEOUT_SECONDS:
        message = f"not provisioned within {settings.PROVISIONING_TIMEOUT_SECONDS} s: {exc}"
        launch_requeued(job.pk, job.attempt, Reason.PENDING_TIMEOUT, message, infra=True)
        return []
    launch_waiting(job_id=job.pk, attempt=job.attempt, message=str(exc))
    raise again() from exc


class _LeaseLost(Exception):
    """The attempt's lease is another chain's now: this one stops instead of backing off."""


def _hold(job: Job, message: str, reason: str, held_on: str) -> None:
    """Back to the queue without using a retry, not offered again until `held_on` changes (or the hold ends)."""
    launch_held(
        job_id=job.pk, attempt=job.attempt, reason=reason, message=message, held_on=held_on,
        seconds=settings.LAUNCH_HOLD_SECONDS,
    )  # fmt: skip


def _hold_on_quota(job: Job, exc: QuotaExceeded) -> None:
    """A namespace quota kept refusing the pods: held on that quota as it reads now (its limits and use), so
    that reconcile re-offers the job once it changes; on every quota of the namespace when none is named."""
    namespace = cluster.namespace_for(job.tenant)
    found = _QUOTA_NAME.search(str(exc))
    name = found.group(1) if found else ""
    try:
        fingerprint = cluster.quota_fingerprint(namespace, name) if name else ""
    except ClusterError:
        fingerprint = ""
    what = (
        f"the namespace quota {name} keeps refusing its pods" if name else "the namespace quota stayed full"
    )
    launch_held(
        job_id=job.pk, attempt=job.attempt, reason=Reason.QUOTA_BUSY, message=f"{what}: {exc}",
        held_on=f"quota:{namespace}:{name}:{fingerprint}", seconds=settings.LAUNCH_HOLD_SECONDS,
    )  # fmt: skip


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
    PENDING_TIMEOUT_SECONDS, goes back to the queue without using up a retry; a job whose learner has run
    for its max_runtime (from its pod's startTime) is stopped as a halt stops it and then fails,
    DeadlineExceeded (the watcher's deadline clock does that on time; this is the net).

    Attempts' Services and Secrets no active attempt owns (a teardown that never ran or failed half-way) are
    torn down, and checkpoint claims whose job row is gone are deleted. With RECONCILE_FROM_WATCH_CACHE the
    pods come from the watcher's copy and these from reconcile's own copy (`jobs.cluster.leftovers`),
    listed once per RECONCILE_RESYNC_SECONDS; the cluster is listed only to act (docs/operations.md,
    "API footprint").
    """
    from_cache = bool(settings.RECONCILE_FROM_WATCH_CACHE and settings.NODE_CACHE_ENABLED)
    resync = _resync_due(from_cache)
    leftover = _remove_leftovers(resync)
    watched = cluster.watched_managed_pods() if from_cache else None
    if watched is not None and not _needs_repair(watched):
        # The watcher's copy shows no pod to repair: no pod is listed this round.
        counts = dict.fromkeys(_COUNTS, 0) | {"watched": 1, "orphans": leftover, "resync": int(resync)}
        return counts | {"released": release_holds()}
    # Something to repair (or no usable copy): act on the cluster as it is now.
    pods = cluster.managed_pods()
    forced = cluster.force_delete_stranded(pods)
    now = timezone.now()
    active = {(j.pk, j.attempt): j for j in Job.objects.filter(status__in=ACTIVE).select_related("tenant")}
    facts, unowned = _pod_facts(pods, now, _runtimes(active))
    counts = dict.fromkeys(_COUNTS, 0) | {
        "orphans": sum(cluster.delete_pod(p) for p in unowned)
        + _remove_orphans(pods, set(facts) - set(active))
        + leftover,
        "forced": forced,
        "resync": int(resync),
    }
    views = _views(active.values(), now)
    clocks = repair.Clocks(settings.LAUNCH_GRACE_SECONDS, settings.PENDING_TIMEOUT_SECONDS)
    nodes = cluster.node_names() if repair.needs_nodes(views, facts, clocks) else None
    room = cluster.node_room() if repair.needs_room(views, facts, clocks) else None
    for decision in repair.decide(views, facts, clocks, nodes, room):
        _carry_out(decision, active[decision.job.key], counts)
    counts["released"] = release_holds()
    return counts


_COUNTS = (
    "orphans",
    "forced",
    "relaunched",
    "requeued",
    "cancelled",
    "halted",
    "deadline",
    "watched",
    "resync",
)


def _resync_due(from_cache: bool) -> bool:
    """Whether this round lists the platform's Services, Secrets and claims (the resync of reconcile's copy
    of them): every round when reconcile does not read copies, else once per RECONCILE_RESYNC_SECONDS
    across all workers (the net under the copy)."""
    if not from_cache:
        return True
    seconds = int(settings.RECONCILE_RESYNC_SECONDS)
    if seconds <= 0:
        return True
    return cluster.resync_due(seconds)


def _needs_repair(pods: list[dict[str, Any]]) -> bool:
    """Whether the watcher's copy of the pods shows anything reconcile would act on: a pod nobody's attempt
    owns, a pod past its deletion deadline (stranded on a dead node?), pods of an attempt that is not
    active, or a decision about an active job. Side-effect free; reconcile then lists and acts."""
    now = timezone.now()
    active = {(j.pk, j.attempt): j for j in Job.objects.filter(status__in=ACTIVE).select_related("tenant")}
    facts, unowned = _pod_facts(pods, now, _runtimes(active))
    if unowned or any(cluster.deletion_overdue(p, now) for p in pods):
        return True
    if set(facts) - set(active):
        return True
    views = _views(active.values(), now)
    clocks = repair.Clocks(settings.LAUNCH_GRACE_SECONDS, settings.PENDING_TIMEOUT_SECONDS)
    nodes = cluster.node_names() if repair.needs_nodes(views, facts, clocks) else None
    room = cluster.node_room() if repair.needs_room(views, facts, clocks) else None
    return bool(repair.decide(views, facts, clocks, nodes, room))


def _runtimes(active: dict[repair.Key, Job]) -> dict[repair.Key, int | None]:
    """Each active attempt's max_runtime (seconds, None for none)."""
    return {key: job.spec.get("max_runtime_seconds") for key, job in active.items()}


def _views(jobs: Iterable[Job], now: datetime) -> list[repair.ActiveJob]:
    """Active jobs as reconcile's decisions see them."""
    return [
        repair.ActiveJob(
            id=job.pk,
            attempt=job.attempt,
            status=job.status,
            learners=job.learners,
            admitted_seconds_ago=(now - (job.admitted_at or now)).total_seconds(),
            placements=tuple(job.placements or ()),
            launching=launching(job, now),
            per_learner=(job.gpus, job.cpu_millis, job.memory_mib),
        )
        for job in jobs
    ]


def release_holds() -> int:
    """Let admission offer again the held jobs whose hold's cause changed: the quota that refused them
    reads differently now (raised, removed, or its use moved), their namespace is now this
    installation's (labelled on purpose) or no longer theirs (another TENANT_NAMESPACE_PREFIX), or the
    PriorityClass their overrides name now exists. Each cause
    is read once, however many jobs it holds (reconcile runs it)."""
    changed = []
    for key in held_keys():
        kind, _, rest = key.partition(":")
        try:
            if kind == "quota":
                namespace, name, fingerprint = rest.split(":", 2)
                # Held on no quota by name (the refusal named none): only the hold's time decides.
                if name and cluster.quota_fingerprint(namespace, name) != fingerprint:
                    changed.append(key)
            elif kind == "namespace":
                namespace, slug = rest.split(":", 1)
                # Another TENANT_NAMESPACE_PREFIX names another namespace; or this one was labelled.
                if namespace != cluster.tenant_namespace(slug) or cluster.namespace_owned(namespace, slug):
                    changed.append(key)
            elif kind == "priorityclass" and (not rest or cluster.priority_class_exists(rest)):
                changed.append(key)
        except ClusterError as exc:
            log.warning("could not look at what holds %s: %s", key, exc)
        except ValueError:
            changed.append(key)  # a key this version cannot read: the hold's time decides no more
    return holds_release(keys=changed)


def _pod_facts(
    pods: list[dict[str, Any]], now: datetime, runtimes: dict[repair.Key, int | None]
) -> tuple[dict[repair.Key, repair.PodFacts], list[dict[str, Any]]]:
    """What the cluster holds per attempt (learners with a pod, those not on a node, one that has run for
    its job's max_runtime: `runtimes`, per active attempt), and the pods that carry no job or attempt label
    (managed by us, yet nobody's: reconcile deletes them)."""
    live: dict[repair.Key, set[int]] = defaultdict(set)
    overdue: dict[repair.Key, int] = {}
    unbound: dict[repair.Key, list[int]] = defaultdict(list)
    unschedulable: dict[repair.Key, list[int]] = defaultdict(list)
    unowned = []
    for pod in pods:
        key = cluster.pod_owner(pod)
        if key is None:
            unowned.append(pod)
            continue
        learner = cluster.pod_learner(pod) or 0
        live[key].add(learner)
        if not pod.get("spec", {}).get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            unbound[key].append(learner)
            if _unschedulable(pod):
                unschedulable[key].append(learner)
        if key not in overdue and repair.past_max_runtime(pod, runtimes.get(key), now):
            overdue[key] = learner
    facts = {
        key: repair.PodFacts(
            learners=frozenset(learners),
            unbound=tuple(unbound.get(key, ())),
            overdue=overdue.get(key),
            unschedulable=tuple(unschedulable.get(key, ())),
        )
        for key, learners in live.items()
    }
    return facts, unowned


def _unschedulable(pod: dict[str, Any]) -> bool:
    """Whether the scheduler tried the pod and found no node for it (PodScheduled False, Unschedulable)."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return bool(condition.get("status") == "False" and condition.get("reason") == "Unschedulable")
    return False


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
        stopped = job_deadline_exceeded(job_id=job.pk, attempt=job.attempt, learner=decision.learner or 0)
        counts["deadline"] += stopped is not None
    elif decision.action == "teardown":
        teardown.delay(job.pk, job.attempt)  # again: a launch may have raced the first teardown
    elif decision.action == "requeue":
        counts["requeued"] += job_repair(job, decision.reason, decision.message)
    elif decision.action == "launch":
        launch.delay(job.pk, job.attempt)
        counts["relaunched"] += 1
    elif decision.action in ("cancelled", "halted"):
        counts[decision.action] += job_pods_gone(job_id=job.pk, attempt=job.attempt) is not None


def _remove_leftovers(resync: bool) -> int:
    """Tear down the Services and Secrets of attempts that are not active (a teardown that never ran or
    failed half-way), and delete the checkpoint claims of jobs whose rows are gone: as a resync lists them
    now (`resync`, which also replaces reconcile's copy), else as the copy has them. The cluster (or the
    copy) is read before the database: an attempt launched meanwhile is already active by then, never torn
    down; the teardown itself lists what it deletes, so a stale copy costs a few requests, never an object."""
    if resync:
        started = time.time()
        leftovers = cluster.leftover_attempts()
        claims = cluster.checkpoint_claims()
        cluster.resynced_leftovers(leftovers, claims, started)
    else:
        leftovers, claims = cluster.copied_leftovers()
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


@shared_task(name="jobs.tasks.telemetry", acks_late=True, soft_time_limit=30, time_limit=45)
def record_telemetry() -> dict[str, int]:
    """Record one telemetry look at every running job (beat runs it every TELEMETRY_INTERVAL_SECONDS)."""
    return telemetry_record_running()


@shared_task(name="jobs.tasks.outbox_drain", acks_late=True, soft_time_limit=30, time_limit=45)
def drain_outbox() -> int:
    """Send the tasks that waited in the outbox while the broker was down (beat: every OUTBOX_DRAIN_SECONDS)."""
    return outbox_drain()


@shared_task(name="jobs.tasks.autotune", acks_late=True, soft_time_limit=30, time_limit=45)
def autotune() -> dict[str, int]:
    """One tuner pass over running jobs that declare a range (beat: every TUNING_INTERVAL_SECONDS)."""
    return autotune_running()


@shared_task(name="jobs.tasks.idle_gpu", acks_late=True, soft_time_limit=30, time_limit=45)
def idle_gpu() -> dict[str, int]:
    """Flag, clear or halt running GPU jobs by their GPUs' idleness (beat: every IDLE_GPU_CHECK_SECONDS)."""
    return idle_gpu_check_running()

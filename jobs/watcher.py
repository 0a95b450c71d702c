"""The watch loop: one reflector over every managed pod turns pod events into job states, and one log
follower per learner stores its lines. Runs as its own process (`manage.py watch_cluster`).

Pod events are cached per pod; each event re-judges the whole attempt of its job (jobs/core/podstate.py) and
hands the verdict to jobs/services/lifecycle.py, which ignores anything stale. A job is only declared finished,
or sent back to the queue (its pods then torn down), after the followers of its ended pods have drained their
logs (bounded by LOG_DRAIN_SECONDS), so a finished job and a failed attempt have their full log; that wait
happens in a drainer thread, never in the watch loop, so no job's log holds up another's.

A deadline clock stops a job on time once a learner has run for its max_runtime (counted from the pod's
startTime, as the kubelet counts activeDeadlineSeconds): each pod event (re)arms it, a thread fires it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from common import telemetry
from jobs import cluster as jobs_cluster
from jobs.cluster import (
    Cluster,
    LogCursor,
    LogFollower,
    LogRecord,
    NodeCache,
    PodReflector,
    nodesummary,
    podsummary,
)
from jobs.core.choices import Reason, VerdictState
from jobs.core.podstate import LearnerView, Verdict, judge, view_from_pod
from jobs.core.reconcile import max_runtime_due
from jobs.core.states import ACTIVE, STOPPING, TERMINAL, JobStatus
from jobs.models import Job, Learner, LogLine
from jobs.services.lifecycle import (
    job_apply_verdict,
    job_deadline_exceeded,
    job_pods_gone,
    learner_node_unready,
    learner_update,
)
from jobs.services.logs import LogIngest, logs_append, logs_ingest

log = logging.getLogger(__name__)
FOLLOWER_BACKOFF = 1.0
FOLLOWER_BACKOFF_MAX = 30.0
FOLLOWER_CHECK_SECONDS = 1.0  # how often a follower asks whether its job has ended
TAIL_LINES = 20
DEADLINE_TICK = 0.2  # seconds: how late the deadline clock may fire at most
PULSE_SECONDS = 5.0
Key = tuple[str, int]


class Watcher:
    """Keeps job states and stored logs in step with the cluster's pods."""

    def __init__(self, cluster: Cluster, *, follow_logs: bool = True) -> None:
        self.cluster = cluster
        self.follow_logs = follow_logs
        self.pods: dict[Key, dict[str, dict[str, Any]]] = defaultdict(dict)
        # Learner indices whose pods this watcher has seen per attempt (kept across relists): a learner
        # pod missing from the cache is lost only if it was there before, not while a launch creates it.
        self.seen: dict[Key, set[int]] = defaultdict(set)
        # Managed pods with no job or attempt label (nobody's: reconcile deletes them), by namespace/name: in
        # the copy reconcile reads, so that it needs no list of its own to find them.
        self.unowned: dict[str, dict[str, Any]] = {}
        self.followers: dict[tuple[str, int, int], threading.Thread] = {}
        # Attempts whose pods have ended while their followers still store the log's last lines: a drainer
        # thread waits for those (bounded) and judges the attempt again, so the watch loop never waits.
        self.draining: dict[Key, threading.Thread] = {}
        self.drained: set[Key] = set()
        # The deadline clock: per attempt of a job with a max_runtime, when its first learner reaches it.
        self.deadlines: dict[Key, tuple[datetime, int]] = {}
        self.stop_event = threading.Event()
        self.lock = threading.RLock()
        self.pod_publisher: podsummary.Publisher | None = None
        self.reflector = PodReflector(
            cluster,
            on_sync=self.on_sync,
            on_event=self.on_event,
            relist_seconds=settings.WATCHER_RELIST_SECONDS,
            on_alive=lambda: telemetry.heartbeat("watcher"),
        )

    def run(self) -> None:
        """Watch until `stop()` (and, with NODE_CACHE_ENABLED, publish the node summary and the managed pods
        for reconcile); then stop every follower."""
        publishers = []
        if settings.NODE_CACHE_ENABLED:
            self.pod_publisher = podsummary.Publisher(
                jobs_cluster.installation_id(), self._snapshot, lambda: self.reflector.healthy
            )
            publishers = [
                threading.Thread(target=self._publish_nodes, name="node-summary", daemon=True),
                threading.Thread(
                    target=self.pod_publisher.run, args=(self.stop_event,), name="pod-summary", daemon=True
                ),
            ]
        for thread in publishers:
            thread.start()
        clock = threading.Thread(target=self._deadline_clock, name="deadline-clock", daemon=True)
        clock.start()
        pulser = threading.Thread(target=self._pulse, name="watcher-pulse", daemon=True)
        pulser.start()
        try:
            self.reflector.run(self.stop_event)
        finally:
            self.stop_event.set()
            clock.join(timeout=5)
            pulser.join(timeout=5)
            for thread in [*self.followers.values(), *self.draining.values()]:
                thread.join(timeout=5)
            for thread in publishers:
                thread.join(timeout=15)

    def _snapshot(self) -> list[dict[str, Any]]:
        """Every managed pod the watcher holds now, of an attempt or of nobody (what the pod summary
        publishes)."""
        with self.lock:
            return [pod for pods in self.pods.values() for pod in pods.values()] + list(self.unowned.values())

    def _pulse(self) -> None:
        """Every PULSE_SECONDS while the watch loop is healthy and has made progress lately (a list, a watch
        opened, an event: at least once per watch timeout), tell /readyz (common.telemetry.pulse). A dead
        watcher, or a loop stuck or failing, stops pulsing."""
        reflector = self.reflector
        while not self.stop_event.is_set():
            quiet = time.monotonic() - reflector.alive_at
            if reflector.healthy and quiet <= reflector.watch_timeout_seconds * 1.25 + PULSE_SECONDS * 3:
                telemetry.pulse("watcher")
            self.stop_event.wait(PULSE_SECONDS)

    def _publish_nodes(self) -> None:
        try:
            nodesummary.Publisher(
                lambda on_change: NodeCache(
                    self.cluster, on_change=on_change, relist_seconds=settings.WATCHER_RELIST_SECONDS
                ),
                jobs_cluster.installation_id(),
            ).run(self.stop_event)
        except Exception:
            log.exception("node summary publisher stopped; the cycle lists the cluster itself")
        finally:
            connection.close()

    def stop(self) -> None:
        self.stop_event.set()

    def on_sync(self, pods: list[dict[str, Any]]) -> None:
        """After a (re)list: replace the cache and re-judge every attempt with pods or an active job."""
        with self.lock:
            self.pods.clear()
            self.unowned.clear()
            for pod in pods:
                self._remember("ADDED", pod)
            keys = set(self.pods)
        if self.pod_publisher is not None:
            self.pod_publisher.changed()
        close_old_connections()
        keys |= set(Job.objects.filter(status__in=ACTIVE).values_list("pk", "attempt"))
        for key in sorted(keys):
            self._evaluate(key)

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        """One pod changed: update the cache and re-judge its job's attempt."""
        telemetry.observe_pod_event(kind, pod)
        with self.lock:
            key = self._remember(kind, pod)
        if self.pod_publisher is not None:
            self.pod_publisher.changed()
        if key is not None:
            close_old_connections()
            self._evaluate(key)

    def _remember(self, kind: str, pod: dict[str, Any]) -> Key | None:
        key = jobs_cluster.pod_owner(pod)
        if key is None:
            where = f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"
            if kind == "DELETED":
                self.unowned.pop(where, None)
            else:
                self.unowned[where] = pod
            return None
        name = pod["metadata"]["name"]
        index = jobs_cluster.pod_learner(pod)
        if index is not None:
            self.seen[key].add(index)
        if kind == "DELETED":
            self.pods[key].pop(name, None)
        else:
            self.pods[key][name] = pod
        return key

    def _evaluate(self, key: Key) -> None:
        job_id, attempt = key
        job = Job.objects.select_related("tenant").filter(pk=job_id).first()
        if job is None or job.attempt != attempt or job.status not in ACTIVE:
            with self.lock:
                self.seen.pop(key, None)
                self.drained.discard(key)
                self.deadlines.pop(key, None)
            return
        with self.lock:
            pods = list(self.pods.get(key, {}).values())
            seen = set(self.seen.get(key, ()))
        views = []
        for pod in pods:
            index = jobs_cluster.pod_learner(pod)
            if index is None:
                continue
            view = view_from_pod(pod, index)
            views.append(view)
            learner_update(job_id=job_id, attempt=attempt, view=view)
            if view.node_unready:
                learner_node_unready(job_id=job_id, attempt=attempt, view=view)
            if self.follow_logs and view.phase in ("Running", "Succeeded", "Failed"):
                self._ensure_follower(job, index, pod["metadata"]["name"])
        if self._past_deadline(job, pods):
            return
        if job.status in STOPPING and not views:
            # A halt's, a preemption's or a deadline's SIGTERM handler prints its last words (a checkpoint
            # saved) while the pod terminates: they are stored before the job moves on. A cancel waits not.
            if job.status == JobStatus.HALTING and not self._drained(key):
                return
            job_pods_gone(job_id=job_id, attempt=attempt)
            return
        # Every learner of a running job has had its pod; a starting one may still be being launched.
        existed = seen if job.status == JobStatus.STARTING else None
        verdict = judge(views, job.learners, existed=existed)
        if verdict.reason == Reason.UNSCHEDULABLE and not (
            job.reason == Reason.UNSCHEDULABLE and job.message.startswith(verdict.message)
        ):
            verdict = _with_claims(verdict, pods)
        tail: list[str] = []
        if verdict.state in (VerdictState.SUCCEEDED, VerdictState.FAILED):
            if not self._drained(key):
                return
            if verdict.state == VerdictState.FAILED and verdict.learner is not None:
                tail = log_tail(job_id, verdict.learner)
        elif verdict.state == VerdictState.REQUEUE and not self._drained(key, _ended(views)):
            return  # the teardown that follows the requeue would cut the ended pods' logs short
        job_apply_verdict(job_id=job_id, attempt=attempt, verdict=verdict, log_tail=tail)

    def _ensure_follower(self, job: Job, index: int, pod_name: str) -> None:
        key = (job.pk, job.attempt, index)
        with self.lock:
            if key in self.followers:
                return
            learner = Learner.objects.filter(job=job, attempt=job.attempt, index=index).first()
            if learner is None or learner.log_done:
                return
            thread = threading.Thread(
                target=self._follow,
                args=(job.pk, job.attempt, index, jobs_cluster.namespace_for(job.tenant), pod_name, learner),
                name=f"logs-{job.pk}-{job.attempt}-{index}",
                daemon=True,
            )
            self.followers[key] = thread
        thread.start()

    def _follow(
        self, job_id: str, attempt: int, index: int, namespace: str, pod: str, learner: Learner
    ) -> None:
        """Store a learner's log until its pod ends. A failure (the database went away mid-batch) does not
        end the follower: it backs off and resumes from the last stored cursor, so no line is lost or
        stored twice. A follower whose learner is gone (its job was deleted) ends, and so does one still
        reading (a flood's backlog) once its job has ended: a finished job waited for its log already."""
        ingest: LogIngest | None = None
        checked = time.monotonic()

        def store(records: list[LogRecord], cursor: LogCursor) -> None:
            nonlocal checked
            if time.monotonic() - checked >= FOLLOWER_CHECK_SECONDS:
                checked = time.monotonic()
                if job_over(job_id):
                    raise FollowerDone
            logs_append(
                job_id=job_id,
                attempt=attempt,
                learner=index,
                records=[(r.ts, r.text) for r in records],
                cursor=(cursor.ts, cursor.seen_at_ts),
                ingest=ingest,
            )

        backoff = FOLLOWER_BACKOFF
        try:
            while not self.stop_event.is_set():
                try:
                    ingest = logs_ingest(job_id=job_id, attempt=attempt, learner=index)
                    learner.refresh_from_db(fields=["log_cursor_ts", "log_cursor_seen"])
                    start = LogCursor(ts=learner.log_cursor_ts, seen_at_ts=learner.log_cursor_seen)
                    follower = LogFollower(
                        self.cluster, namespace=namespace, pod=pod, cursor=start, on_batch=store
                    )
                    end = follower.run(self.stop_event)
                    if not self.stop_event.is_set():
                        logs_append(
                            job_id=job_id,
                            attempt=attempt,
                            learner=index,
                            records=[],
                            cursor=(end.ts, end.seen_at_ts),
                            done=True,
                            ingest=ingest,
                        )
                    return
                except FollowerDone:
                    log.info(
                        "log follower for %s/%s learner %s ends: its job has ended", job_id, attempt, index
                    )
                    return
                except Exception:
                    connection.close()
                    if learner_gone(job_id, attempt, index):
                        log.info(
                            "log follower for %s/%s learner %s ends: its job is gone", job_id, attempt, index
                        )
                        return
                    log.exception(
                        "log follower for %s/%s learner %s failed; resuming in %.0f s",
                        job_id,
                        attempt,
                        index,
                        backoff,
                    )
                    self.stop_event.wait(backoff)
                    backoff = min(backoff * 2, FOLLOWER_BACKOFF_MAX)
        finally:
            connection.close()

    def _past_deadline(self, job: Job, pods: list[dict[str, Any]]) -> bool:
        """Arm the deadline clock for a starting or running job with a max_runtime (disarm it otherwise);
        stop the job now if a learner has already run for it. True when it was stopped."""
        key: Key = (job.pk, job.attempt)
        runtime = job.spec.get("max_runtime_seconds")
        due: tuple[datetime, int] | None = None
        if runtime and job.status in (JobStatus.STARTING, JobStatus.RUNNING):
            for pod in pods:
                when, index = max_runtime_due(pod, runtime), jobs_cluster.pod_learner(pod)
                if when is not None and index is not None and (due is None or when < due[0]):
                    due = (when, index)
        with self.lock:
            if due is None:
                self.deadlines.pop(key, None)
                return False
            if due[0] > timezone.now():
                self.deadlines[key] = due
                return False
            self.deadlines.pop(key, None)
        job_deadline_exceeded(job_id=job.pk, attempt=job.attempt, learner=due[1])
        return True

    def _deadline_clock(self) -> None:
        """Stop each job whose learner reaches its max_runtime within DEADLINE_TICK of the moment, rather
        than at the next pod event or reconcile pass (the job then ends as a halt does, see lifecycle)."""
        try:
            while not self.stop_event.wait(DEADLINE_TICK):
                now = timezone.now()
                with self.lock:
                    due = [(key, learner) for key, (when, learner) in self.deadlines.items() if when <= now]
                    for key, _ in due:
                        del self.deadlines[key]
                for (job_id, attempt), learner in due:
                    try:
                        close_old_connections()
                        job_deadline_exceeded(job_id=job_id, attempt=attempt, learner=learner)
                    except Exception:
                        log.exception(
                            "stopping %s/%s at its max_runtime failed; reconcile does it", job_id, attempt
                        )
        finally:
            connection.close()

    def _drained(self, key: Key, learners: set[int] | None = None) -> bool:
        """Whether the attempt's followers (those of `learners` only, when given) have stored their logs to the
        end (or had LOG_DRAIN_SECONDS to); if not, a drainer thread (one per attempt) waits for them and then
        judges the attempt again, so that a job whose log is still being read, a flood's backlog say, holds up
        no other job's events."""
        with self.lock:
            if key in self.drained:
                return True
            threads = [
                t
                for (j, a, i), t in self.followers.items()
                if (j, a) == key and t.is_alive() and (learners is None or i in learners)
            ]
            if not threads:
                for done in [k for k, t in self.followers.items() if k[:2] == key and not t.is_alive()]:
                    del self.followers[done]
                return True
            if key not in self.draining:
                drainer = threading.Thread(
                    target=self._drain_then_judge,
                    args=(key, threads),
                    name=f"drain-{key[0]}-{key[1]}",
                    daemon=True,
                )
                self.draining[key] = drainer
                drainer.start()
        return False

    def _drain_then_judge(self, key: Key, threads: list[threading.Thread]) -> None:
        deadline = time.monotonic() + settings.LOG_DRAIN_SECONDS
        for thread in threads:
            while thread.is_alive() and time.monotonic() < deadline and not self.stop_event.is_set():
                thread.join(timeout=0.1)
        with self.lock:
            self.drained.add(key)
            self.draining.pop(key, None)
        if self.stop_event.is_set():
            return
        try:
            close_old_connections()
            self._evaluate(key)
        except Exception:
            log.exception("judging %s/%s after its logs were drained failed; the next relist does it", *key)
        finally:
            connection.close()


def _ended(views: list[LearnerView]) -> set[int]:
    """The learners whose pods have ended and whose logs can still be read to the end: not those their node
    lost (gone, or not answering: PodGC's DeletionByPodGC, a container the node lost), whose kubelet has no
    more of the log to give, so waiting for them would only delay the requeue."""
    return {
        view.index
        for view in views
        if view.phase in ("Succeeded", "Failed")
        and not (view.container_lost or view.node_unready or view.pod_reason == "DeletionByPodGC")
    }


def _with_claims(verdict: Verdict, pods: list[dict[str, Any]]) -> Verdict:
    """An Unschedulable verdict about claims (the scheduler names neither the claim nor why it waits)
    with the state of the learner's unbound claims added; asked when the scheduler's words change, not on
    every event."""
    if "persistentvolumeclaim" not in verdict.message.lower():
        return verdict
    pod = next((p for p in pods if jobs_cluster.pod_learner(p) == verdict.learner), None)
    problems = jobs_cluster.unbound_claims(pod) if pod is not None else []
    if not problems:
        return verdict
    return dataclasses.replace(verdict, message=f"{verdict.message} [{'; '.join(problems)}]")


class FollowerDone(Exception):
    """Raised from a follower's batch callback to end it: its job has ended."""


def job_over(job_id: str) -> bool:
    """Whether a job has ended or no longer exists; False while the database cannot say."""
    try:
        status = Job.objects.filter(pk=job_id).values_list("status", flat=True).first()
    except Exception:
        connection.close()
        return False
    return status is None or status in TERMINAL


def learner_gone(job_id: str, attempt: int, index: int) -> bool:
    """Whether a learner's row no longer exists (its job was deleted); False while the database cannot say."""
    try:
        return not Learner.objects.filter(job_id=job_id, attempt=attempt, index=index).exists()
    except Exception:
        connection.close()
        return False


def log_tail(job_id: str, learner: int, lines: int = TAIL_LINES) -> list[str]:
    """The last lines a learner printed, as stored."""
    rows = LogLine.objects.filter(job_id=job_id, learner=learner).order_by("-seq")[:lines]
    return [row.text for row in reversed(rows)]

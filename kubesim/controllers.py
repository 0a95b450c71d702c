"""Controllers: Jobs, garbage collection by ownerReferences, namespaces, quota usage."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kubesim import admission, resources
from kubesim.deletion import FOREGROUND
from kubesim.errors import ApiError
from kubesim.meta import random_suffix
from kubesim.podstatus import set_condition as _set_condition
from kubesim.quantity import format_amount
from kubesim.runtime import now_rfc3339
from kubesim.selectors import labels_match, selector_from_label_selector_object
from kubesim.store import Obj, clone

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def _ranges(indexes: list[int]) -> str:
    parts: list[str] = []
    for index in sorted(set(indexes)):
        if parts and parts[-1].split("-")[-1] == str(index - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{index}"
        else:
            parts.append(str(index))
    return ",".join(parts)


def _parse_ranges(text: str) -> list[int]:
    indexes: list[int] = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        indexes.extend(range(int(first), int(last or first) + 1))
    return indexes


def _restored_counts(status: Obj, pods: list[Obj]) -> dict[str, str]:
    """What a Job's stored status counted of pods that are gone now (kubesim restarted since): the status
    keeps the counts, as the job controller's tracking finalizers make a real cluster keep them."""
    present = [(p.get("status") or {}).get("phase") for p in pods]
    done = {_index(p) for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"}
    indexes = [i for i in _parse_ranges(status.get("completedIndexes") or "") if str(i) not in done]
    gone = {p: max(int(status.get(p.lower()) or 0) - present.count(p), 0) for p in ("Succeeded", "Failed")}
    values = [f"Succeeded:{i}" for i in indexes][: gone["Succeeded"]]
    values += ["Succeeded:"] * (gone["Succeeded"] - len(values)) + ["Failed:"] * gone["Failed"]
    return {f"restored-{n}": value for n, value in enumerate(values)}


class JobController:
    """Creates pods for Jobs (NonIndexed and Indexed), counts outcomes and sets Complete/Failed."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        self.counted: dict[str, dict[str, str]] = {}

    def step(self) -> None:
        """Reconcile every unfinished Job."""
        store = self.cluster.store
        jobs, _ = store.list("jobs")
        pods, _ = store.list("pods")
        by_owner: dict[str, list[Obj]] = {}
        for pod in pods:
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Job" and ref.get("controller"):
                    by_owner.setdefault(ref["uid"], []).append(pod)
        for job in jobs:
            if not job["metadata"].get("deletionTimestamp"):
                self._sync(job, by_owner.get(job["metadata"]["uid"], []))

    def _sync(self, job: Obj, pods: list[Obj]) -> None:
        """Bring one unfinished Job's status up to date with its pods, then finish it or create the
        pods it still lacks (unless suspended)."""
        meta, spec = job["metadata"], job["spec"]
        status = job.get("status") or {}
        if any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True"
            for c in status.get("conditions") or []
        ):
            return
        counted = self._count_finished_pods(meta["uid"], status, pods)
        succeeded_idx = [
            int(v.split(":")[1]) for v in counted.values() if v.startswith("Succeeded:") and v.split(":")[1]
        ]
        succeeded = sum(1 for v in counted.values() if v.startswith("Succeeded"))
        failed = sum(1 for v in counted.values() if v.startswith("Failed"))
        active = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in admission.TERMINAL
            and not p["metadata"].get("deletionTimestamp")
        ]
        indexed = spec.get("completionMode") == "Indexed"
        done_count = len(set(succeeded_idx)) if indexed else succeeded
        new_status: Obj = clone(status)
        new_status.setdefault("startTime", now_rfc3339())
        new_status.update(
            active=len(active),
            succeeded=succeeded,
            failed=failed,
            ready=sum(1 for p in active if (p.get("status") or {}).get("phase") == "Running"),
            terminating=sum(1 for p in pods if p["metadata"].get("deletionTimestamp")),
        )
        if indexed:
            new_status["completedIndexes"] = _ranges(succeeded_idx)
        finished = _verdict(job, active, failed=failed, succeeded=succeeded, done_count=done_count)
        if finished:
            self._finish(job, new_status, counted, active, finished)
        elif not spec.get("suspend"):
            self._create_missing(job, active, done_count, set(succeeded_idx))
        if new_status != status:
            self.cluster.api.mutate(
                "jobs", meta["namespace"], meta["name"], lambda j: j.__setitem__("status", new_status)
            )

    def _count_finished_pods(self, job_uid: str, status: Obj, pods: list[Obj]) -> dict[str, str]:
        """The Job's finished pods (pod uid -> "Phase:index"), counted once each as the job controller's
        uncounted-pods tracking does, so a finished pod deleted later still counts."""
        if job_uid not in self.counted:
            self.counted[job_uid] = _restored_counts(status, pods)
        counted = self.counted[job_uid]
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                counted.setdefault(pod["metadata"]["uid"], phase + ":" + _index(pod))
        return counted

    def _finish(
        self,
        job: Obj,
        new_status: Obj,
        counted: dict[str, str],
        active: list[Obj],
        finished: tuple[str, str, str],
    ) -> None:
        """End a Job: delete its active pods (counted as failed when it failed), set the helper and final
        conditions in `new_status`, and record the event."""
        kind, reason, message = finished
        for pod in active:
            self._delete_pod(pod)
            if kind == "Failed":
                counted.setdefault(pod["metadata"]["uid"], "Failed:" + _index(pod))
        new_status["active"] = 0
        new_status["failed"] = sum(1 for v in counted.values() if v.startswith("Failed"))
        helper = "FailureTarget" if kind == "Failed" else "SuccessCriteriaMet"
        _set_condition(new_status, helper, True, reason or "CompletionsReached", message)
        _set_condition(new_status, kind, True, reason, message)
        if kind == "Complete":
            new_status["completionTime"] = now_rfc3339()
        self.cluster.api.record_event(
            job,
            "Normal" if kind == "Complete" else "Warning",
            reason or "Completed",
            message or "Job completed",
            "job-controller",
        )

    def _create_missing(self, job: Obj, active: list[Obj], done: int, succeeded_idx: set[int]) -> None:
        spec = job["spec"]
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        if spec.get("completionMode") == "Indexed":
            busy = {int(_index(p)) for p in active if _index(p)}
            todo = [i for i in range(completions or 0) if i not in succeeded_idx and i not in busy]
            for index in todo[: max(parallelism - len(active), 0)]:
                self._create_pod(job, index)
            return
        wanted = parallelism if completions is None else min(parallelism, completions - done)
        for _ in range(max(wanted - len(active), 0)):
            self._create_pod(job, None)

    def _create_pod(self, job: Obj, index: int | None) -> None:
        meta = job["metadata"]
        template = clone(job["spec"].get("template") or {})
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": template.get("metadata") or {},
            "spec": template.get("spec") or {},
        }
        pmeta = pod["metadata"]
        prefix = f"{meta['name']}-" if index is None else f"{meta['name']}-{index}-"
        pmeta["generateName"] = prefix
        pmeta["name"] = prefix + random_suffix()
        pmeta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        if index is not None:
            pmeta.setdefault("annotations", {})[INDEX_KEY] = str(index)
            pmeta.setdefault("labels", {})[INDEX_KEY] = str(index)
            pod["spec"]["hostname"] = f"{meta['name']}-{index}"
            for container in pod["spec"].get("containers") or []:
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    env.append(
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}},
                        }
                    )
        pods_res = resources.find("", "v1", "pods")
        assert pods_res is not None
        try:
            created = self.cluster.api.create(pods_res, meta["namespace"], pod)
        except ApiError as exc:
            self.cluster.api.record_event(
                job, "Warning", "FailedCreate", f"Error creating: {exc.message}", "job-controller"
            )
            return
        self.cluster.api.record_event(
            job, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}", "job-controller"
        )

    def _delete_pod(self, pod: Obj) -> None:
        pods_res = resources.find("", "v1", "pods")
        assert pods_res is not None
        with contextlib.suppress(ApiError):
            self.cluster.api.delete(pods_res, pod["metadata"]["namespace"], pod["metadata"]["name"], {})


def _verdict(
    job: Obj, active: list[Obj], *, failed: int, succeeded: int, done_count: int
) -> tuple[str, str, str] | None:
    """Whether the Job has finished, as (condition, reason, message): Failed past its backoff limit,
    Complete once its completions are done (or, without completions, once a pod succeeded and none
    is left running); None while it goes on."""
    spec = job["spec"]
    completions = spec.get("completions")
    if failed > spec.get("backoffLimit", 6) or _past_backoff_on_failure(job, active):
        return ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    if (completions is not None and done_count >= completions) or (
        completions is None and succeeded > 0 and not active
    ):
        return ("Complete", "", "")
    return None


def _past_backoff_on_failure(job: Obj, active: list[Obj]) -> bool:
    """Under restartPolicy OnFailure failed containers restart in place, so (as in the job controller's
    ``pastBackoffLimitOnFailure``) the restarts of the active pods count toward backoffLimit."""
    template_spec = (job["spec"].get("template") or {}).get("spec") or {}
    if template_spec.get("restartPolicy") != "OnFailure":
        return False
    restarts = sum(
        int(cs.get("restartCount", 0))
        for pod in active
        if (pod.get("status") or {}).get("phase") in ("Pending", "Running")
        for cs in ((pod.get("status") or {}).get("initContainerStatuses") or [])
        + ((pod.get("status") or {}).get("containerStatuses") or [])
    )
    limit = int(job["spec"].get("backoffLimit", 6))
    return restarts > 0 if limit == 0 else restarts >= limit


def _index(pod: Obj) -> str:
    return str((pod["metadata"].get("annotations") or {}).get(INDEX_KEY, ""))


class GarbageCollector:
    """Deletes dependents whose owners are gone, and finishes Foreground deletions."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def step(self) -> None:
        """One collection pass over all stored objects."""
        store = self.cluster.store
        with store.lock:
            plurals = list(store._objects)
            everything = [(p, o) for p in plurals for o in store.list(p)[0]]
        uids = {o["metadata"]["uid"]: (p, o) for p, o in everything}
        dependents: dict[str, list[tuple[str, Obj]]] = {}
        for plural, obj in everything:
            for ref in obj["metadata"].get("ownerReferences") or []:
                dependents.setdefault(ref["uid"], []).append((plural, obj))
        for plural, obj in everything:
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and all(r["uid"] not in uids for r in refs):
                self._delete(plural, obj, "Background")
        for uid, (plural, owner) in uids.items():
            meta = owner["metadata"]
            if FOREGROUND not in (meta.get("finalizers") or []) or not meta.get("deletionTimestamp"):
                continue
            children = dependents.get(uid, [])
            for child_plural, child in children:
                if not child["metadata"].get("deletionTimestamp"):
                    self._delete(child_plural, child, "Foreground")
            if not children:
                res = self._resource(plural)
                self.cluster.api.mutate(
                    plural,
                    meta.get("namespace", ""),
                    meta["name"],
                    lambda o: o["metadata"].__setitem__(
                        "finalizers", [f for f in o["metadata"]["finalizers"] if f != FOREGROUND]
                    ),
                )
                current = self.cluster.store.get(plural, meta.get("namespace", ""), meta["name"])
                if current is not None and not current["metadata"].get("finalizers") and res is not None:
                    self.cluster.api.write(res, current)

    def _resource(self, plural: str) -> resources.Resource | None:
        return next((r for r in resources.RESOURCES if r.plural == plural and r.stored), None)

    def _delete(self, plural: str, obj: Obj, policy: str) -> None:
        res = self._resource(plural)
        if res is None:
            return
        with contextlib.suppress(ApiError):
            self.cluster.api.delete(
                res, obj["metadata"].get("namespace"), obj["metadata"]["name"], {"propagationPolicy": policy}
            )


class NamespaceController:
    """Empties Terminating namespaces, then removes them; gives each namespace a default ServiceAccount."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def step(self) -> None:
        """Reconcile namespaces."""
        store = self.cluster.store
        for ns in list(store.list("namespaces")[0]):
            name = ns["metadata"]["name"]
            if not ns["metadata"].get("deletionTimestamp"):
                if store.peek("serviceaccounts", name, "default") is None:
                    sa = resources.find("", "v1", "serviceaccounts")
                    assert sa is not None
                    with contextlib.suppress(ApiError):
                        self.cluster.api.create(sa, name, {"metadata": {"name": "default"}})
                continue
            remaining = 0
            for res in resources.RESOURCES:
                if not res.namespaced or not res.stored:
                    continue
                for obj in list(store.list(res.plural, name)[0]):
                    remaining += 1
                    if not obj["metadata"].get("deletionTimestamp"):
                        with contextlib.suppress(ApiError):
                            self.cluster.api.delete(res, name, obj["metadata"]["name"], {})
            if not remaining:
                store.remove("namespaces", "", name)
                self.cluster.api._notify()


class QuotaController:
    """Keeps ``status.hard`` and ``status.used`` of ResourceQuotas up to date."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def step(self) -> None:
        """Recompute usage for every quota."""
        store = self.cluster.store
        for quota in list(store.list("resourcequotas")[0]):
            ns = quota["metadata"]["namespace"]
            pods = store.list("pods", ns)[0]
            counts = {
                f"count/{p}": len(store.list(p, ns)[0]) for p in ("pods", "services", "secrets", "configmaps")
            }
            counts.update({p: len(store.list(p, ns)[0]) for p in ("services", "secrets", "configmaps")})
            counts["count/jobs.batch"] = len(store.list("jobs", ns)[0])
            claims = store.list("persistentvolumeclaims", ns)[0]
            used = admission.quota_used(quota, pods, counts, claims)
            hard = dict((quota.get("spec") or {}).get("hard") or {})
            wanted: dict[str, Any] = {"hard": hard, "used": {k: format_amount(k, v) for k, v in used.items()}}
            if quota.get("status") != wanted:
                self.cluster.api.mutate(
                    "resourcequotas",
                    ns,
                    quota["metadata"]["name"],
                    _status_setter(wanted),
                )


def _status_setter(status: Obj) -> Callable[[Obj], None]:
    return lambda obj: obj.__setitem__("status", status)


__all__ = [
    "GarbageCollector",
    "JobController",
    "NamespaceController",
    "QuotaController",
    "labels_match",
    "selector_from_label_selector_object",
]

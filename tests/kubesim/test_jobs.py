"""batch/v1 Jobs and garbage collection by ownerReferences."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.kubesim.conftest import name_of, wait_for


def _job(name: str, command: list[str], restart_policy: str = "Never", **spec: Any) -> client.V1Job:
    template = client.V1PodTemplateSpec(
        spec=client.V1PodSpec(
            restart_policy=restart_policy,
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="w", image="trainer", command=command)],
        )
    )
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name), spec=client.V1JobSpec(template=template, **spec)
    )


def _condition(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    status = batch.read_namespaced_job(name, ns).status
    done = [
        c.type for c in status.conditions or [] if c.type in ("Complete", "Failed") and c.status == "True"
    ]
    return done[0] if done else None


def test_job_with_completions_and_parallelism_completes(
    batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, _job("par", ["true"], completions=3, parallelism=2))
    assert wait_for(lambda: _condition(batch, ns, "par")) == "Complete"
    job = batch.read_namespaced_job("par", ns)
    assert job.status.succeeded == 3 and job.status.completion_time is not None
    pods = core.list_namespaced_pod(ns, label_selector="job-name=par").items
    assert len(pods) == 3
    assert all(p.metadata.owner_references[0].uid == job.metadata.uid for p in pods)


def test_indexed_job_sets_completion_index(batch: client.BatchV1Api, core: client.CoreV1Api, ns: str) -> None:
    batch.create_namespaced_job(
        ns,
        _job(
            "idx",
            ["sh", "-c", "echo index=$JOB_COMPLETION_INDEX"],
            completions=3,
            parallelism=3,
            completion_mode="Indexed",
        ),
    )
    assert wait_for(lambda: _condition(batch, ns, "idx")) == "Complete"
    assert batch.read_namespaced_job("idx", ns).status.completed_indexes == "0-2"
    logs = set()
    for pod in core.list_namespaced_pod(ns, label_selector="job-name=idx").items:
        index = pod.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        assert core.read_namespaced_pod_log(name_of(pod), ns) == f"index={index}\n"
        logs.add(index)
    assert logs == {"0", "1", "2"}


def test_job_fails_after_backoff_limit(batch: client.BatchV1Api, ns: str) -> None:
    batch.create_namespaced_job(ns, _job("boom", ["false"], backoff_limit=1))
    assert wait_for(lambda: _condition(batch, ns, "boom")) == "Failed"
    job = batch.read_namespaced_job("boom", ns)
    assert job.status.failed == 2
    assert [c.reason for c in job.status.conditions if c.type == "Failed"] == ["BackoffLimitExceeded"]


def test_on_failure_restarts_count_toward_backoff_limit(
    batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, _job("crashy", ["false"], restart_policy="OnFailure", backoff_limit=2))
    assert wait_for(lambda: _condition(batch, ns, "crashy")) == "Failed"
    job = batch.read_namespaced_job("crashy", ns)
    failed = [c for c in job.status.conditions if c.type == "Failed"]
    assert [(c.reason, c.message) for c in failed] == [
        ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    ]
    assert job.status.active == 0 and job.status.failed == 1
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=crashy").items
    assert len([e for e in events if e.reason == "SuccessfulCreate"]) == 1  # restarted in place, not replaced


def _log(core: client.CoreV1Api, ns: str, pod: str) -> str:
    """The pod's log so far ("" while its container has not started)."""
    try:
        return str(core.read_namespaced_pod_log(pod, ns))
    except ApiException:
        return ""


def _pod_names(core: client.CoreV1Api, ns: str, job: str) -> list[str]:
    return [name_of(p) for p in core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items]


def test_background_deletion_collects_job_pods(
    batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, _job("bg", ["sleep", "30"]))
    wait_for(lambda: _pod_names(core, ns, "bg"))
    batch.delete_namespaced_job("bg", ns, propagation_policy="Background")
    wait_for(lambda: not _pod_names(core, ns, "bg"))


def test_foreground_deletion_waits_for_dependents(
    batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(30)"
    )
    batch.create_namespaced_job(ns, _job("fg", ["python", "-c", stubborn]))
    # Only a pod whose process already ignores SIGTERM holds the job up: one not yet started (or still
    # starting python) goes at once, as on a cluster, and the job with it.
    [pod] = wait_for(lambda: _pod_names(core, ns, "fg"))
    wait_for(lambda: "ready" in _log(core, ns, pod))
    batch.delete_namespaced_job("fg", ns, body=client.V1DeleteOptions(propagation_policy="Foreground"))
    job = batch.read_namespaced_job("fg", ns)
    assert job.metadata.deletion_timestamp and "foregroundDeletion" in job.metadata.finalizers

    def job_gone() -> bool:
        try:
            batch.read_namespaced_job("fg", ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(job_gone)
    assert not _pod_names(core, ns, "fg")


def test_orphan_deletion_keeps_pods_without_owner(
    batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, _job("orph", ["sleep", "30"]))
    wait_for(lambda: _pod_names(core, ns, "orph"))
    batch.delete_namespaced_job("orph", ns, propagation_policy="Orphan")
    pods = core.list_namespaced_pod(ns, label_selector="job-name=orph").items
    assert pods and not pods[0].metadata.owner_references
    core.delete_namespaced_pod(name_of(pods[0]), ns, grace_period_seconds=0)

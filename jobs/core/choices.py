"""The jobs app's vocabulary: job states, the kinds of JobEvent, the verdicts pods imply and the reasons the
platform itself gives (pure: no Django, so the core may use it; the model takes `JobStatus.choices`).
Reasons from Kubernetes (OOMKilled, Evicted, ErrImagePull, …) pass through as the cluster spells them;
these are the platform's own. How a job may move between states is in `jobs.core.states`; each state's
badge colour is the `badge-<state>` rule in static/css/app.css (the live page sets the same class)."""

from __future__ import annotations

from enum import EnumType, StrEnum
from typing import Any


class _ChoicesType(EnumType):
    """What Django's TextChoices offer on the class (`values`, `choices`), without importing Django."""

    @property
    def values(cls) -> list[str]:
        members: list[Any] = list(cls)
        return [str(member) for member in members]

    @property
    def choices(cls) -> list[tuple[str, str]]:
        members: list[Any] = list(cls)
        return [(str(member), member.label) for member in members]


class JobStatus(StrEnum, metaclass=_ChoicesType):
    """Where a job is in its life; `jobs.core.states.TRANSITIONS` says how it moves."""

    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    HALTING = "halting"
    HALTED = "halted"
    REQUEUED = "requeued"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def label(self) -> str:
        """How pages name the state (the model's `get_status_display`)."""
        return self.value.capitalize()


class EventKind(StrEnum):
    """What a JobEvent records."""

    SUBMITTED = "submitted"  # the job was stored
    TRANSITION = "transition"  # the job changed state
    SCHEDULING = "scheduling"  # why it waits (queue position, reason)
    POD = "pod"  # something its pods did (created, a verdict, a node going silent)
    RETRY = "retry"  # it is a retry of another job
    RESULTS = "results"  # a learner uploaded its results
    TUNING = "tuning"  # the tuner's evidence and decision
    TENSORBOARD = "tensorboard"  # a learner's TensorBoard event file could not be read
    LABELS = "labels"  # a person changed its experiment or tags
    GPU = "gpu"  # its GPUs went idle, or busy again (jobs/services/idlegpu.py)
    CAPS = "caps"  # an attempt reached a cap on what it writes (jobs/services/caps.py)
    LOGS = "logs"  # a learner's log hit a cap and was truncated (jobs/services/logs.py)


class VerdictState(StrEnum):
    """The job state a job's pods imply (`podstate.judge`); the write layer acts on it."""

    STARTING = "starting"  # pods being created, pending or unschedulable
    RUNNING = "running"  # every learner runs
    SUCCEEDED = "succeeded"  # every learner exited 0
    FAILED = "failed"  # the user's fault: a non-zero exit, a bad image, out of memory
    REQUEUE = "requeue"  # the infrastructure's fault: run it again without using a retry


class Reason(StrEnum):
    """Why a job is where it is, as the platform says it (JobEvent.reason, Job.reason)."""

    # submit and the queue
    SUBMITTED = "Submitted"
    WAITING = "Waiting"
    ADMITTED = "Admitted"
    RETRY_OF = "RetryOf"
    # launch
    PODS_CREATED = "PodsCreated"
    PODS_NOT_CREATED = "PodsNotCreated"
    PODS_PENDING = "PodsPending"
    UNSCHEDULABLE = "Unschedulable"
    PENDING_TIMEOUT = "PendingTimeout"
    QUOTA_BUSY = "QuotaBusy"
    NAMESPACE_NOT_OWNED = "NamespaceNotOwned"
    PRIORITY_CLASS_MISSING = "PriorityClassMissing"
    LAUNCH_REFUSED = "LaunchRefused"
    INVALID_SPEC = "InvalidSpec"
    ENDPOINT_REFUSED = "EndpointRefused"
    CLUSTER_UNAVAILABLE = "ClusterUnavailable"
    NODE_GONE = "NodeGone"
    NODE_TAKEN = "NodeTaken"
    FETCH_FAILED = "FetchFailed"
    INIT_CONTAINER_FAILED = "InitContainerFailed"
    # running and ending
    RUNNING = "Running"
    COMPLETED = "Completed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    NODE_NOT_READY = "NodeNotReady"
    POD_LOST = "PodLost"
    POD_DELETED = "PodDeleted"
    CONTAINER_LOST = "ContainerLost"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    DISRUPTION_BUDGET_EXHAUSTED = "DisruptionBudgetExhausted"
    RESULTS_UPLOADED = "ResultsUploaded"
    RESULTS_REFUSED = (
        "ResultsRefused"  # files the platform refused (too large, past a cap), as the launcher told
    )
    TUNED = "Tuned"
    EVENT_FILE_DAMAGED = "EventFileDamaged"
    # caps on what one attempt writes (jobs/services/caps.py)
    RESULT_FILES_CAPPED = "ResultFilesCapped"
    RESULT_BYTES_CAPPED = "ResultBytesCapped"
    POD_REPORTS_CAPPED = "PodReportsCapped"
    TENSORBOARD_BYTES_CAPPED = "TensorBoardBytesCapped"
    TENSORBOARD_ROWS_CAPPED = "TensorBoardRowsCapped"
    IDLE_GPU = "IdleGpu"
    GPU_BUSY = "GpuBusy"
    IDLE_GPU_HALTED = "IdleGpuHalted"
    LOGS_TRUNCATED = "LogsTruncated"
    # people
    CANCELLED = "Cancelled"
    CANCELLED_BY_USER = "CancelledByUser"
    REQUEUED_BY_ADMIN = "RequeuedByAdmin"
    HALTED_BY_USER = "HaltedByUser"
    HALTED = "Halted"
    RESUMED = "Resumed"
    PREEMPTED = "Preempted"
    PREEMPTING = "Preempting"
    RELABELLED = "Relabelled"

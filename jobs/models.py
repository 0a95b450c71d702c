"""Jobs, the events of their lives, and their learners (one pod each)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from common.resources import Resources
from jobs.core.claims import ClaimLayout, claim_layout
from jobs.core.states import ACTIVE, TERMINAL, WAITING, JobStatus, check_transition
from tenants.models import Tenant

_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"


def new_job_id() -> str:
    """A short random id that is URL-safe and DNS-1123 safe (it goes into pod names)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


class JobQuerySet(models.QuerySet["Job"]):
    """Job queries by state group; tenants' usage accounting reads these through `tenant.jobs`."""

    def waiting(self) -> JobQuerySet:
        return self.filter(status__in=WAITING)

    def holding_resources(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=TERMINAL)

    def holding_claims(self) -> JobQuerySet:
        """Jobs whose checkpoint claims exist: launched at least once and not yet deleted, whatever their state
        now (requeued, halted and finished jobs keep their claims); none when the installation makes none."""
        if not checkpoint_layout().gib_each:
            return self.none()
        return self.exclude(status=JobStatus.QUEUED).filter(attempt__gte=1)

    def claims_by_tenant(self, tenant_ids: list[int]) -> dict[int, tuple[int, int]]:
        """(claims, GiB) the jobs of each of ``tenant_ids`` that hold claims hold, by tenant (one query)."""
        layout = checkpoint_layout()
        rows = (
            self.holding_claims()
            .filter(tenant_id__in=tenant_ids)
            .order_by()
            .values("tenant_id")
            .annotate(jobs=models.Count("id"), learners=models.Sum("learners"))
        )
        found = {}
        for row in rows:
            claims = row["jobs"] if layout.shared else row["learners"]
            found[row["tenant_id"]] = (claims, claims * layout.gib_each)
        return found


def checkpoint_layout() -> ClaimLayout:
    """The installation's checkpoint claims as its settings describe them (jobs.core.claims)."""
    return claim_layout(
        claim_size=settings.CHECKPOINT_CLAIM_SIZE,
        access_mode=settings.CHECKPOINT_ACCESS_MODE,
        host_root=settings.CHECKPOINT_HOST_ROOT,
    )


class Job(models.Model):
    """A training job: a validated spec owned by a tenant, moved through its states by the services."""

    id = models.CharField(primary_key=True, max_length=16, default=new_job_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="jobs")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="jobs"
    )
    name = models.CharField(max_length=100)
    spec = models.JSONField(help_text="The normalized, validated spec (see jobs/spec.py).")
    source = models.CharField(max_length=16, default="trainyard", help_text="trainyard or ffdl")
    document = models.TextField(
        blank=True,
        default="",
        help_text="The spec as its user wrote it (comments, order, units), for Clone; data-store credential "
        "values are blanked out. Empty when it could not be kept.",
    )
    status = models.CharField(max_length=12, choices=JobStatus.choices, default=JobStatus.QUEUED.value)
    reason = models.CharField(max_length=64, blank=True, help_text="Machine-readable cause of the status.")
    message = models.TextField(blank=True, help_text="Human explanation of the status.")
    priority = models.IntegerField(default=0)
    attempt = models.PositiveIntegerField(default=0, help_text="Launch attempts so far (0 until admitted).")
    max_retries = models.PositiveIntegerField(default=2)
    # The current allocation per learner; copied from the spec at submit, changed only by the tuner.
    learners = models.PositiveIntegerField(default=1)
    gpus = models.PositiveIntegerField(default=0)
    cpu_millis = models.PositiveIntegerField(default=1000)
    memory_mib = models.PositiveIntegerField(default=1024)
    placements = models.JSONField(default=list, blank=True, help_text="Node planned for each learner.")
    code = models.ForeignKey(
        "CodeArchive", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs",
        help_text="The model definition unpacked into MODEL_DIR (docs/artifacts.md).",
    )  # fmt: skip
    checkpoint_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Size of CHECKPOINT_DIR when the last attempt ended."
    )
    queue_position = models.PositiveIntegerField(null=True, blank=True, help_text="Place in the queue.")
    eta = models.DateTimeField(null=True, blank=True, help_text="Estimated start while queued.")
    eta_low = models.DateTimeField(null=True, blank=True, help_text="Earliest plausible start.")
    eta_high = models.DateTimeField(null=True, blank=True, help_text="Latest plausible start.")
    eta_reason = models.CharField(max_length=120, blank=True, help_text="Why the start is unknown, if it is.")
    borrowed = models.BooleanField(
        default=False,
        help_text="Its latest admission put its tenant above the nominal quota: it runs on resources borrowed "
        "from its cohort (and is the first to give them back).",
    )
    # One launch chain per attempt (jobs.tasks.launch): the Celery task that holds the attempt's launch, and
    # until when (its back-off included); another launch of the attempt while it is live stops at once.
    launch_lease = models.CharField(max_length=64, blank=True, default="")
    launch_lease_until = models.DateTimeField(null=True, blank=True)
    # A waiting job that admission does not offer until `held_until`, or until what `held_on` names changes
    # earlier (jobs.services.holds): a quota that refused its pods, a namespace the installation does not own.
    held_until = models.DateTimeField(null=True, blank=True)
    held_on = models.CharField(max_length=300, blank=True, default="")
    # Copied from the spec at submit; people change them afterwards through `job_relabel` (the spec keeps
    # what was submitted).
    experiment = models.CharField(
        max_length=100, blank=True, default="", help_text="The experiment it is a run of."
    )
    tags = ArrayField(
        models.CharField(max_length=40), default=list, blank=True, help_text="Short labels to find it by."
    )
    created_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "status"]),
            models.Index(fields=["status", "priority", "created_at"]),
            models.Index(fields=["tenant", "experiment"], name="job_tenant_experiment"),
            GinIndex(fields=["tags"], name="job_tags_gin"),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.name})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def per_learner(self) -> Resources:
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)

    @property
    def total_gpus(self) -> int:
        return self.learners * self.gpus

    @property
    def total_cpu_millis(self) -> int:
        return self.learners * self.cpu_millis

    @property
    def total_memory_mib(self) -> int:
        return self.learners * self.memory_mib

    def set_status(self, target: str) -> None:
        """Move to `target` in memory, stamping the matching time; raises IllegalTransition if not allowed.

        Callers save the row themselves (the services do, under a row lock, with a JobEvent).
        """
        check_transition(self.status, target)
        now = timezone.now()
        if target == JobStatus.STARTING:
            self.admitted_at = now
        elif target == JobStatus.RUNNING and self.started_at is None:
            self.started_at = now
        elif target in TERMINAL:
            self.finished_at = now
        self.status = target


class JobEvent(models.Model):
    """One thing that happened to a job: a transition or a notable fact, with its reason and evidence."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=32, help_text="transition, submitted, scheduling, pod, tuning, ...")
    from_status = models.CharField(max_length=12, blank=True)
    to_status = models.CharField(max_length=12, blank=True)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    data: models.JSONField[Any] = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who did it, when a person did (submit, cancel, retry, requeue); empty for the platform.",
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} {self.reason}".strip()


class Learner(models.Model):
    """One learner of one attempt of a job: its pod, where it ran and how it ended."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="learner_set")
    attempt = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    pod_name = models.CharField(max_length=253)
    node = models.CharField(max_length=253, blank=True)
    phase = models.CharField(max_length=16, default="Pending")
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=64, blank=True)
    # Where the log follower is: the last sequence stored and the cursor to resume the stream from.
    log_seq = models.BigIntegerField(default=0)
    log_cursor_ts = models.DateTimeField(null=True, blank=True)
    log_cursor_seen = models.PositiveIntegerField(default=0)
    log_done = models.BooleanField(default=False, help_text="The container ended and its log is stored.")
    checkpoint_at = models.DateTimeField(
        null=True, blank=True, help_text='When it last printed a checkpoint line ({"checkpoint": step}).'
    )
    checkpoint_step = models.BigIntegerField(null=True, blank=True, help_text="The step of that checkpoint.")
    # What this attempt's log stored and dropped, against its caps (jobs/core/logcaps.py).
    log_lines = models.BigIntegerField(default=0, help_text="Lines stored in this attempt (the marker too).")
    log_bytes = models.BigIntegerField(
        default=0, help_text="UTF-8 bytes of the lines stored in this attempt."
    )
    log_dropped = models.BigIntegerField(default=0, help_text="Lines dropped for being over a log cap.")
    log_truncated = models.BooleanField(
        default=False, help_text="A cap was hit: the marker line and the LogsTruncated event are stored."
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["job", "attempt", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "index"], name="unique_learner_per_attempt")
        ]

    def __str__(self) -> str:
        return self.pod_name


class LogLine(models.Model):
    """One line a learner printed, numbered per (job, learner) across attempts so viewers can resume."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines")
    learner = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()
    seq = models.BigIntegerField(help_text="1, 2, 3, ... per job and learner; never reused.")
    ts = models.DateTimeField(null=True, blank=True, help_text="When the kubelet saw the line.")
    text = models.TextField()

    class Meta:
        ordering = ["job", "learner", "seq"]
        constraints = [models.UniqueConstraint(fields=["job", "learner", "seq"], name="unique_log_seq")]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.learner}#{self.seq}"


class MetricSample(models.Model):
    """One point of one training metric, parsed from a log line (see jobs/core/metricparse.py)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metric_samples")
    learner = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    step = models.BigIntegerField(null=True, blank=True)
    value = models.FloatField()
    ts = models.DateTimeField(null=True, blank=True)
    log_seq = models.BigIntegerField(help_text="The log line it came from.")

    class Meta:
        ordering = ["job", "name", "log_seq"]
        indexes = [
            models.Index(fields=["job", "name", "log_seq"]),
            # A metric's lowest and highest value in one index step each (the jobs list's best values).
            models.Index(fields=["job", "name", "value"], name="metric_job_name_value"),
            # The metrics API's keyset order and the charts' buckets: by name, then x (the step, or for a
            # point without one its log line's sequence), then id (selectors.job_metric_page).
            models.Index(
                F("job"), F("name"), Coalesce(F("step"), F("log_seq")), F("id"), name="metric_job_name_x"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_id} {self.name}={self.value}"


class JobCredentials(models.Model):
    """A job's data-store credentials, sealed (jobs/credentials.py) until launch turns them into a Secret.

    Kept apart from `Job.spec` so that no serializer, page or log can show them by accident.
    """

    job = models.OneToOneField(Job, on_delete=models.CASCADE, primary_key=True, related_name="credentials")
    sealed = models.TextField(help_text="Fernet token of the credentials JSON; never shown.")
    stores = models.JSONField(default=list, help_text="The data-store ids it holds credentials for.")

    def __str__(self) -> str:
        return f"credentials of {self.job_id} ({', '.join(self.stores)})"


class TelemetryQuerySet(models.QuerySet["TelemetrySample"]):
    """Telemetry reads the job page needs (a template can call only argument-free methods)."""

    def recent(self) -> list[TelemetrySample]:
        """The newest 30 rows, oldest first."""
        newest: list[TelemetrySample] = [row for row in self.order_by("-ts", "-learner")[:30]]
        return newest[::-1]


class TelemetrySample(models.Model):
    """One look at one learner: CPU and memory used against its limits, its training speed and GPU use.

    Recorded periodically for running jobs (jobs/telemetry.py), one row per learner per look (the rows of
    one look share `ts`), kept for the job's life; the tuner (jobs/tuning/) decides from them.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="telemetry")
    attempt = models.PositiveIntegerField()
    learner = models.PositiveIntegerField()
    ts = models.DateTimeField(default=timezone.now)
    cpu_millis_used = models.PositiveIntegerField()
    cpu_millis_limit = models.PositiveIntegerField()
    memory_mib_used = models.PositiveIntegerField()
    memory_mib_limit = models.PositiveIntegerField()
    samples_per_sec = models.FloatField(null=True, blank=True, help_text="From the job's metric lines.")
    steps_per_sec = models.FloatField(null=True, blank=True, help_text="Rate of the step counter.")
    gpu_util = models.FloatField(null=True, blank=True, help_text="0-1, where the cluster exposes it.")

    objects = TelemetryQuerySet.as_manager()

    class Meta:
        ordering = ["job", "ts", "learner"]
        indexes = [models.Index(fields=["job", "attempt", "ts"])]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.learner}@{self.ts:%H:%M:%S} cpu {self.cpu_millis_used}m"


class CodeArchive(models.Model):
    """A model definition (a ZIP) uploaded with a job: checked at upload, stored once per tenant and
    content (jobs/artifacts/), unpacked into each learner's MODEL_DIR by the fetch init container."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="code_archives")
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField(help_text="Bytes of the ZIP.")
    unpacked_size = models.BigIntegerField(help_text="Bytes of its files once unpacked.")
    entries = models.PositiveIntegerField()
    storage_name = models.CharField(max_length=255, help_text="Its name in artifact storage.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "sha256"], name="unique_code_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.sha256[:12]} ({self.size} bytes)"


class ResultFile(models.Model):
    """One file a learner left in RESULT_DIR, uploaded by the pod's launcher when its command exited."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="result_files")
    attempt = models.PositiveIntegerField()
    learner = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=512, help_text="Relative to RESULT_DIR, '/'-separated.")
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    storage_name = models.CharField(max_length=600)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["job", "attempt", "learner", "path"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "learner", "path"], name="unique_result_path")
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.attempt}/{self.learner}:{self.path}"


class EventFile(models.Model):
    """One TensorBoard event file a learner's launcher sends while it runs (docs/jobs.md), stored in pieces.

    Each upload appends one piece (`chunks`: `[offset, length, storage name]`) to artifact storage; the
    scalars of the complete records up to `parsed` became MetricSamples (jobs/services/tensorboard.py).
    `tags` remembers which tags are scalars, since TensorBoard writes that only with a tag's first value.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="event_files")
    attempt = models.PositiveIntegerField()
    learner = models.PositiveIntegerField(default=0)
    path = models.CharField(
        max_length=512, help_text="Relative to the learner's event folder, '/'-separated."
    )
    size = models.BigIntegerField(default=0, help_text="Bytes received.")
    parsed = models.BigIntegerField(default=0, help_text="Bytes read into metrics (whole records).")
    chunks: models.JSONField[Any] = models.JSONField(default=list, blank=True)
    tags: models.JSONField[Any] = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, help_text="Why reading stopped (a damaged file); empty while fine.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["job", "attempt", "learner", "path"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "learner", "path"], name="unique_event_file")
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.attempt}/{self.learner}:{self.path}"


class AttemptUsage(models.Model):
    """What one attempt of a job has written into shared state, counted against its caps (jobs/services/caps.py):
    result files and their bytes, pod-reported events, TensorBoard bytes and metric rows. Its row is the lock
    that keeps concurrent uploads of one attempt from passing a cap together; `capped` names the caps already
    reached, so each is recorded by one job event."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_usage")
    attempt = models.PositiveIntegerField()
    result_files = models.PositiveIntegerField(default=0)
    result_bytes = models.BigIntegerField(default=0)
    reports = models.PositiveIntegerField(default=0, help_text="Pod-reported events recorded.")
    tensorboard_bytes = models.BigIntegerField(default=0)
    tensorboard_rows = models.BigIntegerField(default=0)
    capped: models.JSONField[Any] = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="unique_attempt_usage")]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.attempt} usage"


# The notifications' models and the task outbox live in their own modules; importing them here makes
# them the jobs app's.
from jobs.notifications.models import DeliveryAttempt, Notification, Subscription  # noqa: E402, F401
from jobs.outbox import OutboxTask  # noqa: E402, F401

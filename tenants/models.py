"""Tenants (teams), their members' roles and their quotas."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from common.resources import Resources


class Tenant(models.Model):
    """A team that owns jobs; everything a user sees is scoped to the tenants they belong to."""

    slug = models.SlugField(max_length=40, unique=True, help_text="Short name, used in URLs and namespaces.")
    name = models.CharField(max_length=100)
    weight = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(0.01)],
        help_text="Fair-share weight: a tenant with weight 2 gets twice the share of one with weight 1.",
    )
    active = models.BooleanField(
        default=True, help_text="Inactive tenants keep their history but submit nothing."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        permissions = [
            ("view_tenant_jobs", "See the tenant's jobs, logs and metrics"),
            ("submit_jobs", "Submit jobs and cancel one's own"),
            ("manage_jobs", "Cancel and retry any job of the tenant"),
            ("manage_tenant", "Manage the tenant's members and settings"),
        ]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    """What a member may do in a tenant; each role maps to a set of guardian permissions."""

    OWNER = "owner", "Owner"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


class Membership(models.Model):
    """A user's role in one tenant. Guardian object permissions are derived from these rows."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tenant__slug", "user__username"]
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="unique_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


def _borrowing_limit(resource: str) -> models.PositiveIntegerField[int | None, int | None]:
    return models.PositiveIntegerField(
        default=0,
        null=True,
        blank=True,
        help_text=f"How much {resource} the tenant may borrow above its nominal quota from its cohort's unused "
        "quota: 0 (default) none, blank no limit of its own (the cohort's unused quota still bounds it).",
    )


DEFAULT_STORAGE_GIB = 500
"""A tenant's default claim storage: 50 checkpoint claims of the default 10Gi."""
DEFAULT_MAX_CLAIMS = 50
"""A tenant's default claim count."""


class Quota(models.Model):
    """What a tenant is guaranteed (its nominal quota), what it may borrow beyond that from the other tenants
    of its cohort while they leave it unused (Kueue's nominalQuota, borrowingLimit, cohort), and how many jobs
    it may run and keep waiting, and how much claim storage its jobs may hold (a cap of its own, never
    borrowed)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    gpus = models.PositiveIntegerField(default=0, help_text="Nominal (guaranteed) GPUs of running jobs.")
    cpu_millis = models.PositiveIntegerField(
        default=8000, help_text="Nominal CPU in millicores (1000 = one core)."
    )
    memory_mib = models.PositiveIntegerField(default=16384, help_text="Nominal memory in MiB.")
    gpus_borrowing_limit = _borrowing_limit("GPUs")
    cpu_millis_borrowing_limit = _borrowing_limit("CPU (millicores)")
    memory_mib_borrowing_limit = _borrowing_limit("memory (MiB)")
    cohort = models.SlugField(
        max_length=40,
        blank=True,
        default="",
        help_text="Tenants of one cohort lend each other their unused nominal quota; blank: the cohort of all "
        "tenants with a blank cohort (the whole cluster).",
    )
    max_running_jobs = models.PositiveIntegerField(default=4)
    max_queued_jobs = models.PositiveIntegerField(default=100)
    storage_gib = models.PositiveIntegerField(
        default=DEFAULT_STORAGE_GIB,
        help_text="Total storage (GiB) the claims of the tenant's jobs may request together: checkpoint claims "
        "count from a job's first launch until the job is deleted (halted and finished jobs keep theirs).",
    )
    max_claims = models.PositiveIntegerField(
        default=DEFAULT_MAX_CLAIMS,
        help_text="How many PersistentVolumeClaims the tenant's jobs may hold together (one per learner, or "
        "one per job with shared checkpoints), counted as storage_gib is.",
    )

    class Meta:
        verbose_name = "quota"

    def __str__(self) -> str:
        return f"quota of {self.tenant}"

    @property
    def resources(self) -> Resources:
        """The GPUs, CPU and memory the tenant's running jobs are guaranteed together (nominal quota)."""
        return Resources(self.gpus, self.cpu_millis, self.memory_mib)

    @property
    def borrowing_limit(self) -> tuple[int | None, int | None, int | None]:
        """Per resource (GPUs, CPU, memory), how much it may borrow; None: bounded by the cohort only."""
        return (self.gpus_borrowing_limit, self.cpu_millis_borrowing_limit, self.memory_mib_borrowing_limit)

    def ceiling(self) -> Resources:
        """The most the tenant's running jobs may ever hold together: nominal plus borrowing limit, capped by
        the sum of its cohort's nominal quotas (active tenants); its nominal quota when it borrows nothing."""
        nominal = self.resources.as_shape()
        if self.borrowing_limit == (0, 0, 0):
            return self.resources
        members = Quota.objects.filter(cohort=self.cohort, tenant__active=True).exclude(pk=self.pk)
        cohort = Resources.total(q.resources for q in members) + self.resources
        top = [
            amount if limit == 0 else min(total, amount + (total if limit is None else limit))
            for amount, limit, total in zip(nominal, self.borrowing_limit, cohort.as_shape(), strict=True)
        ]
        return Resources(*top)


class PodSecurity(models.TextChoices):
    """The Pod Security Admission level enforced on a tenant's namespace (Kubernetes' own names)."""

    RESTRICTED = "restricted", "restricted (learner pods as Trainyard builds them)"
    BASELINE = "baseline", "baseline"
    PRIVILEGED = "privileged", "privileged (needed for host path volumes)"


PRIORITY_RANGE = (-100, 100)


class JobClaims(models.TextChoices):
    """Which jobs' checkpoint claims a `pvc` volume may mount (a tenant policy): none (the default), the
    submitter's own jobs', or any job's of the tenant (sharing)."""

    NONE = "none", "none (a pvc volume never mounts a job's checkpoint claim)"
    OWN = "own", "the submitter's own jobs' claims"
    TENANT = "tenant", "any job's of the tenant (members share checkpoints)"


class Policy(models.Model):
    """What a tenant's jobs may reach, set by platform admins (tenants.policy reads it; a tenant without a
    row has the defaults: no host paths, any registry, public S3 endpoints only, members up to priority 0,
    the restricted Pod Security level)."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="policy")
    host_path_prefixes = models.JSONField(
        default=list,
        blank=True,
        help_text="Node folders `type: host` volumes may mount (each with everything below it); none by "
        "default. Never /, /proc, /sys, /dev or the kubelet's and container runtimes' folders.",
    )
    image_registries = models.JSONField(
        default=list,
        blank=True,
        help_text="Patterns images must match, e.g. registry.example.com/* or docker.io/library/*; "
        "empty: any image. Short names are read as Docker Hub's (python:3.11 is docker.io/library/python:3.11).",
    )
    datastore_hosts = models.JSONField(
        default=list,
        blank=True,
        help_text="S3 endpoint hosts jobs may use (patterns like *.s3.example.com, or an address); empty: "
        "any public endpoint. Private, loopback, link-local and cluster-internal hosts only when listed.",
    )
    member_max_priority = models.IntegerField(
        default=0,
        validators=[MinValueValidator(PRIORITY_RANGE[0]), MaxValueValidator(PRIORITY_RANGE[1])],
        help_text="The highest priority a member may give a job; owners may use up to owner_max_priority.",
    )
    owner_max_priority = models.IntegerField(
        default=PRIORITY_RANGE[1],
        validators=[MinValueValidator(PRIORITY_RANGE[0]), MaxValueValidator(PRIORITY_RANGE[1])],
        help_text="The highest priority the tenant's owners may give a job.",
    )
    pod_security = models.CharField(
        max_length=12,
        choices=PodSecurity.choices,
        default=PodSecurity.RESTRICTED,
        help_text="Pod Security Admission level enforced on the tenant's namespace.",
    )
    preempt_lower_priority = models.BooleanField(
        default=False,
        help_text="A waiting job may stop the tenant's own running jobs of lower priority to start "
        "(gracefully; they go back to the queue and resume from their checkpoints).",
    )
    idle_gpu_halt_after_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Halt a job whose GPUs have been flagged idle for this many seconds (it resumes from its "
        "checkpoint when resumed), so its GPUs go back to the queue; empty: never halt, only flag.",
    )
    job_claims = models.CharField(
        max_length=8,
        choices=JobClaims.choices,
        default=JobClaims.NONE,
        help_text="Which jobs' checkpoint claims (ty-<job>-ckpt…) a pvc volume may mount: none (default), the "
        "submitter's own jobs', or any job's of the tenant. Other claims the platform makes never.",
    )
    # Caps on what one attempt of a job writes (tenants.policy.write_caps); empty: the platform's default.
    result_max_files = models.PositiveIntegerField(
        null=True, blank=True, help_text="Result files one attempt may upload; empty: RESULT_MAX_FILES."
    )
    result_max_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Bytes of result files one attempt may upload; empty: RESULT_MAX_BYTES.",
    )
    pod_reports_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Completion reports and other pod-reported events one attempt may record; empty: "
        "POD_REPORTS_MAX.",
    )
    tensorboard_piece_max_bytes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Bytes of one TensorBoard piece (at most 64 MiB; launchers send 4 MiB pieces); empty: "
        "TENSORBOARD_UPLOAD_MAX_BYTES.",
    )
    tensorboard_max_bytes = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Bytes of TensorBoard event files one attempt may send; empty: TENSORBOARD_MAX_BYTES.",
    )
    tensorboard_piece_max_rows = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Metric rows kept from one parsed TensorBoard piece; empty: TENSORBOARD_PIECE_MAX_ROWS.",
    )
    tensorboard_max_rows = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Metric rows kept from one attempt's TensorBoard files; empty: TENSORBOARD_MAX_ROWS.",
    )
    # Log caps (jobs/core/logcaps.py), per learner and attempt; empty: the platform's default (settings).
    log_max_lines_per_second = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Log lines a learner may store per second; empty: LOG_MAX_LINES_PER_SECOND.",
    )
    log_max_bytes_per_second = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Log bytes a learner may store per second; empty: LOG_MAX_BYTES_PER_SECOND.",
    )
    log_max_lines = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Log lines a learner may store per attempt; empty: LOG_MAX_LINES."
    )
    log_max_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Log bytes a learner may store per attempt; empty: LOG_MAX_BYTES."
    )
    pod_overrides = models.JSONField(
        default=dict,
        blank=True,
        help_text="Operator overrides of the tenant's learner pods, applied after POD_OVERRIDES (the global ones): "
        "a JSON object with any of tolerations, node_selector, node_affinity, priority_class_name, labels, "
        'annotations and patch, e.g. {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", '
        '"effect": "NoSchedule"}]} lets CPU jobs onto tainted GPU nodes. See docs/operations.md, "Pod overrides".',
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "policies"

    def __str__(self) -> str:
        return f"policy of {self.tenant}"


class TokenScope(models.TextChoices):
    """What an API token may do, each scope including the one before: within it, the user's role decides."""

    READ = "read", "read: safe methods only (GET, HEAD, OPTIONS)"
    SUBMIT = "submit", "submit: read, and job writes (submit, cancel, halt, resume, retry, labels, delete)"
    ADMIN = (
        "admin",
        "admin: everything the user's role allows (tenant settings, secrets, notifications, tokens)",
    )


class ApiToken(models.Model):
    """A personal API token: shown once at creation, stored only as a SHA-256 digest, revocable, limited to
    a scope and (by default) expiring."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.SUBMIT)
    prefix = models.CharField(max_length=12, help_text="The first characters, to tell tokens apart.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"


class DataStoreSecret(models.Model):
    """A tenant's named data-store credentials (an S3 access key pair, optionally its region), which job specs
    name in `volumes[].secret`. Write-only: the values are sealed (common.sealing) and never shown; pages
    and the API show the name, which keys it holds, and when and by whom it was created and rotated. A launch
    turns them into the attempt's data-store Secret in the tenant's namespace (tenants.secrets)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="datastore_secrets")
    name = models.CharField(max_length=63, help_text="What specs call it: `volumes[].secret: NAME`.")
    sealed = models.TextField(help_text="Fernet token of the values' JSON; never shown.")
    keys = models.JSONField(default=list, help_text="The keys it holds (access_key_id, ...), never values.")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    rotated_at = models.DateTimeField(null=True, blank=True)
    rotated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="unique_datastore_secret")]

    def __str__(self) -> str:
        return f"{self.name} of {self.tenant}"


class DataStoreSecretEvent(models.Model):
    """Audit of a tenant's data-store secrets: who created, rotated or deleted which one, and when (the keys it
    held, never values). Kept after the secret is deleted."""

    class Action(models.TextChoices):
        CREATED = "created", "created"
        ROTATED = "rotated", "rotated"
        DELETED = "deleted", "deleted"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="datastore_secret_events")
    name = models.CharField(max_length=63)
    action = models.CharField(max_length=10, choices=Action.choices)
    keys = models.JSONField(default=list)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} of {self.tenant} {self.action} by {self.actor}"


class RegistryCredential(models.Model):
    """A tenant's image pull credentials for one container registry host (a username and a password or token).
    Write-only like a data-store secret: the password is sealed (common.sealing) and never shown again; a
    launch of a job whose image is on `host` turns it into the attempt's `kubernetes.io/dockerconfigjson`
    Secret and the learner pods' `imagePullSecrets` (tenants.registries)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="registry_credentials")
    name = models.CharField(max_length=63, help_text="What pages and the API call it.")
    host = models.CharField(
        max_length=253, help_text="The registry host (and port) images name, e.g. registry.example.com."
    )
    username = models.CharField(max_length=255)
    sealed = models.TextField(help_text="Fernet token of the password; never shown.")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    rotated_at = models.DateTimeField(null=True, blank=True)
    rotated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["tenant__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="unique_registry_credential"),
            models.UniqueConstraint(fields=["tenant", "host"], name="unique_registry_credential_host"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.host}) of {self.tenant}"


class RegistryCredentialEvent(models.Model):
    """Audit of a tenant's registry credentials: who created, rotated or deleted which one, and when (its host
    and username, never the password). Kept after the credential is deleted."""

    class Action(models.TextChoices):
        CREATED = "created", "created"
        ROTATED = "rotated", "rotated"
        DELETED = "deleted", "deleted"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="registry_credential_events")
    name = models.CharField(max_length=63)
    host = models.CharField(max_length=253)
    action = models.CharField(max_length=10, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.host}) of {self.tenant} {self.action} by {self.actor}"


class MembershipEvent(models.Model):
    """Audit of a tenant's members: who added, re-roled or removed whom, and when (the username is kept as
    text, so the record outlives the user)."""

    class Action(models.TextChoices):
        ADDED = "added", "added"
        ROLE_CHANGED = "role_changed", "role changed"
        REMOVED = "removed", "removed"
        INVITED = "invited", "invited"
        INVITE_REVOKED = "invite_revoked", "invitation revoked"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="membership_events")
    username = models.CharField(max_length=254, help_text="The member's username, or the invited address.")
    action = models.CharField(max_length=16, choices=Action.choices)
    role = models.CharField(max_length=10, blank=True, default="", help_text="The role after the change.")
    previous_role = models.CharField(max_length=10, blank=True, default="")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.username} {self.action} in {self.tenant} by {self.actor}"


class Invitation(models.Model):
    """An owner's invitation for an e-mail address to join a tenant with a role: a link (only its SHA-256
    digest is stored) that the user with that address accepts after logging in; single use, expiring."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"invitation of {self.email} to {self.tenant} ({self.role})"


class DeviceAuthorization(models.Model):
    """A command line's sign-in in progress: the OAuth device authorization grant (RFC 8628) for the
    platform's own API tokens. The command line holds the device code (stored here only as a SHA-256
    digest) and polls; the user signs in on the portal, enters or follows the user code and approves; the
    next poll turns the approval into an API token, once."""

    device_digest = models.CharField(max_length=64, unique=True)
    user_code = models.CharField(max_length=9, unique=True, help_text="XXXX-XXXX, what the user confirms.")
    client_name = models.CharField(max_length=100, blank=True, default="")
    address = models.GenericIPAddressField(
        null=True, blank=True, help_text="Where the command line asked from."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    interval = models.PositiveSmallIntegerField(
        default=5, help_text="Seconds the client waits between polls."
    )
    polled_at = models.DateTimeField(null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    denied_at = models.DateTimeField(null=True, blank=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    token = models.ForeignKey(ApiToken, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"device sign-in {self.user_code}"

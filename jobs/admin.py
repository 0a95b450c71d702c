"""Admin console for jobs: list with filters, events and learners inline, a cancel action."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from jobs.core.states import TERMINAL
from jobs.models import Job, JobEvent, Learner
from jobs.services import JobRejected, job_cancel, job_delete, job_requeue


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = readonly_fields = ("created_at", "kind", "from_status", "to_status", "reason", "message")

    def has_add_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False


class LearnerInline(admin.TabularInline):
    model = Learner
    extra = 0
    can_delete = False
    fields = readonly_fields = ("attempt", "index", "pod_name", "node", "phase", "exit_code", "reason")

    def has_add_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tenant", "owner", "status", "reason", "learners", "gpus", "created_at"]
    list_filter = ["status", "tenant", "source"]
    search_fields = ["id", "name", "owner__username"]
    list_select_related = ["tenant", "owner"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "id", "tenant", "owner", "name", "spec", "source", "status", "reason", "message", "attempt",
        "learners", "gpus", "cpu_millis", "memory_mib", "created_at", "admitted_at", "started_at",
        "finished_at",
    ]  # fmt: skip
    fields = [*readonly_fields[:10], "priority", "max_retries", *readonly_fields[10:]]
    inlines = [LearnerInline, JobEventInline]
    actions = ["cancel_jobs", "requeue_jobs"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """Only finished jobs can be deleted, and only through `job_delete` (checkpoints, files, rows)."""
        return super().has_delete_permission(request, obj) and (obj is None or obj.status in TERMINAL)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        # The admin's delete view runs this inside its own transaction (with its log entry).
        job_delete.nested(job=obj, user=request.user)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        for job in queryset:
            try:
                job_delete(job=job, user=request.user)  # type: ignore[arg-type]
            except JobRejected as exc:
                self.message_user(request, f"{job.pk}: {exc}", messages.WARNING)

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        cancelled, skipped = 0, 0
        for job in queryset.exclude(status__in=TERMINAL):
            try:
                job_cancel(job=job, user=request.user)  # type: ignore[arg-type]
                cancelled += 1
            except JobRejected as exc:
                skipped += 1
                self.message_user(request, f"{job.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"{cancelled} job(s) cancelled, {skipped} skipped.", messages.SUCCESS)

    @admin.action(description="Requeue selected jobs (resume from checkpoint; no retry used)")
    def requeue_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        done = 0
        for job in queryset:
            try:
                job_requeue(job=job, user=request.user)  # type: ignore[arg-type]
                done += 1
            except JobRejected as exc:
                self.message_user(request, f"{job.pk}: {exc}", messages.WARNING)
        self.message_user(request, f"{done} job(s) requeued.", messages.SUCCESS)


from jobs.notifications import admin as notifications_admin  # noqa: E402, F401 (registers its admins)

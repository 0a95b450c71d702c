"""Admin console for tenants: quota and members inline, current usage beside each quota. Membership changes
made here are audited in `MembershipEvent`, as the tenant page's are, and keep the tenant page's rule: a
tenant always keeps an owner (`tenants.members.owner_kept_check`), whether a member is deleted (one, or
several with the bulk action), demoted or moved to another tenant, here or in the tenant's members inline;
nor is a user who is a tenant's last owner deleted (their memberships would go with them)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import actions as admin_actions
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html

from tenants.members import MemberRefused, membership_event_record, owner_kept_check
from tenants.models import JobClaims, Membership, MembershipEvent, Policy, Quota, Role, Tenant
from tenants.policy import WRITE_CAP_FIELDS, check_consistent, policy_clean
from tenants.services import tenant_sync_permissions
from tenants.usage import Usage, tenant_usage


class QuotaInline(admin.StackedInline):
    """Nominal quota, what the tenant may borrow beyond it from its cohort, its job limits and claim storage."""

    model = Quota
    can_delete = False
    min_num = 1
    max_num = 1
    fieldsets = [
        ("Nominal (guaranteed) quota", {"fields": [("gpus", "cpu_millis", "memory_mib")]}),
        (
            "Borrowing from the cohort",
            {
                "fields": [
                    "cohort",
                    ("gpus_borrowing_limit", "cpu_millis_borrowing_limit", "memory_mib_borrowing_limit"),
                ],
                "description": "What the tenant may use above its nominal quota while other tenants of its "
                "cohort leave theirs unused: 0 none (a hard cap), blank no limit of its own.",
            },
        ),
        ("Jobs", {"fields": [("max_running_jobs", "max_queued_jobs")]}),
        (
            "Claim storage",
            {
                "fields": [("storage_gib", "max_claims")],
                "description": "What the tenant's PersistentVolumeClaims may request together and how many it "
                "may hold: checkpoint claims count from a job's first launch until the job is deleted (halted "
                "and finished jobs keep theirs). Never borrowed; the namespace ResourceQuota carries both.",
            },
        ),
    ]


class PolicyForm(forms.ModelForm):
    """The policy as the API takes it: normalized and checked by tenants.policy, errors beside each field."""

    class Meta:
        model = Policy
        fields = [
            "host_path_prefixes",
            "image_registries",
            "datastore_hosts",
            "member_max_priority",
            "owner_max_priority",
            "pod_security",
            "preempt_lower_priority",
            "idle_gpu_halt_after_seconds",
            "job_claims",
            *WRITE_CAP_FIELDS,
            "log_max_lines_per_second",
            "log_max_bytes_per_second",
            "log_max_lines",
            "log_max_bytes",
            "pod_overrides",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A form posted without it (an older page, a script) keeps what the policy says rather than failing.
        self.fields["job_claims"].required = False

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("job_claims"):
            data["job_claims"] = self.instance.job_claims or JobClaims.NONE
        if data.get("pod_overrides") is None and "pod_overrides" not in self.errors:
            data["pod_overrides"] = {}
        given = {
            name: data[name] for name in PolicyForm.Meta.fields if name in data and data[name] is not None
        }
        try:
            data.update(policy_clean(given))
            candidate = Policy(**{**{n: getattr(self.instance, n) for n in PolicyForm.Meta.fields}, **data})
            check_consistent(candidate)
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, messages)
        return data


class PolicyInline(admin.StackedInline):
    """The tenant's policy, with the global pod overrides (POD_OVERRIDES) shown beside its own, since both
    apply to its pods (the global ones first)."""

    model = Policy
    form = PolicyForm
    can_delete = False
    max_num = 1
    extra = 1
    readonly_fields = ["global_pod_overrides"]

    @admin.display(description="Global pod overrides (POD_OVERRIDES, applied before the tenant's)")
    def global_pod_overrides(self, obj: Policy | None = None) -> str:
        if not settings.POD_OVERRIDES:
            return "none"
        return format_html("<pre>{}</pre>", json.dumps(settings.POD_OVERRIDES, indent=2, sort_keys=True))


def _refusal(exc: MemberRefused) -> str:
    return "; ".join(message for messages_ in exc.errors.values() for message in messages_)


class MembershipInlineFormSet(BaseInlineFormSet):
    """The tenant's members as one form per row; a save that would leave the tenant without an owner
    (its owners deleted or demoted, none made) is refused above the rows."""

    def clean(self) -> None:
        super().clean()
        if self.instance.pk is None or any(self.errors):
            return
        before = dict(Membership.objects.filter(tenant=self.instance).values_list("pk", "user__username"))
        owners = set(
            Membership.objects.filter(tenant=self.instance, role=Role.OWNER).values_list("pk", flat=True)
        )
        leaving, joining = set(), set()
        for form in self.forms:
            if form.instance.pk in owners:
                leaving.add(before[form.instance.pk])
            data = getattr(form, "cleaned_data", None) or {}
            user = data.get("user")
            if user is not None and data.get("role") == Role.OWNER and not data.get("DELETE"):
                joining.add(user.username)
        try:
            owner_kept_check(tenant=self.instance, leaving=leaving, joining=joining)
        except MemberRefused as exc:
            raise ValidationError(_refusal(exc)) from None


class MembershipInline(admin.TabularInline):
    model = Membership
    formset = MembershipInlineFormSet
    extra = 1
    autocomplete_fields = ["user"]


def _used_of(used: int, limit: int, unit: str = "") -> str:
    return f"{used}{unit} / {limit}{unit}"


def _borrowing(quota: Quota) -> str:
    """The tenant's borrowing in words: its cohort and how much it may go above nominal."""
    limits = [
        f"{what} {'no limit' if limit is None else f'+{limit}{unit}'}"
        for what, limit, unit in zip(
            ("GPUs", "CPU", "memory"), quota.borrowing_limit, ("", "m", " MiB"), strict=True
        )
        if limit != 0
    ]
    cohort = f"cohort {quota.cohort}" if quota.cohort else "cluster-wide cohort"
    return f"borrows {', '.join(limits)} ({cohort})" if limits else "borrows nothing (hard quota)"


def _usage(tenant: Tenant) -> Usage:
    """Usage of one tenant, computed once per row however many columns show it."""
    cached: Usage | None = getattr(tenant, "_usage_cache", None)
    if cached is None:
        cached = tenant_usage(tenant)
        tenant._usage_cache = cached  # type: ignore[attr-defined]
    return cached


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = [
        "slug", "name", "weight", "active", "gpus_used", "cpu_used", "memory_used", "jobs_used", "storage_used",
    ]  # fmt: skip
    list_filter = ["active"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QuotaInline, PolicyInline, MembershipInline]
    readonly_fields = ["usage_summary"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return super().get_queryset(request).select_related("quota")

    @admin.display(description="GPUs used / quota")
    def gpus_used(self, tenant: Tenant) -> str:
        return _used_of(_usage(tenant).gpus, tenant.quota.gpus)

    @admin.display(description="CPU used / quota")
    def cpu_used(self, tenant: Tenant) -> str:
        return _used_of(_usage(tenant).cpu_millis, tenant.quota.cpu_millis, "m")

    @admin.display(description="Memory used / quota")
    def memory_used(self, tenant: Tenant) -> str:
        return _used_of(_usage(tenant).memory_mib, tenant.quota.memory_mib, " MiB")

    @admin.display(description="Running jobs / limit")
    def jobs_used(self, tenant: Tenant) -> str:
        usage = _usage(tenant)
        return f"{_used_of(usage.running_jobs, tenant.quota.max_running_jobs)} ({usage.queued_jobs} queued)"

    @admin.display(description="Claim storage / quota")
    def storage_used(self, tenant: Tenant) -> str:
        usage, quota = _usage(tenant), tenant.quota
        return f"{_used_of(usage.storage_gib, quota.storage_gib, ' GiB')} in {usage.claims}/{quota.max_claims} claims"

    @admin.display(description="Current usage")
    def usage_summary(self, tenant: Tenant) -> str:
        if tenant.pk is None or not hasattr(tenant, "quota"):
            return "—"
        usage, quota = tenant_usage(tenant), tenant.quota
        return (
            f"GPUs {usage.gpus}/{quota.gpus}, CPU {usage.cpu_millis}m/{quota.cpu_millis}m, "
            f"memory {usage.memory_mib}/{quota.memory_mib} MiB, running jobs "
            f"{usage.running_jobs}/{quota.max_running_jobs}, "
            f"queued {usage.queued_jobs}/{quota.max_queued_jobs}, claim storage "
            f"{usage.storage_gib}/{quota.storage_gib} GiB in {usage.claims}/{quota.max_claims} claims; "
            f"{_borrowing(quota)}"
        )

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        """Saves an inline; the members inline's changes are audited."""
        if formset.model is not Membership:
            super().save_formset(request, form, formset, change)
            return
        before = _roles(Membership.objects.filter(tenant=form.instance))
        super().save_formset(request, form, formset, change)
        _audit_changes(
            request, form.instance, before, _roles(Membership.objects.filter(tenant=form.instance))
        )

    def save_related(
        self, request: HttpRequest, form: Any, formsets: list[BaseInlineFormSet], change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        tenant_sync_permissions(tenant=form.instance)


class MembershipForm(forms.ModelForm):
    """One membership; changing the last owner's role, or moving them to another tenant, is refused on the
    role field."""

    class Meta:
        model = Membership
        fields = ["user", "tenant", "role"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk is None or self.errors:
            return data
        old = Membership.objects.select_related("user", "tenant").get(pk=self.instance.pk)
        if old.role != Role.OWNER:
            return data
        user, tenant = data.get("user"), data.get("tenant")
        stays = data.get("role") == Role.OWNER and tenant is not None and tenant.pk == old.tenant_id
        try:
            owner_kept_check(
                tenant=old.tenant,
                leaving={old.user.username},
                joining={user.username} if stays and user is not None else (),
                field="role",
            )
        except MemberRefused as exc:
            self.add_error("role", _refusal(exc))
        return data


def _deletion_refused(memberships: QuerySet[Membership]) -> str | None:
    """Why deleting `memberships` would leave a tenant without an owner, or None. Locks each tenant's
    membership changes for the caller's transaction (in tenant order, so two admins cannot deadlock)."""
    owners: dict[Tenant, set[str]] = {}
    for membership in memberships.select_related("tenant", "user").order_by("tenant_id"):
        owners.setdefault(membership.tenant, set())
        if membership.role == Role.OWNER:
            owners[membership.tenant].add(membership.user.username)
    refusals = []
    for tenant, leaving in owners.items():
        try:
            owner_kept_check(tenant=tenant, leaving=leaving)
        except MemberRefused as exc:
            refusals.append(_refusal(exc))
    return "; ".join(refusals) or None


class KeepsOwnersOnDelete(admin.ModelAdmin):
    """Django's delete page and bulk delete action, refused where deleting the objects would delete every
    owner's membership of a tenant: the delete page sends the admin back to the object with the reason, the
    bulk action deletes nothing and says why. Subclasses say which memberships their objects carry."""

    actions = ["delete_selected"]

    def memberships_of(self, objects: QuerySet[Any]) -> QuerySet[Membership]:
        raise NotImplementedError

    @admin.action(permissions=["delete"], description="Delete selected %(verbose_name_plural)s")
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        with transaction.atomic():
            refusal = _deletion_refused(self.memberships_of(queryset))
            if refusal:
                self.message_user(request, f"Nothing was deleted: {refusal}.", messages.ERROR)
                return None
            return admin_actions.delete_selected(self, request, queryset)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        with transaction.atomic():
            obj = self.get_object(request, unquote(object_id))
            if obj is not None:
                objects = self.model._default_manager.filter(pk=obj.pk)
                refusal = _deletion_refused(self.memberships_of(objects))
                if refusal:
                    self.message_user(request, f"{obj} was not deleted: {refusal}.", messages.ERROR)
                    opts = self.model._meta
                    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
                    return HttpResponseRedirect(url)
            return super().delete_view(request, object_id, extra_context)


@admin.register(Membership)
class MembershipAdmin(KeepsOwnersOnDelete):
    form = MembershipForm
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user", "tenant"]

    def memberships_of(self, objects: QuerySet[Any]) -> QuerySet[Membership]:
        return objects

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        old = Membership.objects.select_related("tenant").filter(pk=obj.pk).first() if change else None
        before = _roles(Membership.objects.filter(pk=old.pk)) if old else {}
        super().save_model(request, obj, form, change)
        tenant_sync_permissions(tenant=obj.tenant)
        if old is not None and old.tenant_id != obj.tenant_id:
            tenant_sync_permissions(tenant=old.tenant)
            _audit_changes(request, old.tenant, before, {})
            before = {}
        _audit_changes(request, obj.tenant, before, _roles(Membership.objects.filter(pk=obj.pk)))

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        tenant = obj.tenant
        before = _roles(Membership.objects.filter(pk=obj.pk))
        super().delete_model(request, obj)
        tenant_sync_permissions(tenant=tenant)
        _audit_changes(request, tenant, before, {})

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        tenants = list(Tenant.objects.filter(memberships__in=queryset).distinct())
        before = {t.pk: _roles(queryset.filter(tenant=t)) for t in tenants}
        super().delete_queryset(request, queryset)
        for tenant in tenants:
            tenant_sync_permissions(tenant=tenant)
            _audit_changes(request, tenant, before[tenant.pk], {})


def _roles(memberships: QuerySet[Membership]) -> dict[str, str]:
    """Username to role, for comparing a tenant's members before and after an admin change."""
    return dict(memberships.values_list("user__username", "role"))


def _audit_changes(
    request: HttpRequest, tenant: Tenant, before: dict[str, str], after: dict[str, str]
) -> None:
    """Record what an admin change did to a tenant's members (added, role changed, removed)."""
    actor = request.user if request.user.is_authenticated else None
    for username in sorted(before.keys() | after.keys()):
        old, new = before.get(username), after.get(username)
        if old == new:
            continue
        if old is None:
            action, role, previous = MembershipEvent.Action.ADDED, new or "", ""
        elif new is None:
            action, role, previous = MembershipEvent.Action.REMOVED, "", old
        else:
            action, role, previous = MembershipEvent.Action.ROLE_CHANGED, new, old
        membership_event_record(
            tenant=tenant, actor=actor, username=username, action=action, role=role, previous=previous
        )


class UserAdmin(KeepsOwnersOnDelete, DjangoUserAdmin):
    """Django's user admin, except that a user who is the last owner of a tenant cannot be deleted (their
    memberships would go with them): make another owner first."""

    def memberships_of(self, objects: QuerySet[Any]) -> QuerySet[Membership]:
        return Membership.objects.filter(user__in=objects)


admin.site.unregister(User)
admin.site.register(User, UserAdmin)


from tenants import registry_admin  # noqa: E402, F401 (registers the registry credential admins)

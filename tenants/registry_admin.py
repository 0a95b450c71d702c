"""Admin console for tenants' private registry credentials (registered by tenants/admin.py): read-only but for
deletion, and never the password.

Platform admins list them (tenant, name, host, username, who created and rotated them, when), search and
filter them by tenant, and delete them through `registry_credential_delete`, so a deletion here is audited
like one on the tenant page. They do not add or rotate them here: a password typed into the admin would
bypass nothing the tenant page does not already do better (the host checked against the tenant's policy,
the owner recorded), so adding and rotating stay with the tenant's owners (tenant page, API,
`trainyard registries`). The sealed password is no field, column, search or filter here, nor a lookup a URL
may name. The audit (`RegistryCredentialEvent`) is its own read-only list.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from tenants.models import RegistryCredential, RegistryCredentialEvent
from tenants.registries import RegistryRefused, registry_credential_delete
from tenants.scoping import Perm, has_perm

ADD_NOTE = (
    "Registry credentials are added and rotated by the tenant's owners on the tenant page (or with the API "
    "or `trainyard registries`); here they can be looked at and deleted."
)
_HIDDEN = "sealed"


@admin.register(RegistryCredential)
class RegistryCredentialAdmin(admin.ModelAdmin):
    """Registry credentials for platform admins: list, search, filter by tenant, view, delete (audited)."""

    list_display = [
        "name", "tenant", "host", "username", "created_at", "created_by", "rotated_at", "rotated_by",
    ]  # fmt: skip
    list_filter = ["tenant"]
    search_fields = ["name", "host", "username", "tenant__slug"]
    list_select_related = ["tenant", "created_by", "rotated_by"]
    fields = readonly_fields = (
        "tenant", "name", "host", "username", "password", "created_at", "created_by", "rotated_at",
        "rotated_by",
    )  # fmt: skip

    @admin.display(description="Password")
    def password(self, obj: RegistryCredential) -> str:
        return "sealed, never shown; the tenant's owners rotate it on the tenant page"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # see ADD_NOTE

    def has_change_permission(self, request: HttpRequest, obj: RegistryCredential | None = None) -> bool:
        return False  # a rotation needs the new password: the tenant page, API or CLI

    def has_delete_permission(self, request: HttpRequest, obj: RegistryCredential | None = None) -> bool:
        """Who may delete it through the service: a platform admin, or an owner of its tenant."""
        allowed = super().has_delete_permission(request, obj)
        return allowed and (obj is None or has_perm(request.user, obj.tenant, Perm.MANAGE_TENANT))

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """No URL filters on the sealed password (`?sealed__startswith=` would read it out a character at a
        time)."""
        return lookup.split("__")[0] != _HIDDEN and super().lookup_allowed(lookup, value, request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {"subtitle": ADD_NOTE, **(extra_context or {})})

    def delete_model(self, request: HttpRequest, obj: RegistryCredential) -> None:
        # The admin's delete view runs this inside its own transaction (with its log entry).
        registry_credential_delete.nested(credential=obj, user=request.user)  # type: ignore[arg-type]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[RegistryCredential]) -> None:
        """The bulk action: each one through the service (audited); one refused is left, with the reason."""
        for credential in queryset.select_related("tenant"):
            try:
                registry_credential_delete.nested(credential=credential, user=request.user)  # type: ignore[arg-type]
            except RegistryRefused as exc:
                self.message_user(request, f"{credential} was not deleted: {exc}", messages.WARNING)


@admin.register(RegistryCredentialEvent)
class RegistryCredentialEventAdmin(admin.ModelAdmin):
    """The registry credential audit, read-only: who created, rotated or deleted which, and when."""

    list_display = ["at", "tenant", "name", "host", "action", "actor"]
    list_filter = ["action", "tenant"]
    search_fields = ["name", "host", "tenant__slug", "actor__username"]
    list_select_related = ["tenant", "actor"]
    date_hierarchy = "at"
    fields = readonly_fields = ("at", "tenant", "name", "host", "action", "actor")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: RegistryCredentialEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: RegistryCredentialEvent | None = None) -> bool:
        return False  # an audit outlives what it records

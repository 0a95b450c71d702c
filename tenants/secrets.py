"""A tenant's data-store secrets: named S3 credentials that job specs reference by name in `volumes[].secret`.

Owners create, rotate (replace the values) and delete them; every member sees the names and which keys each
holds, never a value (write-only, like a password). The values are sealed with common.sealing and opened
only at launch, where they become the attempt's data-store Secret in the tenant's namespace, so a rotation
applies to every later launch, retries and requeues of existing jobs included. A secret that a job which may
still launch names (queued, running, halted...) cannot be deleted (409, naming the jobs). Every change is
audited in `DataStoreSecretEvent`, without values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from common import sealing
from common.errors import Refused
from common.transactions import durable_service
from tenants.models import DataStoreSecret, DataStoreSecretEvent, Tenant
from tenants.scoping import AnyUser, Perm, has_perm

REQUIRED_KEYS = ("access_key_id", "secret_access_key")
OPTIONAL_KEYS = ("region", "endpoint")
SECRET_KEYS = (*REQUIRED_KEYS, *OPTIONAL_KEYS)
MAX_VALUE_LENGTH = 1024
# The same ids as a spec's `volumes[].secret` (jobs.core.spec.volumes) and an FfDL data store's id.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_VALUE_RE = re.compile(r"[^\s\x00-\x1f\x7f]+")
_REGION_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,31}")
# The store's S3 endpoint, so specs name the secret, not a host and port: http(s), no credentials in it.
_ENDPOINT_RE = re.compile(r"https?://[A-Za-z0-9._~%-]+(:[0-9]{1,5})?(/[^\s@]*)?")
MAX_SECRETS = 100


class SecretRefused(Refused):
    """A data-store secret change was refused; `errors` maps fields to messages (never a value)."""


class MissingSecret(ValueError):
    """A job names data-store secrets its tenant no longer has (deleted while the job waited)."""


def _require_owner(user: AnyUser, tenant: Tenant) -> None:
    if not has_perm(user, tenant, Perm.MANAGE_TENANT):
        raise SecretRefused(
            {"": [f"only owners of tenant {tenant.slug} manage its data-store secrets"]}, status=403
        )


def _clean_values(values: Mapping[str, Any]) -> dict[str, str]:
    """The values to seal, checked field by field; messages never repeat a value."""
    errors: dict[str, list[str]] = {}
    clean: dict[str, str] = {}
    for key in values:
        if key not in SECRET_KEYS:
            errors[str(key)] = [f"unknown key; a data-store secret holds {', '.join(SECRET_KEYS)}"]
    for key in SECRET_KEYS:
        value = values.get(key)
        if value is None or value == "":
            if key in REQUIRED_KEYS:
                errors[key] = ["this field is required"]
            continue
        if not isinstance(value, str):
            errors[key] = [f"must be a string, got {type(value).__name__}"]
        elif len(value) > MAX_VALUE_LENGTH:
            errors[key] = [f"at most {MAX_VALUE_LENGTH} characters (got {len(value)})"]
        elif not _VALUE_RE.fullmatch(value):
            errors[key] = ["must not contain spaces or control characters (its value is not shown)"]
        elif key == "region" and not _REGION_RE.fullmatch(value):
            errors[key] = ["must be a region name like us-east-1 (lower-case letters, digits and '-')"]
        elif key == "endpoint" and not _ENDPOINT_RE.fullmatch(value):
            errors[key] = ["must be an http:// or https:// URL without credentials in it"]
        else:
            clean[key] = value
    if errors:
        raise SecretRefused(errors)
    return clean


def _audit(*, secret: DataStoreSecret, user: User, action: str) -> None:
    DataStoreSecretEvent.objects.create(
        tenant=secret.tenant, name=secret.name, action=action, keys=list(secret.keys), actor=user
    )


@durable_service
def datastore_secret_create(
    *, tenant: Tenant, user: User, name: Any, values: Mapping[str, Any]
) -> DataStoreSecret:
    """Store a new named secret for `tenant` (owners only): its values sealed, the creation audited. Raises
    SecretRefused (400 with the fields, 403 for a non-owner) and stores nothing on bad input."""
    _require_owner(user, tenant)
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        problem = "must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        name_errors = {"name": [problem]}
        try:
            _clean_values(values)
        except SecretRefused as exc:
            raise SecretRefused(name_errors | exc.errors) from None
        raise SecretRefused(name_errors)
    clean = _clean_values(values)
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()  # one creator at a time per tenant
    if DataStoreSecret.objects.filter(tenant=tenant, name=name).exists():
        raise SecretRefused({"name": [f"tenant {tenant.slug} already has a data-store secret {name!r}"]})
    if DataStoreSecret.objects.filter(tenant=tenant).count() >= MAX_SECRETS:
        raise SecretRefused({"": [f"tenant {tenant.slug} already has {MAX_SECRETS} data-store secrets"]})
    secret = DataStoreSecret.objects.create(
        tenant=tenant, name=name, sealed=sealing.seal(clean), keys=sorted(clean), created_by=user
    )
    _audit(secret=secret, user=user, action=DataStoreSecretEvent.Action.CREATED)
    return secret


@durable_service
def datastore_secret_rotate(
    *, secret: DataStoreSecret, user: User, values: Mapping[str, Any]
) -> DataStoreSecret:
    """Replace every value of `secret` (owners only); later launches use the new values, pods already
    running keep the old ones. The rotation is audited."""
    _require_owner(user, secret.tenant)
    clean = _clean_values(values)
    locked = (
        DataStoreSecret.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=secret.pk)
    )
    locked.sealed = sealing.seal(clean)
    locked.keys = sorted(clean)
    locked.rotated_at = timezone.now()
    locked.rotated_by = user
    locked.save(update_fields=["sealed", "keys", "rotated_at", "rotated_by"])
    _audit(secret=locked, user=user, action=DataStoreSecretEvent.Action.ROTATED)
    return locked


class _Jobs(Protocol):
    """The part of the jobs app's Job manager this module relies on (tenants may not import jobs)."""

    def finished(self) -> QuerySet[Any]: ...

    def filter(self, *args: Any, **kwargs: Any) -> QuerySet[Any]: ...


def _jobs() -> _Jobs:
    return cast(_Jobs, Tenant.jobs.field.model._default_manager)


def datastore_secret_users(*, secret: DataStoreSecret) -> QuerySet[Any]:
    """The tenant's jobs that name `secret` in a volume and may still launch (anything not finished), except
    those whose FfDL manifest brought credentials of that name itself."""
    jobs = _jobs()
    return (
        jobs.filter(tenant=secret.tenant, spec__volumes__contains=[{"secret": secret.name}])
        .exclude(pk__in=jobs.finished().values("pk"))
        .exclude(credentials__stores__contains=[secret.name])
        .order_by("created_at")
    )


@durable_service
def datastore_secret_delete(*, secret: DataStoreSecret, user: User) -> None:
    """Delete `secret` (owners only), audited; refused (409, naming them) while jobs that may still launch
    name it: they would fail at launch. Finished jobs keep their history; a retry of one is then refused."""
    _require_owner(user, secret.tenant)
    locked = (
        DataStoreSecret.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=secret.pk)
    )
    users = list(datastore_secret_users(secret=locked).values_list("pk", "name", "status")[:11])
    if users:
        listed = ", ".join(f"{pk} ({name}, {status})" for pk, name, status in users[:10])
        more = " and more" if len(users) > 10 else ""
        message = (
            f"data-store secret {locked.name!r} is named by jobs that may still launch: {listed}{more}; "
            "cancel them or let them finish first, or rotate the secret instead"
        )
        raise SecretRefused({"": [message]}, status=409)
    _audit(secret=locked, user=user, action=DataStoreSecretEvent.Action.DELETED)
    locked.delete()


def datastore_secret_list(*, tenant: Tenant) -> QuerySet[DataStoreSecret]:
    """The tenant's secrets by name (callers scope the tenant first: `tenants_for`), with who made them."""
    return DataStoreSecret.objects.filter(tenant=tenant).select_related("created_by", "rotated_by")


def datastore_secret_events(*, tenant: Tenant) -> QuerySet[DataStoreSecretEvent]:
    """The tenant's secret audit, newest first."""
    return DataStoreSecretEvent.objects.filter(tenant=tenant).select_related("actor")


def datastore_secret_keys(*, tenant: Tenant, names: Iterable[str]) -> dict[str, list[str]]:
    """Which of `names` the tenant has, each with the keys it holds (no value is opened): what submit checks."""
    rows = DataStoreSecret.objects.filter(tenant=tenant, name__in=set(names))
    return dict(rows.values_list("name", "keys"))


def datastore_credentials(*, tenant: Tenant, names: Iterable[str]) -> dict[str, dict[str, str]]:
    """The values of the tenant's secrets `names`, unsealed, for a launch; MissingSecret names any it lacks."""
    wanted = set(names)
    if not wanted:
        return {}
    found = {
        row.name: cast(dict[str, str], sealing.unseal(row.sealed))
        for row in DataStoreSecret.objects.filter(tenant=tenant, name__in=wanted)
    }
    missing = sorted(wanted - set(found))
    if missing:
        listed = ", ".join(repr(n) for n in missing)
        raise MissingSecret(f"tenant {tenant.slug} has no data-store secret {listed} (deleted since submit?)")
    return found

"""A tenant's private registry credentials: image pull credentials for one registry host each.

Owners create, rotate (replace the username and password) and delete them; every member sees their names,
hosts and usernames, never a password (write-only, like a data-store secret). The password is sealed with
common.sealing and opened only at launch: a job whose image is on a host the tenant has credentials for gets
the attempt's `kubernetes.io/dockerconfigjson` Secret in the tenant's namespace and `imagePullSecrets` on its
learner pods (jobs.cluster), so a rotation applies to every later launch. A host must be one the tenant's
`image_registries` policy lets images come from (when it restricts them). Every change is audited in
`RegistryCredentialEvent`, without the password.

The platform cannot tell a private registry from a public one: a job whose image needs credentials the
tenant lacks is accepted, and fails at launch when its pull is refused (ErrImagePull, after
IMAGE_PULL_GRACE_SECONDS), with a hint naming the host (`registry_hint`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.utils import timezone

from common import sealing
from common.errors import Refused
from common.transactions import durable_service
from tenants.models import RegistryCredential, RegistryCredentialEvent, Tenant
from tenants.policy import policy_of
from tenants.scoping import AnyUser, Perm, has_perm

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# A registry host as image references name it: DNS labels (or an IPv4 address), optionally a port.
_HOST_RE = re.compile(
    r"(?=.{1,253}(:|$))[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:[0-9]{1,5})?"
)
_USERNAME_RE = re.compile(r"[^\s:\x00-\x1f\x7f]{1,255}")
MAX_PASSWORD_LENGTH = 8192  # a Google service account's JSON key (`_json_key`) is a few kB
MAX_CREDENTIALS = 50
DOCKER_HUB = "docker.io"
# What Docker Hub is also called; images name it docker.io (or nothing: `python:3.11`).
_HUB_ALIASES = frozenset({"index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"})


class RegistryRefused(Refused):
    """A registry credential change was refused; `errors` maps fields to messages (never the password)."""


@dataclass(frozen=True)
class RegistryAuth:
    """One registry's pull credentials, opened for a launch (never logged: the password is left out of repr)."""

    host: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"RegistryAuth(host={self.host!r}, username={self.username!r}, password=...)"


def normalize_host(host: str) -> str:
    """The registry host as images name it: lower-case, Docker Hub's other names as docker.io."""
    host = host.strip().lower()
    return DOCKER_HUB if host in _HUB_ALIASES else host


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """Whether an image on `host` may match one of the `image_registries` patterns (no patterns: any image).
    A pattern with a `/` names its host before it (`registry.example.com/*`, `*.corp.example/team/*`); a
    pattern without one matches images as written (`python:*`: Docker Hub's) or anything (`*`)."""
    if not patterns:
        return True
    for pattern in patterns:
        head, slash, _ = pattern.partition("/")
        if slash and fnmatchcase(host, head.lower()):
            return True
        if not slash and (host == DOCKER_HUB or fnmatchcase(f"{host}/image", pattern)):
            return True
    return False


def _require_owner(user: AnyUser, tenant: Tenant) -> None:
    if not has_perm(user, tenant, Perm.MANAGE_TENANT):
        raise RegistryRefused(
            {"": [f"only owners of tenant {tenant.slug} manage its registry credentials"]}, status=403
        )


def _clean_login(values: Mapping[str, Any]) -> tuple[str, str]:
    """The username and password, checked field by field; messages never repeat the password."""
    errors: dict[str, list[str]] = {}
    username, password = values.get("username"), values.get("password")
    if username is None or username == "":
        errors["username"] = ["this field is required"]
    elif not isinstance(username, str) or not _USERNAME_RE.fullmatch(username):
        errors["username"] = ["1 to 255 characters, without spaces, control characters or ':'"]
    if password is None or password == "":
        errors["password"] = ["this field is required"]
    elif not isinstance(password, str):
        errors["password"] = [f"must be a string, got {type(password).__name__}"]
    elif len(password) > MAX_PASSWORD_LENGTH:
        errors["password"] = [f"at most {MAX_PASSWORD_LENGTH} characters (got {len(password)})"]
    elif "\x00" in password:
        errors["password"] = ["must not contain NUL characters (its value is not shown)"]
    for key in values:
        if key not in ("username", "password"):
            errors[str(key)] = ["unknown field; send username and password"]
    if errors:
        raise RegistryRefused(errors)
    return str(username), str(password)


def _host_problem(tenant: Tenant, host: Any) -> str | None:
    if not isinstance(host, str) or not host.strip():
        return "this field is required"
    clean = normalize_host(host)
    if "/" in clean:
        return "a host name (and port), without a scheme or path: e.g. registry.example.com:5000"
    if not _HOST_RE.fullmatch(clean):
        return "not a registry host name: letters, digits, '-' and '.', optionally ':PORT'"
    patterns = list(policy_of(tenant).image_registries)
    if not host_allowed(clean, patterns):
        return (
            f"tenant {tenant.slug}'s policy does not let images come from {clean} (it allows "
            f"{', '.join(patterns)}); a platform admin can change it"
        )
    return None


def _audit(*, credential: RegistryCredential, user: User, action: str) -> None:
    RegistryCredentialEvent.objects.create(
        tenant=credential.tenant, name=credential.name, host=credential.host, action=action, actor=user
    )


@durable_service
def registry_credential_create(
    *, tenant: Tenant, user: User, name: Any, host: Any, values: Mapping[str, Any]
) -> RegistryCredential:
    """Store pull credentials for a registry host of `tenant` (owners only): the password sealed, the
    creation audited. Raises RegistryRefused (400 with every field's problem, 403 for a non-owner) and
    stores nothing on bad input."""
    _require_owner(user, tenant)
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        errors["name"] = ["must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"]
    problem = _host_problem(tenant, host)
    if problem:
        errors["host"] = [problem]
    try:
        username, password = _clean_login(values)
    except RegistryRefused as exc:
        errors |= exc.errors
    if errors:
        raise RegistryRefused(errors)
    clean_host = normalize_host(str(host))
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()  # one creator at a time per tenant
    rows = RegistryCredential.objects.filter(tenant=tenant)
    if rows.filter(name=name).exists():
        errors["name"] = [f"tenant {tenant.slug} already has a registry credential {name!r}"]
    taken = rows.filter(host=clean_host).values_list("name", flat=True).first()
    if taken is not None:
        errors["host"] = [
            f"tenant {tenant.slug} already has credentials for {clean_host} ({taken}); rotate them"
        ]
    if errors:
        raise RegistryRefused(errors)
    if rows.count() >= MAX_CREDENTIALS:
        raise RegistryRefused(
            {"": [f"tenant {tenant.slug} already has {MAX_CREDENTIALS} registry credentials"]}
        )
    credential = RegistryCredential.objects.create(
        tenant=tenant,
        name=name,
        host=clean_host,
        username=username,
        sealed=sealing.seal({"password": password}),
        created_by=user,
    )
    _audit(credential=credential, user=user, action=RegistryCredentialEvent.Action.CREATED)
    return credential


@durable_service
def registry_credential_rotate(
    *, credential: RegistryCredential, user: User, values: Mapping[str, Any]
) -> RegistryCredential:
    """Replace the username and password of `credential` (owners only); later launches use them, pods already
    pulled keep running. The rotation is audited."""
    _require_owner(user, credential.tenant)
    username, password = _clean_login(values)
    locked = (
        RegistryCredential.objects.select_for_update(of=("self",))
        .select_related("tenant")
        .get(pk=credential.pk)
    )
    locked.username = username
    locked.sealed = sealing.seal({"password": password})
    locked.rotated_at = timezone.now()
    locked.rotated_by = user
    locked.save(update_fields=["username", "sealed", "rotated_at", "rotated_by"])
    _audit(credential=locked, user=user, action=RegistryCredentialEvent.Action.ROTATED)
    return locked


@durable_service
def registry_credential_delete(*, credential: RegistryCredential, user: User) -> None:
    """Delete `credential` (owners only), audited. Jobs whose image is on its host launch without a pull
    secret from then on (a private registry then refuses their pull)."""
    _require_owner(user, credential.tenant)
    locked = (
        RegistryCredential.objects.select_for_update(of=("self",))
        .select_related("tenant")
        .get(pk=credential.pk)
    )
    _audit(credential=locked, user=user, action=RegistryCredentialEvent.Action.DELETED)
    locked.delete()


def registry_credential_list(*, tenant: Tenant) -> QuerySet[RegistryCredential]:
    """The tenant's registry credentials by name (callers scope the tenant first: `tenants_for`)."""
    return RegistryCredential.objects.filter(tenant=tenant).select_related("created_by", "rotated_by")


def registry_credential_events(*, tenant: Tenant) -> QuerySet[RegistryCredentialEvent]:
    """The tenant's registry credential audit, newest first."""
    return RegistryCredentialEvent.objects.filter(tenant=tenant).select_related("actor")


def registry_has_credentials(*, tenant: Tenant, host: str) -> bool:
    """Whether the tenant has pull credentials for `host` (nothing is opened)."""
    return RegistryCredential.objects.filter(tenant=tenant, host=normalize_host(host)).exists()


def registry_auth(*, tenant: Tenant, host: str) -> RegistryAuth | None:
    """The tenant's pull credentials for `host`, opened for a launch; None when it has none."""
    row = RegistryCredential.objects.filter(tenant=tenant, host=normalize_host(host)).first()
    if row is None:
        return None
    password = str(sealing.unseal(row.sealed)["password"])
    return RegistryAuth(host=row.host, username=row.username, password=password)


def registry_hint(*, tenant: Tenant, host: str) -> str:
    """What to add to an image pull failure's message: whether the tenant has credentials for the host."""
    host = normalize_host(host)
    if registry_has_credentials(tenant=tenant, host=host):
        return f"the pull used tenant {tenant.slug}'s credentials for {host}; an owner can rotate them"
    return (
        f"tenant {tenant.slug} has no registry credentials for {host}; if the registry is private, an owner "
        "can add them"
    )

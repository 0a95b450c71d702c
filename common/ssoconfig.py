"""Single sign-on settings read from the environment and checked at start-up (docs/sso.md): the OpenID
Connect providers (`OIDC_PROVIDERS`) and the map from the providers' groups to tenants and roles
(`OIDC_GROUP_MAP`). Pure: the settings module calls these, so a bad value stops the process with a message
that names it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

ROLES = ("owner", "member", "viewer")
"""The membership roles a group may grant, strongest first (tenants.models.Role; a test keeps them equal)."""

_PROVIDER_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
_SLUG = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?")


class SsoConfigError(ValueError):
    """A single sign-on setting that cannot be used; the message names the setting and the fault."""


@dataclass(frozen=True)
class Grant:
    """What one group gives: `role` in tenant `tenant` (a slug)."""

    tenant: str
    role: str


def providers_parse(raw: str) -> list[dict[str, Any]]:
    """`OIDC_PROVIDERS` (a JSON list of {"id", "name", "issuer" or "server_url", "client_id", "secret",
    optional "scope" (list)}) as django-allauth's openid_connect APPS entries. Empty text: no providers."""
    if not raw.strip():
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SsoConfigError(f"OIDC_PROVIDERS is not JSON: {exc}") from None
    if not isinstance(value, list):
        raise SsoConfigError("OIDC_PROVIDERS must be a JSON list of providers")
    apps: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = f"OIDC_PROVIDERS[{index}]"
        if not isinstance(item, dict):
            raise SsoConfigError(f"{where} must be an object")
        unknown = set(item) - {"id", "name", "issuer", "server_url", "client_id", "secret", "scope"}
        if unknown:
            raise SsoConfigError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        provider_id = item.get("id")
        if not isinstance(provider_id, str) or not _PROVIDER_ID.fullmatch(provider_id):
            raise SsoConfigError(f"{where}.id must be 1 to 40 of a-z, 0-9, '-' and '_'")
        if provider_id in seen:
            raise SsoConfigError(f"{where}.id {provider_id!r} is used twice")
        seen.add(provider_id)
        server_url = item.get("issuer") or item.get("server_url")
        if not isinstance(server_url, str) or not re.match(r"https?://", server_url):
            raise SsoConfigError(f"{where} needs an issuer URL (http:// or https://)")
        for key in ("client_id", "secret"):
            if not isinstance(item.get(key), str) or not item[key]:
                raise SsoConfigError(f"{where}.{key} is required (text)")
        scope = item.get("scope", ["openid", "profile", "email", "groups"])
        if not isinstance(scope, list) or "openid" not in scope:
            raise SsoConfigError(f"{where}.scope must be a list that includes 'openid'")
        apps.append(
            {
                "provider_id": provider_id,
                "name": str(item.get("name") or provider_id),
                "client_id": item["client_id"],
                "secret": item["secret"],
                "settings": {"server_url": server_url.rstrip("/"), "scope": scope},
            }
        )
    return apps


def group_map_parse(raw: str) -> dict[str, Grant]:
    """`OIDC_GROUP_MAP` (a JSON object {"group": "tenant:role"}) as grants. Empty text: no map."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SsoConfigError(f"OIDC_GROUP_MAP is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SsoConfigError('OIDC_GROUP_MAP must be a JSON object {"group": "tenant:role"}')
    grants: dict[str, Grant] = {}
    for group, target in value.items():
        if not group or not isinstance(target, str) or target.count(":") != 1:
            raise SsoConfigError(f'OIDC_GROUP_MAP[{group!r}] must be "tenant:role", got {target!r}')
        tenant, role = target.split(":")
        if not _SLUG.fullmatch(tenant):
            raise SsoConfigError(f"OIDC_GROUP_MAP[{group!r}]: {tenant!r} is not a tenant slug")
        if role not in ROLES:
            raise SsoConfigError(
                f"OIDC_GROUP_MAP[{group!r}]: unknown role {role!r}; choose one of {', '.join(ROLES)}"
            )
        grants[group] = Grant(tenant=tenant, role=role)
    return grants


def grants_for(groups: list[str], group_map: dict[str, Grant]) -> dict[str, str]:
    """The role in each mapped tenant that `groups` give: {tenant slug: role}, the strongest role where
    several groups name one tenant. Groups the map does not name give nothing."""
    roles: dict[str, str] = {}
    for group in groups:
        grant = group_map.get(group)
        if grant is None:
            continue
        held = roles.get(grant.tenant)
        if held is None or ROLES.index(grant.role) < ROLES.index(held):
            roles[grant.tenant] = grant.role
    return roles

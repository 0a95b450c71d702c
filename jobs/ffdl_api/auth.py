"""Who an FfDL request is, and for which tenant.

FfDL's CLI sends HTTP basic auth (`DLAAS_USERNAME` / `DLAAS_PASSWORD`, or user:password in `DLAAS_URL`).
Trainyard accepts its own bearer token, or basic auth whose password is a Trainyard API token; the basic
user name then may name the tenant (FfDL's user was its Bluemix instance, the closest thing to a tenant).
"""

from __future__ import annotations

import base64
import binascii

from django.contrib.auth.models import User
from rest_framework import authentication, exceptions
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request

from tenants.models import ApiToken, Tenant
from tenants.scoping import Perm, has_perm, tenants_for
from tenants.tokens import token_lookup, token_refusal, token_touch

TENANT_HEADER = "X-Trainyard-Tenant"
"""The header that names the tenant (its slug) when the basic user name does not."""


def basic_credentials(request: Request) -> tuple[str, str] | None:
    """The (user name, password) of a `Basic` Authorization header, None for another scheme or none;
    AuthenticationFailed for a Basic header that does not decode."""
    header = authentication.get_authorization_header(request).decode("latin-1")
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise exceptions.AuthenticationFailed(
            "the basic credentials are not base64 of user:password"
        ) from exc
    login, colon, password = decoded.partition(":")
    if not colon:
        raise exceptions.AuthenticationFailed("the basic credentials are not base64 of user:password")
    return login, password


class BasicTokenAuthentication(authentication.BaseAuthentication):
    """DRF authentication by `Authorization: Basic base64(<tenant or any name>:<Trainyard API token>)`."""

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        """The token's user, with the token as `request.auth` (the user name is read by `named_tenant`)."""
        credentials = basic_credentials(request)
        if credentials is None:
            return None
        secret = credentials[1].strip()
        token = token_lookup(secret) if secret else None
        refusal = token_refusal(token) if token is not None else None
        if token is None or refusal is not None:
            raise exceptions.AuthenticationFailed(
                f"the password must be a live Trainyard API token ({refusal})"
                if refusal
                else "the password must be a live Trainyard API token"
            )
        token_touch(token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Basic realm="trainyard"'


def named_tenant(request: Request, user: User, perm: Perm) -> Tenant | None:
    """The tenant the request names: the X-Trainyard-Tenant header (a tenant the user cannot see is a field
    error), or else the basic user name when it is the slug of a tenant the user can see; None when neither
    names one. A named tenant where the user's role lacks `perm` is a field error, never another tenant."""
    visible = tenants_for(user, Perm.VIEW)
    header = request.headers.get(TENANT_HEADER)
    credentials = basic_credentials(request)
    if header is not None:
        slug = header.strip()
        tenant = visible.filter(slug=slug).first() if slug and "\x00" not in slug else None
        if tenant is None:
            raise ValidationError({"tenant": [f"{TENANT_HEADER}: no tenant {slug!r} you may use"]})
    elif credentials and credentials[0] and "\x00" not in credentials[0]:
        tenant = visible.filter(slug=credentials[0]).first()
        if tenant is None:
            return None
    else:
        return None
    if not has_perm(user, tenant, perm):
        raise ValidationError({"tenant": [f"your role in tenant {tenant.slug!r} does not allow this"]})
    return tenant


def submit_tenant(request: Request, user: User) -> Tenant:
    """The tenant a submission goes to: the one the request names, else the only one the user may submit
    to; a field error when that is ambiguous or there is none."""
    tenant = named_tenant(request, user, Perm.SUBMIT)
    if tenant is not None:
        return tenant
    choices = list(tenants_for(user, Perm.SUBMIT)[:2])
    if len(choices) != 1:
        raise ValidationError(
            {
                "tenant": [
                    f"name the tenant: set DLAAS_USERNAME to its slug, or send {TENANT_HEADER} "
                    "(you may submit to several tenants, or none)"
                ]
            }
        )
    return choices[0]

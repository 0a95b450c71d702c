"""E-mail invitations: an owner invites an address to the tenant with a role; the link (e-mailed, and shown to
the owner once to pass on by hand if mail fails) is accepted by the signed-in user whose e-mail address is
the invited one, which makes them a member. Links are single use, expire after INVITATION_MAX_AGE_DAYS, and
are stored only as a SHA-256 digest; owners see pending invitations and revoke them. Invitations, revocations
and acceptances are audited in `MembershipEvent`."""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db.models import QuerySet
from django.utils import timezone

from common.transactions import durable_service
from tenants.members import MemberRefused, membership_add_audited, membership_event_record, require_owner
from tenants.models import Invitation, Membership, MembershipEvent, Role, Tenant

log = logging.getLogger(__name__)

LINK_PREFIX = "inv_"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@durable_service
def invitation_create(
    *, tenant: Tenant, actor: User, email: Any, role: Any = Role.MEMBER
) -> tuple[Invitation, str]:
    """Invite `email` to `tenant` with `role` (owners and platform admins); returns the invitation and the
    link's secret, which is never stored. Refused with field errors: a bad address or role, an address a
    member already has, a pending invitation for it."""
    require_owner(actor, tenant)
    errors: dict[str, list[str]] = {}
    email = email.strip() if isinstance(email, str) else ""
    try:
        validate_email(email)
    except ValidationError:
        errors["email"] = ["enter a valid e-mail address"]
    if role not in Role.values:
        errors["role"] = [f"choose one of {', '.join(Role.values)}"]
    if not errors and Membership.objects.filter(tenant=tenant, user__email__iexact=email).exists():
        errors["email"] = [f"a member of {tenant.slug} already has the address {email}"]
    if not errors and invitations_pending(tenant=tenant).filter(email__iexact=email).exists():
        errors["email"] = [f"{email} already has a pending invitation; revoke it to send a new one"]
    if errors:
        raise MemberRefused(errors)
    secret = LINK_PREFIX + secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        tenant=tenant,
        email=email,
        role=role,
        digest=_digest(secret),
        created_by=actor,
        expires_at=timezone.now() + timedelta(days=settings.INVITATION_MAX_AGE_DAYS),
    )
    membership_event_record(
        tenant=tenant, actor=actor, username=email, action=MembershipEvent.Action.INVITED, role=role
    )
    return invitation, secret


def invitation_send(*, invitation: Invitation, link: str) -> bool:
    """E-mail the link to the invited address; False (logged) when the mail backend refuses, so the caller
    can tell the owner to pass the link on themselves."""
    who = invitation.created_by.get_username() if invitation.created_by else "An owner"
    text = (
        f"{who} invites you to join the team {invitation.tenant.name} ({invitation.tenant.slug}) on Trainyard "
        f"as {invitation.role}.\n\nOpen this link and log in with the account whose e-mail address is "
        f"{invitation.email} to accept (valid until {invitation.expires_at:%Y-%m-%d %H:%M} UTC):\n{link}\n\n"
        "If you did not expect this, ignore it.\n"
    )
    subject = f"[Trainyard] Join {invitation.tenant.name}"
    try:
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, [invitation.email], fail_silently=False)
    except Exception:
        log.warning("could not e-mail invitation %s", invitation.pk, exc_info=True)
        return False
    return True


def invitations_pending(*, tenant: Tenant) -> QuerySet[Invitation]:
    """The tenant's invitations that may still be accepted."""
    return Invitation.objects.filter(
        tenant=tenant, accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
    ).select_related("created_by")


def invitation_lookup(secret: str) -> Invitation | None:
    """The invitation a link names (any state), or None."""
    return Invitation.objects.select_related("tenant", "created_by").filter(digest=_digest(secret)).first()


def invitation_refusal(invitation: Invitation | None, user: User) -> tuple[int, str] | None:
    """Why `user` cannot accept this invitation (status, message), or None when they can."""
    if invitation is None:
        return 404, "this invitation link is not valid"
    if invitation.revoked_at is not None:
        return 410, "this invitation was revoked; ask an owner of the team for a new one"
    if invitation.accepted_at is not None:
        return 410, "this invitation was already used"
    if invitation.expires_at <= timezone.now():
        return 410, "this invitation expired; ask an owner of the team for a new one"
    if not user.email or user.email.lower() != invitation.email.lower():
        return 403, (
            f"this invitation is for {invitation.email}; log in with the account that has that address "
            "(your account's address is set in your profile by a platform admin)"
        )
    return None


@durable_service
def invitation_accept(*, secret: str, user: User) -> Membership:
    """Accept the invitation `secret` names as `user` (whose e-mail must be the invited address): they
    become a member with its role (kept as it is if they already were one). Refused (404, 410 or 403)
    otherwise."""
    invitation = Invitation.objects.select_for_update().filter(digest=_digest(secret)).first()
    refusal = invitation_refusal(invitation, user)
    if refusal is not None:
        raise MemberRefused({"": [refusal[1]]}, status=refusal[0])
    assert invitation is not None
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    existing = Membership.objects.filter(tenant=invitation.tenant, user=user).first()
    if existing is not None:
        return existing
    return membership_add_audited(
        tenant=invitation.tenant, actor=user, username=user.username, role=invitation.role
    )


@durable_service
def invitation_revoke(*, invitation: Invitation, actor: User) -> None:
    """Revoke a pending invitation (owners and platform admins); its link stops working."""
    require_owner(actor, invitation.tenant)
    if invitation.revoked_at is None and invitation.accepted_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        membership_event_record(
            tenant=invitation.tenant,
            actor=actor,
            username=invitation.email,
            action=MembershipEvent.Action.INVITE_REVOKED,
            previous=invitation.role,
        )

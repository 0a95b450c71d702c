"""The notifications' writes: managing subscriptions, the hook job transitions call, the queued-too-long
check, and recording each delivery attempt. Deliveries are queued on commit, so a rolled-back transition
sends nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import DateTimeField, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from common.errors import Refused
from common.transactions import durable_service
from jobs.core.choices import EventKind
from jobs.core.states import WAITING
from jobs.credentials import seal, unseal
from jobs.models import Job, JobEvent
from jobs.notifications.choices import SUBSCRIBABLE, TEST_EVENT, Channel, DeliveryState, Event, Scope
from jobs.notifications.models import DeliveryAttempt, Notification, Subscription
from jobs.notifications.payloads import job_payload, test_payload
from jobs.notifications.signing import new_secret
from jobs.notifications.targets import TargetRefused, check_url
from jobs.notifications.verification import verification_queue
from tenants.models import Tenant
from tenants.scoping import Perm, has_perm

log = logging.getLogger(__name__)

DELIVER_TASK = "jobs.notifications.deliver"
MAX_QUEUED_MINUTES = 7 * 24 * 60
EDITABLE = ("name", "events", "queued_minutes", "enabled")


def _enqueue(notification_ids: Iterable[int]) -> None:
    """Queue a delivery of each notification once the transaction commits; a broker that is down loses
    nothing (the sweep finds pending notifications), so the failure is logged, not raised."""
    ids = list(notification_ids)

    def send() -> None:
        for pk in ids:
            try:
                current_app.send_task(DELIVER_TASK, args=[pk])
            except Exception:
                log.warning("could not queue delivery of notification %s; the sweep will", pk, exc_info=True)

    if ids:
        transaction.on_commit(send)


# --- subscriptions --------------------------------------------------------------------------------------


def subscription_clean(data: Mapping[str, Any], *, partial: bool = False) -> dict[str, Any]:
    """Validate subscription fields (any subset when `partial`); Refused with an error per field."""
    errors: dict[str, list[str]] = {}
    clean: dict[str, Any] = {}
    if "name" in data or not partial:
        name = data.get("name")
        if not isinstance(name, str) or not name.strip():
            errors["name"] = ["give it a name"]
        elif len(name.strip()) > 100:
            errors["name"] = ["at most 100 characters"]
        else:
            clean["name"] = name.strip()
    if "events" in data or not partial:
        events = data.get("events")
        if not isinstance(events, list | tuple) or not events or not all(isinstance(e, str) for e in events):
            errors["events"] = [f"choose at least one of {', '.join(SUBSCRIBABLE)}"]
        elif unknown := [e for e in events if e not in SUBSCRIBABLE]:
            errors["events"] = [f"unknown event {', '.join(unknown)}; choose from {', '.join(SUBSCRIBABLE)}"]
        else:
            clean["events"] = [e for e in SUBSCRIBABLE if e in events]
    if "queued_minutes" in data:
        minutes = data.get("queued_minutes")
        if minutes in (None, ""):
            clean["queued_minutes"] = None
        elif (
            isinstance(minutes, bool)
            or not isinstance(minutes, int)
            or not 1 <= minutes <= MAX_QUEUED_MINUTES
        ):
            errors["queued_minutes"] = [f"a whole number of minutes from 1 to {MAX_QUEUED_MINUTES}"]
        else:
            clean["queued_minutes"] = minutes
    if "enabled" in data:
        if not isinstance(data["enabled"], bool):
            errors["enabled"] = ["must be true or false"]
        else:
            clean["enabled"] = data["enabled"]
    if errors:
        raise Refused(errors)
    return clean


def _check_queued(events: list[str], minutes: int | None) -> int | None:
    if Event.QUEUED_TOO_LONG in events and minutes is None:
        raise Refused({"queued_minutes": ["say after how many minutes in the queue a job is reported"]})
    return minutes if Event.QUEUED_TOO_LONG in events else None


def _target(channel: Any, url: Any, email: Any) -> tuple[str, str]:
    """The (url, email) a channel sends to, checked: webhook targets against SSRF (targets.check_url)."""
    if channel not in Channel.values:
        raise Refused({"channel": [f"choose one of {', '.join(Channel.values)}"]})
    if channel == Channel.EMAIL:
        address = email.strip() if isinstance(email, str) else ""
        try:
            validate_email(address)
        except ValidationError:
            raise Refused({"email": ["a valid e-mail address, like ml-team@example.com"]}) from None
        return "", address
    if not isinstance(url, str) or not url.strip():
        raise Refused({"url": ["the webhook's URL, like https://hooks.example.com/trainyard"]})
    try:
        return check_url(url), ""
    except TargetRefused as exc:
        raise Refused({"url": [str(exc)]}) from None


@dataclass(frozen=True)
class Created:
    """A new subscription and its signing secret (webhooks only), which is shown this once."""

    subscription: Subscription
    secret: str | None


def subscription_create(*, user: User, tenant: Tenant, scope: str = Scope.USER, **fields: Any) -> Created:
    """Subscribe `user` (scope user: their own jobs in `tenant`) or the tenant (scope tenant: every job;
    owners only) to events; webhooks get a fresh signing secret, an e-mail address its verification
    e-mail. Refused (400/403/404) with field errors.
    Checked before the write's transaction opens: the URL check resolves the host, which may be slow."""
    if scope not in Scope.values:
        raise Refused({"scope": [f"choose {' or '.join(Scope.values)}"]})
    if not has_perm(user, tenant, Perm.VIEW):
        raise Refused({"tenant": [f"no tenant {tenant.slug}"]}, status=404)
    if scope == Scope.TENANT and not has_perm(user, tenant, Perm.MANAGE_TENANT):
        raise Refused({"scope": ["only the tenant's owners manage its notifications"]}, status=403)
    unknown = sorted(set(fields) - {*EDITABLE, "channel", "url", "email"})
    if unknown:
        raise Refused({name: ["unknown field"] for name in unknown})
    errors: dict[str, list[str]] = {}
    clean: dict[str, Any] = {}
    try:
        clean.update(subscription_clean(fields))
    except Refused as exc:
        errors.update(exc.errors)
    try:
        clean["url"], clean["email"] = _target(fields.get("channel"), fields.get("url"), fields.get("email"))
    except Refused as exc:
        errors.update(exc.errors)
    if errors:
        raise Refused(errors)
    clean["queued_minutes"] = _check_queued(clean["events"], clean.get("queued_minutes"))
    secret = new_secret() if fields["channel"] == Channel.WEBHOOK else None
    subscription = _subscription_store(
        tenant=tenant,
        user=user if scope == Scope.USER else None,
        created_by=user,
        channel=fields["channel"],
        secret_sealed=seal({"webhook": {"secret": secret}}) if secret else "",
        **clean,
    )
    if subscription.channel == Channel.EMAIL:
        subscription = verification_queue(subscription=subscription, force=True)
    return Created(subscription, secret)


@durable_service
def _subscription_store(**fields: Any) -> Subscription:
    """Store a subscription `subscription_create` checked."""
    return Subscription.objects.create(**fields)


def subscription_secret(subscription: Subscription) -> str:
    """The webhook's signing secret, unsealed for signing (never for showing)."""
    return unseal(subscription.secret_sealed)["webhook"]["secret"]


@durable_service
def subscription_update(*, subscription: Subscription, **fields: Any) -> Subscription:
    """Change a subscription's name, events, minutes or enabled flag (the target and channel stay: make a
    new subscription for another one). The caller got it through the selectors, so may manage it."""
    unknown = sorted(set(fields) - set(EDITABLE))
    if unknown:
        raise Refused({name: ["cannot be changed (create a new subscription)"] for name in unknown})
    clean = subscription_clean(fields, partial=True)
    row = Subscription.objects.select_for_update().get(pk=subscription.pk)
    for name, value in clean.items():
        setattr(row, name, value)
    minutes = clean.get("queued_minutes", row.queued_minutes)
    row.queued_minutes = _check_queued(row.events, minutes)
    row.save()
    return row


@durable_service
def subscription_delete(*, subscription: Subscription) -> None:
    """Delete a subscription with its delivery log; deliveries still queued find nothing to send."""
    Subscription.objects.filter(pk=subscription.pk).delete()


def _test_limit_problem(*, subscription: Subscription, user: User, now: datetime) -> str | None:
    """Why another test send is refused now, or None: at most NOTIFY_TEST_PER_TARGET tests to one target
    (whichever subscriptions name it) and NOTIFY_TEST_PER_USER by one user in NOTIFY_TEST_WINDOW_SECONDS.
    Counted from the stored test notifications, so every web process sees the same counts."""
    window = timedelta(seconds=settings.NOTIFY_TEST_WINDOW_SECONDS)
    recent = Notification.objects.filter(event=TEST_EVENT, created_at__gt=now - window)
    same_target = (
        Q(subscription__email=subscription.email)
        if subscription.email
        else Q(subscription__url=subscription.url)
    )
    checks = (
        (recent.filter(same_target), settings.NOTIFY_TEST_PER_TARGET, f"to {subscription.target}"),
        (recent.filter(requested_by=user), settings.NOTIFY_TEST_PER_USER, "from you"),
    )
    for rows, limit, whom in checks:
        times = list(rows.order_by("-created_at").values_list("created_at", flat=True)[:limit])
        if len(times) >= limit:
            wait = int((times[-1] + window - now).total_seconds()) + 1
            minutes = int(window.total_seconds() // 60)
            return f"at most {limit} test notifications {whom} every {minutes} minutes; try again in {wait} s"
    return None


@durable_service
def subscription_test(*, subscription: Subscription, user: User) -> Notification:
    """Queue a test notification (event `test`, no job) to the subscription's target, even if disabled;
    Refused (429) past the per-target and per-user limits, so the button cannot flood someone's inbox."""
    now = timezone.now()
    Subscription.objects.select_for_update().filter(pk=subscription.pk).first()  # one count at a time
    problem = _test_limit_problem(subscription=subscription, user=user, now=now)
    if problem:
        raise Refused({"": [problem]}, status=429)
    payload = test_payload(tenant=subscription.tenant.slug, name=subscription.name, occurred_at=now)
    notification = Notification.objects.create(
        subscription=subscription,
        event=TEST_EVENT,
        key=f"test:{now.timestamp()}",
        payload=payload,
        requested_by=user,
    )
    _enqueue([notification.pk])
    return notification


# --- events -----------------------------------------------------------------------------------------------


def _listeners(job: Job, event: str) -> list[Subscription]:
    """The enabled subscriptions that hear of `event` about `job`: the tenant's, and its owner's own while
    the owner still belongs to the tenant."""
    rows = list(
        Subscription.objects.filter(tenant_id=job.tenant_id, enabled=True, events__contains=[event]).filter(
            Q(user__isnull=True) | Q(user_id=job.owner_id)
        )
    )
    if any(row.user_id for row in rows) and not (job.owner and has_perm(job.owner, job.tenant, Perm.VIEW)):
        rows = [row for row in rows if not row.user_id]
    return rows


def notify_transition(job: Job, *, event: str, happened: JobEvent) -> list[Notification]:
    """Record `event` (a transition, or another JobEvent such as idle GPUs: `happened`) for every subscription
    that hears of it and queue their deliveries on commit. Runs inside the writer's transaction
    (lifecycle.transition, the idle-GPU check)."""
    listeners = _listeners(job, event)
    if not listeners:
        return []
    detail = happened.message if happened.kind != EventKind.TRANSITION else ""
    payload = job_payload(job, event=event, occurred_at=happened.created_at, detail=detail)
    rows = [
        Notification(subscription=sub, job=job, event=event, key=f"event:{happened.pk}", payload=payload)
        for sub in listeners
    ]
    created = Notification.objects.bulk_create(rows)
    _enqueue(n.pk for n in created)
    return created


def _queued_since() -> Coalesce:
    """When a job's current wait began: its latest transition into a waiting state, else its creation."""
    latest = (
        JobEvent.objects.filter(job=OuterRef("pk"), kind=EventKind.TRANSITION, to_status__in=WAITING)
        .order_by("-created_at", "-id")
        .values("created_at")[:1]
    )
    return Coalesce(Subquery(latest), F("created_at"), output_field=DateTimeField())


@durable_service
def queued_too_long_record(*, now: datetime | None = None) -> int:
    """Notify, once per job and queueing, every subscription to queued_too_long whose jobs have waited
    longer than its minutes. Subscriptions another sweep holds are skipped. Returns how many it queued."""
    now = now or timezone.now()
    subs = (
        Subscription.objects.filter(enabled=True, events__contains=[Event.QUEUED_TOO_LONG])
        .exclude(queued_minutes=None)
        .select_related("tenant", "user")
        .select_for_update(skip_locked=True, of=("self",))
    )
    created: list[Notification] = []
    for sub in subs:
        assert sub.queued_minutes is not None
        jobs = Job.objects.filter(tenant=sub.tenant, status__in=WAITING).annotate(
            queued_since=_queued_since()
        )
        if sub.user is not None:
            if not has_perm(sub.user, sub.tenant, Perm.VIEW):
                continue
            jobs = jobs.filter(owner=sub.user)
        late = list(
            jobs.filter(queued_since__lte=now - timedelta(minutes=sub.queued_minutes)).select_related(
                "tenant", "owner"
            )
        )
        sent = set(
            Notification.objects.filter(
                subscription=sub, event=Event.QUEUED_TOO_LONG, job__in=[j.pk for j in late]
            ).values_list("job_id", "key")
        )
        for job in late:
            key = f"queued:{job.queued_since.isoformat()}"
            if (job.pk, key) in sent:
                continue
            payload = job_payload(
                job,
                event=Event.QUEUED_TOO_LONG,
                occurred_at=now,
                queued_since=job.queued_since,
                minutes=sub.queued_minutes,
            )
            created.append(
                Notification.objects.create(
                    subscription=sub, job=job, event=Event.QUEUED_TOO_LONG, key=key, payload=payload
                )
            )
    _enqueue(n.pk for n in created)
    return len(created)


# --- delivery ---------------------------------------------------------------------------------------------


def backoff_seconds(attempts: int, *, base: float, cap: float) -> float:
    """How long to wait after the `attempts`-th failed attempt: base, 2 base, 4 base, ..., at most cap."""
    return float(min(cap, base * 2 ** max(0, attempts - 1)))


def notification_claim(notification_id: int) -> Notification | None:
    """Take a due pending notification for one attempt, or None if it is not due, not pending or taken:
    its next attempt moves past the attempt's longest duration, so a duplicate task (or the sweep) finds
    nothing to do, and a worker that dies mid-attempt leaves it to the sweep."""
    now = timezone.now()
    lease = now + timedelta(seconds=settings.NOTIFY_TIMEOUT_SECONDS * 2 + 30)
    taken = Notification.objects.filter(
        Q(next_attempt_at__lte=now) | Q(next_attempt_at=None),
        pk=notification_id,
        state=DeliveryState.PENDING,
    ).update(next_attempt_at=lease)
    if not taken:
        return None
    return Notification.objects.select_related("subscription", "subscription__tenant").get(pk=notification_id)


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: the HTTP status (webhooks), or the error that stopped it."""

    status_code: int | None = None
    error: str = ""
    duration_ms: int = 0
    skipped: bool = False


def _countdown_limit() -> float:
    """The longest wait a retry is queued with a countdown for: half the broker's visibility timeout (Redis
    hands an unacknowledged task, such as one waiting for its countdown in a worker, to another worker after
    that long). A later retry is queued by the sweep once it is due."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}) or {}
    return float(options.get("visibility_timeout", 3600)) / 2


@durable_service
def notification_record(*, notification_id: int, outcome: Outcome) -> DeliveryAttempt | None:
    """Log one attempt and decide what follows: delivered, another attempt after the back-off (queued on
    commit), or failed for good after NOTIFY_MAX_ATTEMPTS."""
    notification = Notification.objects.select_for_update().filter(pk=notification_id).first()
    if notification is None or notification.state != DeliveryState.PENDING:
        return None
    now = timezone.now()
    notification.attempts += 1
    next_at = None
    if outcome.skipped:
        notification.state = DeliveryState.SKIPPED
    elif not outcome.error:
        notification.state, notification.delivered_at = DeliveryState.DELIVERED, now
    elif notification.attempts >= settings.NOTIFY_MAX_ATTEMPTS:
        notification.state = DeliveryState.FAILED
    else:
        delay = backoff_seconds(
            notification.attempts,
            base=settings.NOTIFY_BACKOFF_SECONDS,
            cap=settings.NOTIFY_BACKOFF_MAX_SECONDS,
        )
        next_at = now + timedelta(seconds=delay)
        if delay <= _countdown_limit():

            def retry() -> None:
                try:
                    current_app.send_task(DELIVER_TASK, args=[notification_id], countdown=delay)
                except Exception:
                    log.warning("could not queue retry of notification %s; the sweep will", notification_id)

            transaction.on_commit(retry)
    notification.next_attempt_at = next_at
    notification.save()
    return DeliveryAttempt.objects.create(
        notification=notification,
        number=notification.attempts,
        at=now,
        status_code=outcome.status_code,
        error=outcome.error[:2000],
        duration_ms=outcome.duration_ms,
        next_retry_at=next_at,
    )


def notifications_due(*, now: datetime | None = None, limit: int = 500) -> list[int]:
    """Pending notifications whose next attempt is due (the sweep queues them: lost tasks, retries)."""
    now = now or timezone.now()
    rows = Notification.objects.filter(state=DeliveryState.PENDING, next_attempt_at__lte=now)
    return list(rows.order_by("next_attempt_at").values_list("pk", flat=True)[:limit])

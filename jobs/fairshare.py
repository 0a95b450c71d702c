"""The Django side of fair share over time: the runs the pure decay (jobs/core/fairshare.py) needs.

Why a module of its own: the scheduling cycle only asks it for one dict, in one query of a few columns,
and reads nothing at all while ``FAIR_SHARE_HALF_LIFE_SECONDS`` is 0 (the default: fair share by what
tenants hold now only).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import F, Q

from jobs.core import fairshare
from jobs.core.states import ACTIVE, TERMINAL
from jobs.models import Job
from tenants.models import Tenant


def tenants_decayed_usage(*, tenants: Sequence[Tenant], now: float) -> dict[str, fairshare.Triple]:
    """Each tenant's decayed usage at ``now`` by slug (absent: none), from its jobs that ran: a job holding
    resources counts from ``started_at`` to now, a finished one to ``finished_at`` if that is within
    :data:`jobs.core.fairshare.HORIZON_HALF_LIVES` half-lives. ``started_at`` is a job's first start, so a
    job requeued or halted and run again counts its time away too, and none of it while it is away."""
    half_life = float(settings.FAIR_SHARE_HALF_LIFE_SECONDS)
    if half_life <= 0 or not tenants:
        return {}
    since = datetime.fromtimestamp(fairshare.horizon(now=now, half_life=half_life), tz=UTC)
    rows = (
        Job.objects.filter(tenant__in=tenants, started_at__isnull=False)
        .filter(Q(status__in=ACTIVE) | Q(status__in=TERMINAL, finished_at__gte=since))
        .values_list(
            "tenant__slug",
            "status",
            "started_at",
            "finished_at",
            F("learners") * F("gpus"),
            F("learners") * F("cpu_millis"),
            F("learners") * F("memory_mib"),
        )
    )
    runs = (
        fairshare.Run(
            tenant=slug,
            start=started.timestamp(),
            end=None if status in ACTIVE or finished is None else finished.timestamp(),
            held=(gpus, cpu_millis, memory_mib),
        )
        for slug, status, started, finished, gpus, cpu_millis, memory_mib in rows
    )
    return fairshare.decayed_usage(runs, now=now, half_life=half_life)

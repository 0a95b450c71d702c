"""Celery beat with leader election (CELERY_BEAT_SCHEDULER): of several beats, only the leader sends tasks.

Two beats without it would send every periodic task twice. Some of those are safe to run twice (the
scheduler cycle takes its own advisory lock per cycle, reconcile and the sweeps are idempotent), but not all
of them cheaply (autotune, telemetry), so beat is elected rather than every task proved. A standby's tick
tries the lock (common/leader.py) every LEADER_RETRY_SECONDS and touches its heartbeat file (a standby is
healthy); once it leads, it ticks as plain beat does, from the moment it took over: every entry that came due
while it stood by is sent at once. A leader that loses its lock exits (common.leader.lost_exit).
"""

from __future__ import annotations

from typing import Any

from celery.beat import PersistentScheduler
from django.conf import settings

from common.leader import LeaderLock, lost_exit
from common.telemetry import heartbeat


class LeaderScheduler(PersistentScheduler):
    """PersistentScheduler that sends nothing unless this beat holds the `beat` leader lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.leader: LeaderLock | None = None
        if settings.LEADER_ELECTION:
            self.leader = LeaderLock(
                "beat",
                lease_seconds=settings.LEADER_LEASE_SECONDS,
                retry_seconds=settings.LEADER_RETRY_SECONDS,
            )

    def tick(self, *args: Any, **kwargs: Any) -> float:
        leader = self.leader
        if leader is None:
            return float(super().tick(*args, **kwargs))
        if not leader.held:
            if not leader.try_acquire():
                heartbeat("beat")
                return leader.retry_seconds
            leader.hold(on_lost=lost_exit("beat"))
        if not leader.leading:  # the guard exits the process; nothing is sent meanwhile
            return min(0.2, leader.retry_seconds)
        return min(float(super().tick(*args, **kwargs)), leader.retry_seconds)

    def close(self) -> None:
        super().close()
        if self.leader is not None:
            self.leader.release()

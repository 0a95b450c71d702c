"""What of the platform's attempts and jobs may still be in the cluster besides pods: the attempts that may
have a Service or Secret, and the checkpoint claims, kept in Redis between reconcile's resyncs.

Reconcile lists Services, Secrets and claims only once per resync period (an informer's resync, not every
round). In between it reads this copy: what its last resync listed, plus the attempts launches have begun
since (a launch remembers its attempt before it creates anything), less what teardowns have finished since.
An attempt in the copy that is no longer active is a teardown that never ran or failed half-way, and a claim
whose job row is gone is a job deletion that failed half-way: reconcile removes them in its next round, from
the cluster as it is then (the teardown lists what it deletes), without listing every namespace. What the
copy misses (an object created and left behind between two resyncs by something that did not remember it,
or a copy lost with Redis) waits for the next resync, which replaces the copy with what the cluster holds.

Redis failures are logged, never raised: the resync is the net under the copy.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, cast

import redis
from django.conf import settings

log = logging.getLogger(__name__)

Attempt = tuple[str, int]


def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1, decode_responses=True
    )


def _hash(client: redis.Redis, installation: str) -> dict[str, str]:
    return {str(field): str(value) for field, value in client.hgetall(key(installation)).items()}


def key(installation: str) -> str:
    """The Redis hash of one installation's copy: field `a:<job>:<attempt>` (the attempt's namespace) and
    `c:<namespace>/<claim>` (the claim's job), each with the time it was written."""
    return f"trainyard:leftovers:{installation}"


def _attempt_field(job_id: str, attempt: int) -> str:
    return f"a:{job_id}:{attempt}"


def _claim_field(namespace: str, name: str) -> str:
    return f"c:{namespace}/{name}"


def remember_attempt(installation: str, job_id: str, attempt: int, namespace: str) -> None:
    """An attempt may now have objects (a launch is about to create them)."""
    value = json.dumps({"ns": namespace, "at": time.time()})
    try:
        _redis().hset(key(installation), _attempt_field(str(job_id), attempt), value)
    except redis.RedisError as exc:
        log.warning("leftover copy: attempt %s/%s not remembered: %s", job_id, attempt, exc)


def forget_attempts(installation: str, job_id: str, attempt: int | None = None) -> None:
    """A teardown of the job's attempt (or of all its attempts) finished: nothing of it is left."""
    try:
        client = _redis()
        if attempt is not None:
            client.hdel(key(installation), _attempt_field(str(job_id), attempt))
            return
        prefix = f"a:{job_id}:"
        fields = [f for f in _hash(client, installation) if f.startswith(prefix)]
        if fields:
            client.hdel(key(installation), *fields)
    except redis.RedisError as exc:
        log.warning("leftover copy: attempts of %s not forgotten: %s", job_id, exc)


def forget_claims(
    installation: str, job_id: str | None = None, claims: Iterable[tuple[str, str]] = ()
) -> None:
    """Claims are gone: every claim of `job_id` (its deletion finished), or the (namespace, name) given."""
    try:
        client = _redis()
        fields = [_claim_field(ns, name) for ns, name in claims]
        if job_id is not None:
            for field, raw in _hash(client, installation).items():
                if field.startswith("c:") and json.loads(raw).get("job") == str(job_id):
                    fields.append(field)
        if fields:
            client.hdel(key(installation), *fields)
    except (redis.RedisError, ValueError) as exc:
        log.warning("leftover copy: claims not forgotten: %s", exc)


def resynced(
    installation: str,
    attempts: dict[Attempt, str],
    claims: Iterable[tuple[str, str, str]],
    started: float,
) -> None:
    """Replace the copy with what a resync listed (`attempts`: (job, attempt) -> namespace; `claims`:
    (namespace, name, job)), listed from `started` on. Entries written after `started` that the lists did
    not show (a launch remembered its attempt while the resync listed) stay."""
    fields: dict[str, str] = {
        _attempt_field(str(job_id), attempt): json.dumps({"ns": ns, "at": started})
        for (job_id, attempt), ns in attempts.items()
    }
    fields |= {_claim_field(ns, name): json.dumps({"job": job, "at": started}) for ns, name, job in claims}
    try:
        client = _redis()
        stale = []
        for field, raw in _hash(client, installation).items():
            if field in fields:
                continue
            try:
                written = float(json.loads(raw).get("at", 0))
            except ValueError:
                written = 0.0
            if written < started:
                stale.append(field)
        pipe = client.pipeline()
        if stale:
            pipe.hdel(key(installation), *stale)
        if fields:
            pipe.hset(key(installation), mapping=cast(Mapping[Any, Any], fields))
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("leftover copy not written: %s", exc)


def read(installation: str) -> tuple[dict[Attempt, str], list[tuple[str, str, str]]]:
    """The copy: (job, attempt) -> namespace, and (namespace, name, job) of the claims; empty when Redis
    cannot say (the next resync lists them)."""
    attempts: dict[Attempt, str] = {}
    claims: list[tuple[str, str, str]] = []
    try:
        stored = _hash(_redis(), installation)
    except redis.RedisError as exc:
        log.warning("leftover copy unreadable: %s", exc)
        return attempts, claims
    for field, raw in stored.items():
        try:
            value = json.loads(raw)
            if field.startswith("a:"):
                job_id, _, attempt = field[2:].rpartition(":")
                attempts[(job_id, int(attempt))] = str(value["ns"])
            elif field.startswith("c:"):
                namespace, _, name = field[2:].partition("/")
                claims.append((namespace, name, str(value["job"])))
        except (ValueError, KeyError):
            continue
    return attempts, claims


def clear(installation: str) -> None:
    """Drop the copy (tests)."""
    try:
        _redis().delete(key(installation))
    except redis.RedisError as exc:
        log.warning("leftover copy not cleared: %s", exc)

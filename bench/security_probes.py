"""Security probes: what an attacker with a member's login tries, counted by kind, as JSON lines.

Run: ``.venv/bin/python bench/security_probes.py`` (about a minute on 2 cores). It uses its own database
``trainyard_probe_bench`` (created if missing, migrated, flushed at start) and Redis db 13 (or
``PROBE_BENCH_REDIS_URL``) under ``portal.settings.test``; it drives the real URL routes and the real ASGI
application in-process (Django's test client, Channels' communicator), no cluster.

Kinds (one line each: ``tried``, ``as_expected``, ``server_errors`` (5xx or a crash), ``leaks``):

* ``cross_tenant``: owner, member and viewer of tenant A ask for every page, API route and WebSocket
  subscription of tenant B's job and tenant; expected 404 (``not found`` on the socket); a leak is B's job
  name, slug or spec appearing in any answer.
* ``bad_specs``: near-valid specs and FfDL manifests with random fields replaced by random or tricky values,
  submitted through the API; expected a 201 or a 4xx with field errors.
* ``policy``: host folders, metadata and cluster-internal S3 endpoints, foreign registries, top priorities,
  reserved env names and platform mount points, as a member of a default-policy tenant; expected 400 and
  nothing stored.
* ``tokens``: children outliving their parent token and expiries in the past; expected 400.
* ``login``: 20 wrong passwords for one user from one address; expected 429 from the 10th on.
* ``metrics``: an anonymous ``/metrics``; a leak is any tenant's slug in it.
"""

from __future__ import annotations

import copy
import json
import os
import random
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_DB = "trainyard_probe_bench"
BENCH_REDIS = os.environ.get("PROBE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"
for _name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
    os.environ[_name] = BENCH_REDIS

from django.conf import settings  # noqa: E402

settings.DATABASES["default"]["NAME"] = BENCH_DB

from bench.benchdb import prepare_database  # noqa: E402
from bench.engine_bench import emit  # noqa: E402

SPEC = {"name": "secret-project-x", "image": "python:3.11", "command": ["python", "-c", "print(1)"]}
BAD_SPECS = 3000
TRICKY: list[Any] = [
    "", "/", "//proc", "/scratch", "../x", "\x00", "é", "1e30", "-1", "0.1", "4Gi", 10**30, -(10**30),
    2**63, float("nan"), float("inf"), [], {}, [[[]]], "x" * 5000, None, True, 3.5,
]  # fmt: skip


class Tally:
    """Counts of one probe kind."""

    def __init__(self, kind: str) -> None:
        self.kind, self.counts = kind, Counter[str]()

    def record(self, *, expected: bool, server_error: bool = False, leak: bool = False) -> None:
        self.counts["tried"] += 1
        self.counts["as_expected"] += expected and not server_error and not leak
        self.counts["server_errors"] += server_error
        self.counts["leaks"] += leak

    def emit(self) -> None:
        emit(
            {
                "probe": self.kind,
                **{k: self.counts[k] for k in ("tried", "as_expected", "server_errors", "leaks")},
            }
        )


def client_for(user: Any) -> Any:
    from django.test import Client

    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def probe_cross_tenant() -> Tally:
    from asgiref.sync import async_to_sync
    from channels.testing import WebsocketCommunicator

    from jobs.services import job_submit
    from portal.asgi import application
    from tests.factories import make_tenant, member

    tally = Tally("cross_tenant")
    mine, theirs = make_tenant(slug="alpha"), make_tenant(slug="secret-team")
    victim = job_submit(tenant=theirs, user=member(theirs, "owner"), document=SPEC)
    secrets = ("secret-project-x", "secret-team")
    job, slug = victim.pk, theirs.slug
    reads = [
        f"/jobs/{job}/", f"/jobs/{job}/parts/", f"/jobs/{job}/log.txt", f"/tenants/{slug}/",
        f"/api/v1/jobs/{job}/", f"/api/v1/jobs/{job}/events/", f"/api/v1/jobs/{job}/logs/",
        f"/api/v1/jobs/{job}/metrics/", f"/api/v1/jobs/{job}/telemetry/", f"/api/v1/jobs/{job}/results/",
        f"/api/v1/jobs/{job}/results.zip", f"/api/v1/jobs/{job}/results/model.pt", f"/api/v1/jobs/{job}/code/",
        f"/api/v1/tenants/{slug}/", f"/api/v1/tenants/{slug}/members/", f"/api/v1/tenants/{slug}/policy/",
        f"/api/v1/jobs/?tenant={slug}",
    ]  # fmt: skip
    writes = [
        f"/jobs/{job}/cancel/", f"/jobs/{job}/retry/", f"/api/v1/jobs/{job}/cancel/", f"/api/v1/jobs/{job}/retry/",
        f"/api/v1/jobs/?tenant={slug}",
    ]  # fmt: skip
    for role in ("owner", "member", "viewer"):
        user = member(mine, role)
        client = client_for(user)
        for url in reads:
            response = client.get(url)
            body = response.content.decode(errors="replace")
            expected = response.status_code in (400, 404) or (
                url.startswith("/api/v1/jobs/?") and job not in body
            )
            tally.record(
                expected=expected,
                server_error=response.status_code >= 500,
                leak=any(s in body for s in secrets) and not url.endswith(f"tenant={slug}"),
            )
        for url in writes:
            response = client.post(url, json.dumps({"spec": SPEC}), content_type="application/json")
            tally.record(
                expected=response.status_code in (400, 403, 404), server_error=response.status_code >= 500
            )
        response = client.delete(f"/api/v1/jobs/{job}/")
        tally.record(expected=response.status_code == 404, server_error=response.status_code >= 500)
        cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"

        async def socket(cookie: str = cookie) -> list[dict[str, Any]]:
            headers = [(b"origin", b"http://testserver"), (b"cookie", cookie.encode())]
            comm = WebsocketCommunicator(application, "/ws/", headers=headers)
            await comm.connect()
            answers = []
            for message in (
                {"action": "subscribe", "job": job},
                {"action": "subscribe_tenant", "tenant": slug},
            ):
                await comm.send_json_to(message)
                answers.append(await comm.receive_json_from(timeout=10))
            await comm.disconnect()
            return answers

        for answer in async_to_sync(socket)():
            tally.record(
                expected=answer.get("error") == "not found", leak="secret-project-x" in json.dumps(answer)
            )
    from jobs.models import Job

    victim.refresh_from_db()
    assert victim.status == "queued" and Job.objects.filter(pk=job).exists(), "a write went through"
    return tally


def _mutate(base: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    document = copy.deepcopy(base)

    def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        found = [prefix] if prefix else []
        if isinstance(node, dict):
            for key, value in node.items():
                found += paths(value, (*prefix, key))
        elif isinstance(node, list):
            for index, value in enumerate(node):
                found += paths(value, (*prefix, index))
        return found

    for _ in range(rng.randint(1, 4)):
        path = rng.choice(paths(document))
        parent: Any = document
        try:
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = copy.deepcopy(rng.choice(TRICKY))
        except (KeyError, IndexError, TypeError):
            continue
    return document


def probe_bad_specs() -> Tally:
    from tests.factories import make_tenant, member

    tally = Tally("bad_specs")
    rng = random.Random(14)  # reproducible probes
    tenant = make_tenant(slug="fuzzed", max_queued_jobs=100000)
    client = client_for(member(tenant))
    trainyard = {
        **SPEC,
        "learners": 1,
        "resources": {"cpu": "500m", "memory": "256Mi", "gpus": 0},
        "env": {"A": "1"},
        "volumes": [{"name": "d", "kind": "data", "type": "pvc", "claim": "c", "mount_path": "/data"}],
        "retries": 1,
        "priority": 0,
    }
    ffdl = {
        "name": "m", "version": "1.0", "gpus": 0, "cpus": 1, "memory": "1Gb", "learners": 1,
        "data_stores": [{"id": "s", "type": "mount_cos", "training_data": {"container": "in"},
                         "connection": {"auth_url": "https://s3.example.com", "user_name": "u", "password": "p"}}],
        "framework": {"name": "pytorch", "version": "2.3.0", "command": "python train.py"},
    }  # fmt: skip
    for i in range(BAD_SPECS):
        document = _mutate(trainyard if i % 2 else ffdl, rng)
        body = json.dumps({"spec": json.dumps(document, allow_nan=True)}, allow_nan=True)
        response = client.post(f"/api/v1/jobs/?tenant={tenant.slug}", body, content_type="application/json")
        ok = response.status_code == 201 or (
            400 <= response.status_code < 500 and "errors" in response.json()
        )
        tally.record(expected=ok, server_error=response.status_code >= 500)
    return tally


def probe_policy() -> Tally:
    from jobs.models import Job
    from tests.factories import make_tenant, member

    tally = Tally("policy")
    tenant = make_tenant(slug="defaults")
    client = client_for(member(tenant))

    def volume(**fields: Any) -> dict[str, Any]:
        return {"name": "v", "kind": "data", "mount_path": "/v", **fields}

    attempts: list[dict[str, Any]] = [
        *({"volumes": [volume(type="host", path=p)]} for p in ("/", "//proc", "/etc", "/var/run", "/home", "/mnt")),
        *(
            {"volumes": [volume(type="s3", bucket="b", endpoint=e)]}
            for e in (
                "http://169.254.169.254", "http://127.0.0.1:6379", "http://10.0.0.1", "https://kubernetes.default.svc",
                "http://minio:9000", "http://metadata.google.internal", "http://s3.default.svc.cluster.local",
            )
        ),
        {"priority": 100},
        {"priority": 1},
        *({"env": {name: "x"}} for name in ("RANK", "MODEL_DIR", "OMP_NUM_THREADS", "TRAINING_ID", "TRAINYARD_X")),
        *({"volumes": [volume(type="pvc", claim="c", mount_path=p)]} for p in ("/scratch", "/dev/shm", "/checkpoints")),
    ]  # fmt: skip
    for fields in attempts:
        before = Job.objects.count()
        body = json.dumps({"spec": json.dumps({**SPEC, **fields})})
        response = client.post(f"/api/v1/jobs/?tenant={tenant.slug}", body, content_type="application/json")
        tally.record(
            expected=response.status_code == 400 and Job.objects.count() == before,
            server_error=response.status_code >= 500,
        )
    return tally


def probe_tokens() -> Tally:
    from django.test import Client
    from django.utils import timezone

    from tenants.tokens import token_create
    from tests.factories import make_tenant, member

    tally = Tally("tokens")
    user = member(make_tenant(slug="tokens"))
    _, short = token_create(user=user, name="short", expires_at=timezone.now() + timedelta(hours=1))
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {short}")
    for expires in (timedelta(days=2), timedelta(days=3650), timedelta(seconds=-1), timedelta(days=-365)):
        body = {"name": "child", "expires_at": (timezone.now() + expires).isoformat()}
        response = client.post("/api/v1/tokens/", body, content_type="application/json")
        tally.record(expected=response.status_code == 400, server_error=response.status_code >= 500)
    return tally


def probe_login() -> Tally:
    from django.test import Client

    from tests.factories import make_user

    tally = Tally("login")
    make_user("victim", password="right-password")  # noqa: S106 - a probe account in a scratch database
    limit = settings.AXES_FAILURE_LIMIT
    for attempt in range(1, 21):
        client = Client(raise_request_exception=False, REMOTE_ADDR="203.0.113.9")
        response = client.post("/login/", {"username": "victim", "password": f"guess-{attempt}"})
        tally.record(
            expected=response.status_code == (429 if attempt >= limit else 200),
            server_error=response.status_code >= 500,
        )
    return tally


def probe_metrics() -> Tally:
    from django.test import Client

    from tenants.models import Tenant

    tally = Tally("metrics")
    settings.METRICS_TOKEN = ""
    text = Client(raise_request_exception=False).get("/metrics").content.decode()
    slugs = list(Tenant.objects.values_list("slug", flat=True))
    tally.record(expected=bool(text), leak=any(f'"{slug}"' in text for slug in slugs))
    return tally


def main() -> None:
    prepare_database()
    tallies = [
        probe_cross_tenant(),
        probe_bad_specs(),
        probe_policy(),
        probe_tokens(),
        probe_login(),
        probe_metrics(),
    ]
    for tally in tallies:
        tally.emit()
    total = sum((t.counts for t in tallies), Counter[str]())
    emit({"probe": "all", **{k: total[k] for k in ("tried", "as_expected", "server_errors", "leaks")}})


if __name__ == "__main__":
    main()

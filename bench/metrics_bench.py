"""Metrics benchmark: charting a run of a million metric points, downsampled in PostgreSQL against reading
every point a page at a time, through the REST API (Django's test client: the view, the query and the
JSON rendering, no network).

Run: ``.venv/bin/python bench/metrics_bench.py [--points N] [--runs N] [--buckets N] [--page-size N]``
(one JSON line per figure). It never touches the developer's data: database ``trainyard_metrics_bench``
(created if missing, migrated, flushed at start), settings ``portal.settings.test``, Redis db 12 (or
``METRICS_BENCH_REDIS_URL``; nothing is sent to it).

Data: one job whose one learner reported two metrics (``loss`` and ``acc``), `--points` (1,000,000) in all,
inserted in one ``INSERT ... SELECT generate_series`` and analysed. Figures, each the median of `--runs`
(5) with min and max:

1. ``downsampled``: ``GET /metrics/?buckets=N`` (default 1000: each of the two series in at most 1000
   buckets of min/max/mean/last), and the same for one metric (``?name=loss&buckets=N``);
2. ``raw_pages``: every point through ``GET /metrics/?page_size=M`` (default 10,000, the largest page)
   following ``next`` to the end (fewer runs: 3 unless ``--runs`` is smaller); ``ratio`` = raw / downsampled.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.benchdb import prepare_database  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")
os.environ["REDIS_URL"] = os.environ.get("METRICS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
BENCH_DB = "trainyard_metrics_bench"


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def summary(values: list[float]) -> dict[str, object]:
    return {"median_ms": round(statistics.median(values), 1), "min_ms": round(min(values), 1),
            "max_ms": round(max(values), 1), "n": len(values)}  # fmt: skip


def seed(points: int) -> tuple[Any, str]:
    """A tenant, a member and one job with `points` metric points (half loss, half acc); returns the
    member and the job's id."""
    from django.db import connection

    from jobs.services import job_submit
    from tests.factories import make_tenant, member

    tenant = make_tenant("bench")
    user = member(tenant)
    spec = {"name": "big", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"]}
    job = job_submit(tenant=tenant, user=user, document=spec)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_metricsample (job_id, learner, attempt, name, step, value, ts, log_seq)
            SELECT %(job)s, 0, 1, CASE WHEN i %% 2 = 0 THEN 'loss' ELSE 'acc' END, i / 2,
                   CASE WHEN i %% 2 = 0 THEN 2.0 / (i / 2 + 1) + (i %% 7) * 0.001 ELSE (i / 2) / %(half)s::float8 END,
                   now() + (i || ' milliseconds')::interval, i + 1
            FROM generate_series(0, %(n)s - 1) AS i
            """,
            {"job": job.pk, "n": points, "half": points // 2},
        )
        cursor.execute("VACUUM ANALYZE jobs_metricsample")
    emit({"figure": "seed", "points": points, "seconds": round(time.perf_counter() - started, 1)})
    return user, job.pk


def timed(call: Any, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--buckets", type=int, default=1000)
    parser.add_argument("--page-size", type=int, default=10_000)
    args = parser.parse_args()
    prepare_database(BENCH_DB)
    from django.test import Client

    user, job_id = seed(args.points)
    client = Client()
    client.force_login(user)
    url = f"/api/v1/jobs/{job_id}/metrics/"

    def downsampled(query: str) -> None:
        response = client.get(f"{url}?{query}")
        assert response.status_code == 200, response.content[:300]
        series = response.json()["series"]
        assert sum(s["points"] for s in series) == (args.points if "name" not in query else args.points // 2)

    def raw() -> None:
        got, link = 0, f"{url}?page_size={args.page_size}"
        while link:
            body = client.get(link).json()
            got += len(body["results"])
            link = body["next"]
        assert got == args.points, got

    downsampled(f"buckets={args.buckets}")  # warm the cache as a chart's second look would find it
    both = timed(lambda: downsampled(f"buckets={args.buckets}"), args.runs)
    emit(
        {"figure": "downsampled", "query": f"buckets={args.buckets}", "points": args.points, **summary(both)}
    )
    one = timed(lambda: downsampled(f"name=loss&buckets={args.buckets}"), args.runs)
    emit({"figure": "downsampled", "query": f"name=loss&buckets={args.buckets}", **summary(one)})
    pages = timed(raw, min(args.runs, 3))
    emit({"figure": "raw_pages", "page_size": args.page_size, "pages": -(-args.points // args.page_size),
          **summary(pages), "ratio": round(statistics.median(pages) / statistics.median(both), 1)})  # fmt: skip


if __name__ == "__main__":
    main()

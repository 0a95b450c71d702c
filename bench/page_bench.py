"""Page-load benchmark: the jobs list with 100 jobs and a job page with 30,000 log lines, in headless
Chromium (Debian's /usr/bin/chromium through Playwright) against a real daphne server and PostgreSQL.

Run: ``.venv/bin/python bench/page_bench.py [--runs N]`` (about a minute on 2 cores; one JSON line per
figure). It never touches the developer's data: database ``trainyard_page_bench`` (created if missing,
migrated, flushed at start), settings ``portal.settings.test`` here and ``tests.e2e.settings`` in daphne,
Redis db 12 (or ``PAGE_BENCH_REDIS_URL``) for the Channels layer.

Data: one tenant and one user; 100 finished jobs, each with 6 events and 200 metric points of two metrics
(``loss``, ``accuracy``); one of them also has 30,000 log lines (three learners of 10,000 lines, some with
ANSI colours) and another 1,200. Each figure is the median of ``--runs`` (5) fresh page loads (a new
browser context each: no cache), with its min and max:

1. ``jobs_list``: ``/jobs/?per_page=100`` against the same list at 25 jobs per page (``baseline``):
   ``server_ms`` (request start to response end: the server's render and the transfer), ``dom_ms`` (to
   DOMContentLoaded), ``ready_ms`` (to the load event), and ``ratio`` = 100-job ready / 25-job ready.
2. ``job_page_log``: the job page until its whole log history is in the log viewer (``#log[data-loaded]``,
   then the ``#log .ln`` count is checked against the lines stored), for 30,000 lines against the 1,200-line job
   (``baseline``); ``lines_per_s`` and the ratio of times (30 times the lines).

Everything started is stopped in ``finally``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.benchdb import prepare_database  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")
BENCH_DB = "trainyard_page_bench"
BENCH_REDIS = os.environ.get("PAGE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
os.environ["REDIS_URL"] = BENCH_REDIS
CHROMIUM = "/usr/bin/chromium"
JOBS = 100
BIG_LOG = 30_000
SMALL_LOG = 1_200
PASSWORD = "bench-pw"  # noqa: S105 (a throwaway login in the bench's own database)


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def summary(values: list[float]) -> dict[str, object]:
    return {"median": round(statistics.median(values), 1), "min": round(min(values), 1),
            "max": round(max(values), 1), "n": len(values)}  # fmt: skip


def seed() -> tuple[str, str]:
    """The tenant, user, jobs, events, metrics and logs; returns the big and the small log's job ids."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from jobs.core.states import JobStatus
    from jobs.models import Job, JobEvent, LogLine, MetricSample
    from tenants.models import Quota, Tenant
    from tenants.services import membership_set

    rng = random.Random(7)
    user = get_user_model().objects.create_user("bench", password=PASSWORD)
    tenant = Tenant.objects.create(slug="bench", name="Bench")
    Quota.objects.create(tenant=tenant, gpus=8, cpu_millis=64000, memory_mib=262144, max_queued_jobs=1000)
    membership_set(tenant=tenant, user=user, role="member")  # with its permissions, as the pages check them
    now = timezone.now()
    spec = {"name": "x", "image": "pytorch/pytorch:2.3", "command": ["python", "train.py"], "learners": 3,
            "resources": {"gpus": 0, "cpu_millis": 1000, "memory_mib": 1024}}  # fmt: skip
    jobs = Job.objects.bulk_create(
        Job(tenant=tenant, owner=user, name=f"run-{i:03d}", spec=spec | {"name": f"run-{i:03d}"},
            status=JobStatus.SUCCEEDED, learners=3, cpu_millis=1000, memory_mib=1024, attempt=1,
            started_at=now - timedelta(minutes=90 - i // 2), finished_at=now - timedelta(minutes=30 - i // 4))
        for i in range(JOBS)
    )  # fmt: skip
    events, points = [], []
    for job in jobs:
        for kind, to in (("submitted", "queued"), ("transition", "starting"), ("transition", "running")):
            events.append(JobEvent(job=job, kind=kind, to_status=to, reason="Bench", message="bench"))
        events += [JobEvent(job=job, kind="transition", to_status="succeeded", reason="Done", message="")] * 3
        for step in range(100):
            for name, value in (("loss", 2.0 / (step + 1) + rng.random() * 0.01), ("accuracy", step / 100)):
                points.append(MetricSample(job=job, learner=0, attempt=1, name=name, step=step, value=value,
                                           log_seq=step + 1, ts=now))  # fmt: skip
    JobEvent.objects.bulk_create(events, batch_size=2000)
    MetricSample.objects.bulk_create(points, batch_size=5000)
    big, small = jobs[0], jobs[1]
    for job, total in ((big, BIG_LOG), (small, SMALL_LOG)):
        per_learner = total // 3
        lines = [
            LogLine(job=job, learner=learner, attempt=1, seq=seq, ts=now + timedelta(milliseconds=seq),
                    text=(f"\x1b[32mstep {seq}\x1b[0m loss={2.0 / seq:.5f} lr=0.001 samples_per_sec=912345.6"
                          if seq % 10 == 0 else f"[learner {learner}] epoch {seq // 1000} batch {seq} ok"))
            for learner in range(3)
            for seq in range(1, per_learner + 1)
        ]  # fmt: skip
        LogLine.objects.bulk_create(lines, batch_size=5000)
    return big.pk, small.pk


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _answers(url: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"daphne exited with {process.returncode}")
    try:
        with urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 (a local URL)
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def daphne() -> Iterator[str]:
    port = _free_port()
    log = Path(tempfile.mkstemp(prefix="page-bench-daphne-", suffix=".log")[1])
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "tests.e2e.settings", "E2E_DATABASE_NAME": BENCH_DB,
                        "LOG_LEVEL": "WARNING"}  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "tests.e2e.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(f"{url}/healthz", process), 30, "daphne to answer")
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.unlink(missing_ok=True)


NAVIGATION = """() => {
  const n = performance.getEntriesByType("navigation")[0];
  return {server: n.responseEnd - n.requestStart, dom: n.domContentLoadedEventEnd, load: n.loadEventEnd};
}"""


def _context(browser: Any, url: str) -> Any:
    context = browser.new_context(base_url=url, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(120_000)
    page = context.new_page()
    page.goto("/login/")
    page.fill("input[name=username]", "bench")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "/login/" not in u)
    return context


def list_load(browser: Any, url: str, per_page: int) -> dict[str, float]:
    context = _context(browser, url)
    try:
        page = context.new_page()
        page.goto(f"/jobs/?per_page={per_page}", wait_until="load")
        rows = page.locator("tr[data-job-id]").count()
        if rows != per_page:
            raise RuntimeError(f"the list shows {rows} jobs, not {per_page}")
        timing = page.evaluate(NAVIGATION)
        return {"server_ms": timing["server"], "dom_ms": timing["dom"], "ready_ms": timing["load"]}
    finally:
        context.close()


def log_load(browser: Any, url: str, job_id: str, lines: int) -> dict[str, float]:
    context = _context(browser, url)
    try:
        page = context.new_page()
        page.goto(f"/jobs/{job_id}/", wait_until="commit")
        page.wait_for_selector("#log[data-loaded]", state="attached")  # set once the whole history is in
        shown = page.evaluate("performance.now()")
        timing = page.evaluate(NAVIGATION)
        count = page.locator("#log .ln").count()
        if count != lines:
            raise RuntimeError(f"the log viewer shows {count} lines, not {lines}")
        return {"server_ms": timing["server"], "dom_ms": timing["dom"], "ready_ms": shown}
    finally:
        context.close()


def measure(runs: int, load: Callable[[], dict[str, float]]) -> dict[str, dict[str, object]]:
    load()  # one unmeasured warm-up: the server's first request imports and compiles templates
    samples = [load() for _ in range(runs)]
    return {name: summary([s[name] for s in samples]) for name in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    prepare_database(BENCH_DB)
    big, small = seed()
    from django.db import connections

    connections.close_all()
    from playwright.sync_api import sync_playwright

    with daphne() as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            full = measure(args.runs, lambda: list_load(browser, url, 100))
            base = measure(args.runs, lambda: list_load(browser, url, 25))
            ratio = full["ready_ms"]["median"] / base["ready_ms"]["median"]
            emit({"figure": "jobs_list", "jobs": 100, **full, "baseline": {"jobs": 25, **base},
                  "ratio": round(ratio, 2)})  # fmt: skip
            full = measure(args.runs, lambda: log_load(browser, url, big, BIG_LOG))
            base = measure(args.runs, lambda: log_load(browser, url, small, SMALL_LOG))
            ready = full["ready_ms"]["median"]
            ratio = ready / base["ready_ms"]["median"]
            emit({"figure": "job_page_log", "lines": BIG_LOG, **full,
                  "lines_per_s": round(BIG_LOG / (ready / 1000)),
                  "baseline": {"lines": SMALL_LOG, **base}, "ratio": round(ratio, 2),
                  "load_1min": os.getloadavg()[0]})  # fmt: skip
        finally:
            browser.close()


if __name__ == "__main__":
    main()

"""Tuner benchmark: the whole engine on kubesim (as bench/engine_bench.py runs it) plus beat's telemetry
and autotune tasks every second, on the example PyTorch job (examples/train/train.py).

Run: ``.venv/bin/python bench/tuner_bench.py`` (about 3 minutes; one JSON line per figure). Database
``trainyard_tuner_bench`` (or ``$TUNER_BENCH_DB``; created, migrated, flushed), Redis db 14 on a queue of
its own, kubesim in a temporary folder; everything is stopped at the end.

1. ``speedup``: the example job with a CPU-heavy input pipeline (``--input-cost``), started at the
   bottom of its range ``cpu: [1, 2]``: seconds from running to the tuner's action, the diagnosis, and
   samples/s after over before (the tuner's own measurement: the stable window before the change against
   the stable window of the new attempt), plus whether the change was kept.
2. ``revert``: the example's lock-step variant (``--sync-threads``) on tiny batches: each batch's
   augmentation is split over as many Python threads as the CPU limit gives intra-op threads
   (``threads: auto``), which meet at every step, so at 2 CPUs the hand-offs cost more than the second
   thread gives (measured here: about 0.55-0.7x the 1-CPU speed). The tuner sees it CPU-bound at 1 CPU,
   scales it to 2, measures it slower and reverts it (``reverted: true``, with the ratio that triggered
   it).

``--only speedup|revert`` runs one scenario.

Windows are shortened (8 s, 5 looks) so the run stays short; production defaults are in docs/tuning.md.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import engine_bench as eb  # noqa: E402

eb.BENCH_DB = os.environ.get("TUNER_BENCH_DB", "trainyard_tuner_bench")
eb.settings.DATABASES["default"]["NAME"] = eb.BENCH_DB
settings = eb.settings
emit = eb.emit


def tuner_beat(stop: threading.Event) -> None:
    from django.db import connection

    from jobs.services.tuning import autotune_running
    from jobs.telemetry import telemetry_record_running

    while not stop.wait(1.0):
        try:
            telemetry_record_running()
            autotune_running()
        except Exception as exc:
            print(f"tuner beat: {exc!r}", file=sys.stderr)
    connection.close()


def scenario(
    label: str, spec: dict[str, Any], user: Any, tenant: Any, timeout: float = 240
) -> dict[str, Any]:
    from jobs.core.states import JobStatus
    from jobs.models import Job, JobEvent
    from jobs.services import job_cancel, job_submit

    job = job_submit(tenant=tenant, user=user, document=spec)
    eb.wait_for(lambda: Job.objects.get(pk=job.pk).status == JobStatus.RUNNING, 90, f"{label} running")
    running_at = time.monotonic()
    scaled = eb.wait_for(
        lambda: JobEvent.objects.filter(job=job, kind="tuning", reason="Scaled").first(), timeout, "tuner act"
    )
    acted_after = time.monotonic() - running_at
    verdict = eb.wait_for(
        lambda: JobEvent.objects.filter(job=job, kind="tuning", reason__in=("Kept", "Reverted")).first(),
        timeout,
        "the tuner's verdict",
    )
    job.refresh_from_db()
    evidence = verdict.data["evidence"]
    record = {
        "figure": label,
        "seconds_running_to_tuner_action": round(acted_after, 1),
        "diagnosis": scaled.data["evidence"]["diagnosis"],
        "cpu_util_before": scaled.data["evidence"]["cpu_util"],
        "from": scaled.data["from"],
        "to": scaled.data["to"],
        "samples_per_sec_before": evidence.get("speed_before"),
        "samples_per_sec_after": evidence.get("speed_after"),
        "ratio_after_over_before": evidence.get("speed_ratio"),
        "verdict": verdict.reason,
        "reverted": verdict.reason == "Reverted",
        "retries_used": JobEvent.objects.filter(
            job=job, to_status=JobStatus.REQUEUED, data__counts=True
        ).count(),
        "attempt": job.attempt,
    }
    if not job.is_terminal:
        job_cancel(job=job, user=user)
    return record


def main() -> None:
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv[:-1] else None
    started = time.perf_counter()
    eb.prepare_database()
    settings.TELEMETRY_INTERVAL_SECONDS = 1
    settings.TUNING_WINDOW_SECONDS = 8
    settings.TUNING_MIN_SAMPLES = 5
    settings.TUNING_STABLE_CV = 0.3
    settings.TUNING_CPU_HIGH = 0.7
    settings.TUNING_MAX_CHANGES = 2
    from examples.train.localspec import example_spec
    from tests.factories import make_tenant, member

    stop = threading.Event()
    with eb.running_engine(eb.PodClock()):
        beat = threading.Thread(target=tuner_beat, args=(stop,), daemon=True)
        beat.start()
        try:
            tenant = make_tenant("bench")
            user = member(tenant)
            common = ["--steps=1000000", "--log-every=10", "--checkpoint-every=20"]
            fast = example_spec(name="cpu-starved", args=[*common, "--batch-size=128", "--input-cost=8"])
            if only in (None, "speedup"):
                emit(scenario("speedup", fast, user, tenant))
            tiny = example_spec(
                name="tiny-ops",
                args=[
                    *common,
                    "--log-every=100",
                    "--batch-size=16",
                    "--features=64",
                    "--hidden=64",
                    "--input-cost=2",
                    "--sync-threads",
                ],
            )
            if only in (None, "revert"):
                emit(scenario("revert", tiny, user, tenant))
        finally:
            stop.set()
            beat.join(timeout=10)
    emit({"bench": "tuner_bench", "wall_s": round(time.perf_counter() - started, 1)})


if __name__ == "__main__":
    main()

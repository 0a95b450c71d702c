"""Tuner benchmark: the whole engine on kubesim (as bench/engine_bench.py runs it) plus beat's telemetry
and autotune tasks every second, on the example PyTorch job (examples/train/train.py).

Run: ``.venv/bin/python bench/tuner_bench.py [--repeat N] [--steps N]`` (one JSON line per figure; a
round of the speedup is about 5 minutes on a quiet machine). Database ``trainyard_tuner_bench`` (or
``$TUNER_BENCH_DB``; created, migrated, flushed), Redis db 14 on a queue of its own, kubesim in a temporary
folder; everything is stopped at the end.

1. ``speedup``: the example job with a CPU-heavy input pipeline (``--input-cost``) for ``--steps`` steps,
   three ways in each round, one after the other so a noisy neighbour hits all three alike: fixed at the
   low CPU, fixed at the high CPU, and tuned from the bottom of ``cpu: [low, high]``. ``--cpus LOW,HIGH``;
   by default 1,2 on a host with 4 cores or more, else 0.5,1: on 2 cores a 2-CPU pod shares its cores with
   the platform under test (engine, kubesim streaming its logs, PostgreSQL: 0.2-0.3 CPU during a run), so
   1 -> 2 CPUs has little to give there (docs/tuning.md, "Where the speed-up was lost"). Per round
   (``speedup_round``) and as medians over ``--repeat`` rounds (``speedup``): seconds from running to the
   tuner's first decision (and in windows), the restart's downtime (decision -> running again -> first
   metric line), the steps taken, the steady speed of each attempt (the median metric line after the first
   ``WARMUP_LINES``), the tuner's own ratio, end to end (submit -> succeeded) low / tuned, low / high,
   tuned / high, and the seconds the tuned run lost against the fixed-high one (before the decision, the
   restart, the rest).
2. ``revert``: the example's lock-step variant (``--sync-threads``) on tiny batches: each batch's
   augmentation is split over as many Python threads as the CPU limit gives intra-op threads
   (``threads: auto``), which meet at every step, so at 2 CPUs the hand-offs cost more than the second
   thread gives (measured here: about 0.55-0.7x the 1-CPU speed). The tuner sees it CPU-bound at 1 CPU,
   scales it to 2, measures it slower and reverts it (``reverted: true``, with the ratio that triggered
   it).
3. ``fit`` (``--only fit``, or ``--fit`` after the speedup): the same job fixed at ``--fit-sizes`` CPUs
   (``--repeat`` runs each), an Amdahl fit to the median speeds (jobs/core/tuning/speedfit.py) with its
   residuals; ``--write-fit`` stores it in jobs/core/tuning/speed_fit.json, which the trace simulator's
   speed model reads (docs/tuning.md).

``--only speedup|revert|fit`` runs one scenario.

Windows are shortened (8 s, 5 looks after 2 warm-up looks, telemetry every second) so the run stays
short; production defaults are in docs/tuning.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import engine_bench as eb  # noqa: E402

eb.BENCH_DB = os.environ.get("TUNER_BENCH_DB", "trainyard_tuner_bench")
eb.settings.DATABASES["default"]["NAME"] = eb.BENCH_DB
settings = eb.settings
emit = eb.emit
WARMUP_LINES = 3
"""Metric lines (10 steps each) of an attempt left out of its steady speed: its start-up."""


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


def steady_speed(job_id: str, attempt: int, skip: int = WARMUP_LINES) -> float | None:
    """The median samples/s the job printed in one attempt, its first ``skip`` metric lines left out
    (the start-up: thread pools, first batches). The benchmark's own yardstick, the same for every run."""
    from jobs.models import MetricSample

    values = list(
        MetricSample.objects.filter(job_id=job_id, attempt=attempt, name="samples_per_sec")
        .order_by("step")
        .values_list("value", flat=True)
    )[skip:]
    return round(statistics.median(values), 1) if values else None


def first_metric_at(job_id: str, attempt: int) -> float | None:
    from jobs.models import MetricSample

    first = MetricSample.objects.filter(job_id=job_id, attempt=attempt).order_by("ts").first()
    return first.ts.timestamp() if first else None


def event_at(job: Any, **filters: Any) -> float | None:
    from jobs.models import JobEvent

    event = JobEvent.objects.filter(job=job, **filters).order_by("created_at").first()
    return event.created_at.timestamp() if event else None


def run_to_end(label: str, spec: dict[str, Any], user: Any, tenant: Any, timeout: float) -> dict[str, Any]:
    """Submit ``spec`` and wait for it to succeed: wall seconds submit -> succeeded, and per attempt the
    steady samples/s (median after the warm-up lines)."""
    from jobs.core.states import JobStatus
    from jobs.models import Job
    from jobs.services import job_submit

    submitted = time.time()
    job = job_submit(tenant=tenant, user=user, document=spec)
    eb.wait_for(lambda: Job.objects.get(pk=job.pk).is_terminal, timeout, f"{label} to end")
    job.refresh_from_db()
    if job.status != JobStatus.SUCCEEDED:
        raise RuntimeError(f"{label} ended {job.status}: {job.message}")
    ended = event_at(job, to_status=JobStatus.SUCCEEDED) or time.time()
    return {
        "job": job,
        "wall_s": round(ended - submitted, 2),
        "steady": {a: steady_speed(job.pk, a) for a in range(1, job.attempt + 1)},
        "submitted": submitted,
        "ended": ended,
    }


def fixed_run(cpu: float, steps: int, user: Any, tenant: Any) -> dict[str, Any]:
    """The starved job at a fixed CPU (no tuning range; threads sized to it as the tuner would)."""
    from examples.train.localspec import example_spec

    spec = example_spec(
        name=f"fixed-{round(cpu * 1000)}m",
        args=starved_args(steps),
        cpu=f"{round(cpu * 1000)}m",
        tuning={"threads": "auto"},
    )
    run = run_to_end(f"fixed {cpu:g} CPU", spec, user, tenant, timeout=steps / 10 + 120)
    return {"cpus": cpu, "wall_s": run["wall_s"], "samples_per_sec": run["steady"][1]}


def tuned_run(cpus: tuple[float, float], steps: int, user: Any, tenant: Any) -> dict[str, Any]:
    """The starved job at the bottom of ``cpu: [low, high]``, tuned; the breakdown of where its time went."""
    from examples.train.localspec import example_spec
    from jobs.core.states import JobStatus
    from jobs.models import JobEvent

    low, high = cpus
    spec = example_spec(
        name="cpu-starved",
        args=starved_args(steps),
        cpu=f"{round(low * 1000)}m",
        tuning={"threads": "auto", "cpu": [f"{round(low * 1000)}m", f"{round(high * 1000)}m"]},
    )
    run = run_to_end("tuned", spec, user, tenant, timeout=steps / 10 + 180)
    job = run["job"]
    running = event_at(job, to_status=JobStatus.RUNNING)
    decisions = list(
        JobEvent.objects.filter(job=job, kind="tuning", reason__in=("Scaled", "Reverted", "Kept")).order_by(
            "created_at"
        )
    )
    scaled = [e for e in decisions if e.reason == "Scaled"]
    verdict = next((e for e in decisions if e.reason in ("Kept", "Reverted")), None)
    first = scaled[0] if scaled else None
    restart = None
    if first is not None:
        next_attempt = first.data["attempt"] + 1
        back = first_metric_at(job.pk, next_attempt)
        rerun = event_at(job, to_status=JobStatus.RUNNING, created_at__gt=first.created_at)
        restart = {
            "scaled_to_running_s": _gap(first.created_at.timestamp(), rerun),
            "running_to_first_metric_s": _gap(rerun, back),
            "downtime_s": _gap(first.created_at.timestamp(), back),
        }
    evidence = (verdict.data.get("evidence") or {}) if verdict else {}
    return {
        "wall_s": run["wall_s"],
        "submitted_to_running_s": _gap(run["submitted"], running),
        "running_to_first_decision_s": _gap(running, first.created_at.timestamp() if first else None),
        "first_decision_window_s": first.data["evidence"].get("window_seconds") if first else None,
        "steps_taken": [f"{e.data['from']['cpu_millis']}m->{e.data['to']['cpu_millis']}m" for e in scaled],
        "restart": restart,
        "verdict": verdict.reason if verdict else None,
        "tuner_speed_before": first.data.get("speed_before") if first else None,
        "tuner_speed_after": evidence.get("speed_after"),
        "tuner_ratio_after_over_before": evidence.get("speed_ratio"),
        "steady_speed_per_attempt": run["steady"],
        "attempts": job.attempt,
        "first_change_attempt": first.data["attempt"] + 1 if first else None,
    }


def _gap(start: float | None, end: float | None) -> float | None:
    return round(end - start, 2) if start is not None and end is not None else None


def starved_args(steps: int) -> list[str]:
    return [
        f"--steps={steps}",
        "--log-every=10",
        "--checkpoint-every=20",
        "--batch-size=128",
        "--input-cost=8",
    ]


def speedup(cpus: tuple[float, float], steps: int, repeat: int, user: Any, tenant: Any) -> dict[str, Any]:
    """``repeat`` rounds of (low CPU fixed, high CPU fixed, tuned from low), interleaved so a noisy
    neighbour hits all three alike; every figure is emitted per round and the medians at the end."""
    rounds = []
    low, high = cpus
    for k in range(repeat):
        one = fixed_run(low, steps, user, tenant)
        two = fixed_run(high, steps, user, tenant)
        tuned = tuned_run(cpus, steps, user, tenant)
        steady = tuned["steady_speed_per_attempt"]
        before, after = steady.get(1), steady.get(tuned["first_change_attempt"] or 0)
        record = {
            "figure": "speedup_round",
            "round": k + 1,
            "steps": steps,
            "cpus_low_high": list(cpus),
            "fixed_low": one,
            "fixed_high": two,
            "tuned": tuned,
            "possible_speedup_high_over_low": _ratio(two["samples_per_sec"], one["samples_per_sec"]),
            "tuned_speedup_after_over_before": _ratio(after, before),
            "end_to_end_low_over_tuned": _ratio(one["wall_s"], tuned["wall_s"]),
            "end_to_end_low_over_high": _ratio(one["wall_s"], two["wall_s"]),
            "end_to_end_tuned_over_high": _ratio(tuned["wall_s"], two["wall_s"]),
            "first_decision_in_windows": _ratio(
                tuned["running_to_first_decision_s"], settings.TUNING_WINDOW_SECONDS
            ),
            "seconds_lost_to_high": loss_breakdown(one, two, tuned),
        }
        emit(record)
        rounds.append(record)

    def med(get: Any) -> float | None:
        values = [v for v in (get(r) for r in rounds) if v is not None]
        return round(statistics.median(values), 3) if values else None

    return {
        "figure": "speedup",
        "rounds": repeat,
        "steps": steps,
        "cpus_low_high": list(cpus),
        "median_running_to_first_decision_s": med(lambda r: r["tuned"]["running_to_first_decision_s"]),
        "median_restart_downtime_s": med(lambda r: (r["tuned"]["restart"] or {}).get("downtime_s")),
        "median_scaled_to_running_s": med(lambda r: (r["tuned"]["restart"] or {}).get("scaled_to_running_s")),
        "median_running_to_first_metric_s": med(
            lambda r: (r["tuned"]["restart"] or {}).get("running_to_first_metric_s")
        ),
        "steps_taken": [r["tuned"]["steps_taken"] for r in rounds],
        "verdicts": [r["tuned"]["verdict"] for r in rounds],
        "median_speed_low": med(lambda r: r["fixed_low"]["samples_per_sec"]),
        "median_speed_high": med(lambda r: r["fixed_high"]["samples_per_sec"]),
        "median_possible_speedup": med(lambda r: r["possible_speedup_high_over_low"]),
        "median_tuned_speedup_after_over_before": med(lambda r: r["tuned_speedup_after_over_before"]),
        "median_tuner_measured_ratio": med(lambda r: r["tuned"]["tuner_ratio_after_over_before"]),
        "median_end_to_end_low_over_tuned": med(lambda r: r["end_to_end_low_over_tuned"]),
        "median_end_to_end_low_over_high": med(lambda r: r["end_to_end_low_over_high"]),
        "median_end_to_end_tuned_over_high": med(lambda r: r["end_to_end_tuned_over_high"]),
    }


def loss_breakdown(low: dict[str, Any], high: dict[str, Any], tuned: dict[str, Any]) -> dict[str, Any]:
    """Where the tuned run's extra seconds over the fixed-high run went: the time it ran at the low speed
    before the tuner acted (each such second did ``low/high`` of a second's work at high), the restart's
    downtime, and the rest (start-up, checkpoint steps redone, noise)."""
    total = tuned["wall_s"] - high["wall_s"]
    waited = tuned["running_to_first_decision_s"]
    share = (low["samples_per_sec"] or 0) / (high["samples_per_sec"] or 1)
    before = round(waited * (1 - share), 2) if waited is not None else None
    restart = (tuned["restart"] or {}).get("downtime_s")
    rest = round(total - (before or 0) - (restart or 0), 2)
    return {"total_s": round(total, 2), "before_decision_s": before, "restart_s": restart, "other_s": rest}


def starved_cpus(option: str | None) -> tuple[float, float]:
    """The speedup scenario's (low, high) CPUs: as asked, else by the host's core count."""
    if option:
        low, high = (float(v) for v in option.split(","))
        return low, high
    return (1.0, 2.0) if (os.cpu_count() or 1) >= 4 else (0.5, 1.0)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def fit(sizes: list[float], steps: int, repeat: int, user: Any, tenant: Any, write: bool) -> dict[str, Any]:
    """The starved job at each CPU size (``repeat`` runs each, interleaved; the median speed per size),
    an Amdahl fit to the medians, its residuals; with ``write`` stored where the simulator reads it."""
    from jobs.core.tuning.speedfit import FIT_PATH, fit_amdahl, save_fit

    runs: dict[float, list[float]] = {c: [] for c in sizes}
    for _ in range(repeat):
        for cpus in sizes:
            speed = fixed_run(cpus, steps, user, tenant)["samples_per_sec"]
            if speed is not None:
                runs[cpus].append(speed)
                emit({"figure": "fit_run", "cpus": cpus, "samples_per_sec": speed})
    points = [(c, statistics.median(v)) for c, v in runs.items() if v]
    provenance = {
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%MZ"),
        "command": " ".join(["bench/tuner_bench.py", *sys.argv[1:]]),
        "workload": "examples/train/train.py via examples/train/localspec.py "
        + " ".join(starved_args(steps)),
        "how": f"median samples/s per run after its first {WARMUP_LINES} metric lines, median of {repeat} "
        "run(s) per size, on kubesim (CPU limit enforced by kubesim), threads: auto",
        "host_cpus": os.cpu_count(),
        "host_load_1min_at_fit": round(os.getloadavg()[0], 2),
        "runs": {str(c): v for c, v in runs.items()},
    }
    result = fit_amdahl(points, provenance=provenance)
    if write:
        save_fit(result)
    return {
        "figure": "fit",
        "model": "amdahl",
        "serial_fraction": round(result.serial_fraction, 4),
        "speed_at_one_cpu": round(result.speed_at_one_cpu, 1),
        "points": result.points,
        "residuals": [round(r, 4) for r in result.residuals],
        "rms_residual": round(result.rms_residual, 4),
        "predicted_speedup_at_2cpu": round(result.speedup(2), 3),
        "written_to": str(FIT_PATH.relative_to(ROOT)) if write else None,
    }


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--only", choices=("speedup", "revert", "fit"), help="one scenario")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the speedup (or fit) runs; medians")
    parser.add_argument("--steps", type=int, default=9000, help="steps of each speedup / fit run")
    parser.add_argument(
        "--cpus",
        help="LOW,HIGH: the starved job's CPU and the top of its tuning range (default 1,2 on a host with 4 "
        "or more cores, else 0.5,1: see the module docstring)",
    )
    parser.add_argument("--fit", action="store_true", help="also fit the speed model (as --only fit does)")
    parser.add_argument("--fit-sizes", default="1,1.5,2", help="CPU sizes of the fit runs")
    parser.add_argument("--write-fit", action="store_true", help="store the fit for the simulator")
    options = parser.parse_args()
    only = options.only
    started = time.perf_counter()
    eb.prepare_database()
    settings.TELEMETRY_INTERVAL_SECONDS = 1
    settings.TUNING_WINDOW_SECONDS = 8
    settings.TUNING_MIN_SAMPLES = 5
    settings.TUNING_WARMUP_LOOKS = 2
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
            if only in (None, "speedup"):
                emit(speedup(starved_cpus(options.cpus), options.steps, options.repeat, user, tenant))
            if only == "fit" or options.fit:
                sizes = [float(v) for v in options.fit_sizes.split(",")]
                emit(fit(sizes, options.steps, options.repeat, user, tenant, options.write_fit))
            common = ["--steps=1000000", "--log-every=10", "--checkpoint-every=20"]
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

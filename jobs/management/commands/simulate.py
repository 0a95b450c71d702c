"""``manage.py simulate``: replay a GPU trace through the admission policy and FfDL's FIFO, and with
``--tuning on`` also with the tuner under a stated speed model (jobs/core/simulator_tuning.py); with
``--borrowing on`` each tenant's quota is nominal and it may borrow what the others leave unused; with
``--fair-share-half-life`` past usage, decayed with that half-life, counts in fair share; with
``--preemption youngest|checkpoint-aware`` (and borrowing) a tenant below its nominal quota takes back what
it lent, under a stated checkpoint model (jobs/core/simulator_preemption.py)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.core.admission import Policy
from jobs.core.preemption import ORDERS
from jobs.core.simulator import (
    TUNING_RATIO_FIELDS,
    SimResult,
    TraceError,
    load_nodes,
    load_trace,
    ratios,
    simulate,
)
from jobs.core.simulator_preemption import PreemptionModel
from jobs.core.simulator_tuning import SpeedModel

ROWS = (
    ("jobs completed", "completed", "{:d}"),
    ("dropped (never fit)", "dropped_never_fit", "{:d}"),
    ("mean queueing delay (s)", "mean_queue_delay", "{:.1f}"),
    ("p50 queueing delay (s)", "p50_queue_delay", "{:.1f}"),
    ("p95 queueing delay (s)", "p95_queue_delay", "{:.1f}"),
    ("mean JCT (s)", "mean_jct", "{:.1f}"),
    ("GPU allocation", "gpu_allocation", "{:.4f}"),
    ("makespan (s)", "makespan", "{:.0f}"),
)
TUNING_ROWS = (
    ("tuner: tunable jobs", "tunable_jobs", "{:d}"),
    ("tuner: jobs scaled", "jobs_scaled", "{:d}"),
    ("tuner: scale/keep/revert", None, ""),
    ("tuner: mean speed start", "mean_start_speed", "{:.3f}"),
    ("tuner: mean speed end", "mean_final_speed", "{:.3f}"),
    ("tuner: peak CPU/quota", "peak_tenant_cpu_over_quota", "{:.3f}"),
)


class Command(BaseCommand):
    help = "Replay a pod trace (Alibaba GPU v2023 format) through the trainyard and/or fifo policy."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--trace", required=True, help="Pod list CSV (openb_pod_list_*.csv).")
        parser.add_argument("--nodes", required=True, help="Node list CSV (openb_node_list_*.csv).")
        parser.add_argument("--policy", choices=("trainyard", "fifo", "both"), default="both")
        parser.add_argument("--tenants", type=int, default=4, help="Tenants the tasks are hashed onto.")
        parser.add_argument("--limit", type=int, default=None, help="Replay only the first N usable tasks.")
        parser.add_argument(
            "--node-sample", type=int, default=1, help="Keep every K-th node (smaller cluster)."
        )
        parser.add_argument(
            "--time-scale", type=float, default=1.0, help="Multiply arrival times (<1: denser)."
        )
        parser.add_argument(
            "--quota-share", type=float, default=1.0, help="Each tenant's quota, share of cluster."
        )
        parser.add_argument("--no-estimates", action="store_true", help="Hide run times from backfill.")
        parser.add_argument(
            "--borrowing",
            choices=("off", "on"),
            default="off",
            help="on: the quota is nominal and tenants borrow what others leave unused; off: a hard cap.",
        )
        parser.add_argument(
            "--fair-share-half-life",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="Past usage decayed with this half-life counts in fair share (0: only usage now).",
        )
        parser.add_argument(
            "--tuning",
            choices=("off", "on"),
            default="off",
            help="on: also replay each policy with the tuner under the speed model, and print on/off ratios.",
        )
        parser.add_argument(
            "--cpu-per-gpu",
            type=int,
            default=SpeedModel().cpu_per_gpu_millis,
            help="Speed model: millicores a job's GPU can use each (--tuning on).",
        )
        parser.add_argument(
            "--eta", action="store_true", help="Also score each waiting job's first ETA against its start."
        )
        parser.add_argument(
            "--preemption",
            choices=("off", *ORDERS),
            default="off",
            help="Reclaim lent quota (needs --borrowing on), choosing victims in this order.",
        )
        parser.add_argument(
            "--grace", type=float, default=30.0, help="Seconds a preempted job runs on before it stops."
        )
        parser.add_argument(
            "--min-runtime",
            type=float,
            default=300.0,
            help="Seconds after a (re)start a job is not preempted.",
        )
        parser.add_argument(
            "--checkpoint-interval",
            type=float,
            default=None,
            help="Seconds between checkpoints (default: per job, uniform 600-3600, seeded by the job id).",
        )
        parser.add_argument("--json", action="store_true", help="One JSON line per policy, then the ratios.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tenants"] < 1 or options["node_sample"] < 1:
            raise CommandError("--tenants and --node-sample must be at least 1")
        if options["fair_share_half_life"] < 0:
            raise CommandError("--fair-share-half-life must not be negative")
        preemption = _preemption(options)
        try:
            jobs = load_trace(
                options["trace"],
                tenants=options["tenants"],
                limit=options["limit"],
                time_scale=options["time_scale"],
            )
        except TraceError as error:
            raise CommandError(str(error)) from error
        nodes = load_nodes(options["nodes"])[:: options["node_sample"]]
        policies: tuple[Policy, ...] = (
            ("trainyard", "fifo") if options["policy"] == "both" else (options["policy"],)
        )
        common: dict[str, Any] = {
            "tenants": options["tenants"],
            "quota_share": options["quota_share"],
            "estimates": not options["no_estimates"],
            "borrowing": options["borrowing"] == "on",
            "fair_share_half_life": options["fair_share_half_life"],
        }
        if preemption is not None:
            common["preemption"] = preemption
        results = [simulate(jobs, nodes, policy=p, eta=options["eta"], **common) for p in policies]
        model = (
            SpeedModel.fitted(cpu_per_gpu_millis=options["cpu_per_gpu"])
            if options["tuning"] == "on"
            else None
        )
        tuned = [simulate(jobs, nodes, policy=p, tuning=model, **common) for p in policies] if model else []
        if options["json"]:
            if model is not None:
                self.stdout.write(
                    json.dumps({"speed_model": asdict(model), "note": "a model"}, sort_keys=True)
                )
            for r in [*results, *tuned]:
                self.stdout.write(json.dumps(asdict(r), sort_keys=True))
            if len(results) == 2:
                self.stdout.write(
                    json.dumps({"ratio": "trainyard/fifo", **ratios(results[0], results[1])}, sort_keys=True)
                )
            for off, on in zip(results, tuned, strict=False):
                line = {
                    "ratio": "tuning on/off",
                    "policy": off.policy,
                    **ratios(on, off, TUNING_RATIO_FIELDS),
                }
                self.stdout.write(json.dumps(line, sort_keys=True))
            return
        if model is not None:
            self.stdout.write("\n".join(model.describe()))
        self.stdout.write(_table(results, len(jobs), len(nodes), tuned))


def _preemption(options: dict[str, Any]) -> PreemptionModel | None:
    """The preemption model the options ask for (None: ``--preemption off``), or a CommandError."""
    if options["preemption"] == "off":
        return None
    if options["borrowing"] != "on":
        raise CommandError("--preemption reclaims lent quota: it needs --borrowing on")
    if options["tuning"] == "on":
        raise CommandError("--preemption and --tuning on are not simulated together")
    if options["policy"] != "trainyard":
        raise CommandError(
            "--preemption needs --policy trainyard: FIFO's head-of-line blocking keeps a reclaiming job "
            "waiting after its victims stopped, so each cycle would stop more"
        )
    interval = options["checkpoint_interval"]
    if options["grace"] < 0 or options["min_runtime"] < 0 or (interval is not None and interval <= 0):
        raise CommandError("--grace and --min-runtime must be >= 0 and --checkpoint-interval > 0")
    return PreemptionModel(options["preemption"], options["grace"], options["min_runtime"], interval)


PREEMPTION_ROWS = (
    ("preemptions", "preemptions", "{:d}"),
    ("jobs preempted", "jobs_preempted", "{:d}"),
    ("GPU-hours lost", "gpu_hours_lost", "{:.1f}"),
)


def _preemption_rows(results: list[SimResult], width: int) -> list[str]:
    """What preemption did, per policy, and the model it ran under; none without preemption."""
    models = {r.preemption.model for r in results if r.preemption}
    if not models:
        return []
    lines = [
        label.ljust(width)
        + "".join(
            (fmt.format(getattr(r.preemption, name)) if r.preemption else "-").rjust(18) for r in results
        )
        for label, name, fmt in PREEMPTION_ROWS
    ]
    return lines + [f"preemption: {model}" for model in sorted(models)]


ETA_ROWS = (
    ("ETA: jobs estimated", "estimated", "{:d}"),
    ("ETA: jobs told unknown", "unknown", "{:d}"),
    ("ETA: p50 abs error (s)", "p50_abs_error", "{:.0f}"),
    ("ETA: p90 abs error (s)", "p90_abs_error", "{:.0f}"),
    ("ETA: p50 actual wait (s)", "p50_wait", "{:.0f}"),
)


def _eta_rows(results: list[SimResult], width: int) -> list[str]:
    """How close the first ETAs came (``--eta``), per policy; none when not measured."""
    if not any(r.eta for r in results):
        return []
    return [
        label.ljust(width)
        + "".join((fmt.format(getattr(r.eta, name)) if r.eta else "-").rjust(18) for r in results)
        for label, name, fmt in ETA_ROWS
    ]


def _table(results: list[SimResult], jobs: int, nodes: int, tuned: list[SimResult] | None = None) -> str:
    width = 26
    untuned = results
    if tuned:
        results = [r for pair in zip(untuned, tuned, strict=True) for r in pair]
    heads = "".join(_label(r).rjust(18) for r in results)
    lines = [f"{jobs} jobs on {nodes} nodes", "".ljust(width) + heads]
    for label, name, fmt in ROWS:
        lines.append(label.ljust(width) + "".join(fmt.format(getattr(r, name)).rjust(18) for r in results))
    if tuned:
        lines += _tuning_rows(results)
    lines += _eta_rows(results, width)
    lines += _preemption_rows(results, width)
    for tenant in results[0].tenant_gpu_share:
        cells = "".join(
            f"{r.tenant_gpu_share[tenant]:.3f}/{r.tenant_mean_delay[tenant]:.0f}s".rjust(18) for r in results
        )
        lines.append(f"{tenant} GPU share/delay".ljust(width) + cells)
    if len(untuned) == 2:
        for name, value in ratios(untuned[0], untuned[1]).items():
            shown = "n/a" if value is None else f"{value:.3f}"
            lines.append(f"ratio {name}".ljust(width) + shown.rjust(36))
    for off, on in zip(untuned, tuned or [], strict=False):
        for name, value in ratios(on, off, TUNING_RATIO_FIELDS).items():
            shown = "n/a" if value is None else f"{value:.3f}"
            lines.append(f"tuning on/off {off.policy} {name}".ljust(44) + shown.rjust(18))
    return "\n".join(lines)


def _label(r: SimResult) -> str:
    """A run's column heading: its policy and what was on (``+fs3600``: fair share with a 3600 s half-life)."""
    fair = f"+fs{r.fair_share_half_life:g}" if r.fair_share_half_life and r.policy == "trainyard" else ""
    shared = "+reclaim" if r.preemption else "+borrow" if r.borrowing else ""
    return r.policy + ("+tuning" if r.tuning else "") + shared + fair


def _tuning_rows(results: list[SimResult]) -> list[str]:
    lines = []
    for label, name, fmt in TUNING_ROWS:
        cells = []
        for r in results:
            t = r.tuning
            if t is None:
                cells.append("-")
            elif name is None:
                cells.append(f"{t.scales}/{t.keeps}/{t.reverts}")
            else:
                cells.append(fmt.format(getattr(t, name)))
        lines.append(label.ljust(26) + "".join(c.rjust(18) for c in cells))
    return lines

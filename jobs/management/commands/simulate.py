"""``manage.py simulate``: replay a GPU trace through the admission policy and FfDL's FIFO."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs.admission import Policy
from jobs.simulator import SimResult, load_nodes, load_trace, ratios, simulate

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
        parser.add_argument("--json", action="store_true", help="One JSON line per policy, then the ratios.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tenants"] < 1 or options["node_sample"] < 1:
            raise CommandError("--tenants and --node-sample must be at least 1")
        jobs = load_trace(
            options["trace"],
            tenants=options["tenants"],
            limit=options["limit"],
            time_scale=options["time_scale"],
        )
        nodes = load_nodes(options["nodes"])[:: options["node_sample"]]
        policies: tuple[Policy, ...] = (
            ("trainyard", "fifo") if options["policy"] == "both" else (options["policy"],)
        )
        results = [
            simulate(
                jobs,
                nodes,
                policy=p,
                tenants=options["tenants"],
                quota_share=options["quota_share"],
                estimates=not options["no_estimates"],
            )
            for p in policies
        ]
        if options["json"]:
            for r in results:
                self.stdout.write(json.dumps(asdict(r), sort_keys=True))
            if len(results) == 2:
                self.stdout.write(json.dumps({"ratio": "trainyard/fifo", **ratios(*results)}, sort_keys=True))
            return
        self.stdout.write(_table(results, len(jobs), len(nodes)))


def _table(results: list[SimResult], jobs: int, nodes: int) -> str:
    width = 26
    lines = [f"{jobs} jobs on {nodes} nodes", "".ljust(width) + "".join(r.policy.rjust(18) for r in results)]
    for label, name, fmt in ROWS:
        lines.append(label.ljust(width) + "".join(fmt.format(getattr(r, name)).rjust(18) for r in results))
    for tenant in results[0].tenant_gpu_share:
        cells = "".join(
            f"{r.tenant_gpu_share[tenant]:.3f}/{r.tenant_mean_delay[tenant]:.0f}s".rjust(18) for r in results
        )
        lines.append(f"{tenant} GPU share/delay".ljust(width) + cells)
    if len(results) == 2:
        for name, value in ratios(*results).items():
            shown = "n/a" if value is None else f"{value:.3f}"
            lines.append(f"ratio {name}".ljust(width) + shown.rjust(36))
    return "\n".join(lines)

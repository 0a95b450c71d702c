"""Record a telemetry series of the example workload on kubesim, in the shape of `TelemetrySample` rows.

Why: the bottleneck detector is tested on a *recorded* series (tests/jobs/data/), not only on synthetic
ones. This runs ``train.py`` (CPU-heavy input, ``--input-cost 8``) as a kubesim pod with a 1-CPU limit
(cgroup CFS quota where the machine allows it, else kubesim's duty cycling) and ``OMP_NUM_THREADS=1``
(what ``tuning.threads: auto`` sets for one CPU), and every ``--interval`` seconds reads what the
platform's telemetry task reads: the pod's metrics.k8s.io usage (through `clusterio.telemetry.pod_usage`)
and the mean ``samples_per_sec`` of the metric lines printed since the last look.

Run: ``.venv/bin/python -m examples.train.record_telemetry --looks 12 --out tests/jobs/data/x.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from clusterio.telemetry import pod_usage
from kubesim.testing import running_kubesim

SCRIPT = Path(__file__).resolve().parent / "train.py"  # sent as `python -c`: pods do not see the checkout
TRAIN_ARGS = ["--steps=1000000", "--log-every=10", "--checkpoint-every=200", "--input-cost=8"]


def pod_manifest(name: str, checkpoint_dir: str) -> dict[str, Any]:
    """The learner pod: the example script under a 1-CPU, 1 GiB limit, one thread per pool."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "learner",
                    "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
                    "command": [sys.executable, "-u", "-c", SCRIPT.read_text(), *TRAIN_ARGS],
                    "env": [
                        {"name": "OMP_NUM_THREADS", "value": "1"},
                        {"name": "MKL_NUM_THREADS", "value": "1"},
                        {"name": "TRAINYARD_TORCH_INTEROP_THREADS", "value": "1"},
                        {"name": "CHECKPOINT_DIR", "value": checkpoint_dir},
                    ],
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi"},
                        "limits": {"cpu": "1", "memory": "1Gi"},
                    },
                }
            ],
        },
    }


def speeds(log: str) -> list[float]:
    """The samples_per_sec values of the metric lines in a log, in order."""
    out = []
    for line in log.splitlines():
        if line.startswith("{"):
            try:
                out.append(float(json.loads(line)["metrics"]["samples_per_sec"]))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def _phase(core: client.CoreV1Api, name: str) -> str | None:
    status = core.read_namespaced_pod(name, "default").status
    return status.phase if status is not None else None


def record(looks: int, interval: float, warmup: float) -> dict[str, Any]:
    """Run the pod, wait `warmup` seconds, then take `looks` looks; the rows and how they were taken."""
    with tempfile.TemporaryDirectory() as tmp, running_kubesim(Path(tmp)) as sim:
        core = client.CoreV1Api(sim.api_client())
        custom = client.CustomObjectsApi(sim.api_client())
        core.create_namespaced_pod("default", pod_manifest("train-cpu-0", f"{tmp}/ckpt"))  # type: ignore[arg-type]
        sim.wait_for(lambda: _phase(core, "train-cpu-0") == "Running", 60)
        time.sleep(warmup)
        rows, seen = [], len(speeds(core.read_namespaced_pod_log("train-cpu-0", "default")))
        for _ in range(looks):
            time.sleep(interval)
            metrics = custom.get_namespaced_custom_object(
                "metrics.k8s.io", "v1beta1", "default", "pods", "train-cpu-0"
            )
            usage = pod_usage(metrics if isinstance(metrics, dict) else None)
            rates = speeds(core.read_namespaced_pod_log("train-cpu-0", "default"))
            new, seen = rates[seen:], len(rates)
            rows.append(
                {
                    "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
                    "attempt": 1,
                    "learner": 0,
                    "cpu_millis_used": usage.cpu_millis if usage else 0,
                    "cpu_millis_limit": 1000,
                    "memory_mib_used": usage.memory_mib if usage else 0,
                    "memory_mib_limit": 1024,
                    "samples_per_sec": round(sum(new) / len(new), 1) if new else None,
                    "steps_per_sec": None,
                    "gpu_util": usage.gpu_util if usage else None,
                }
            )
        limits = getattr(sim.cluster, "cgroups", None)
        enforced = getattr(limits, "describe", lambda: "see kubesim/cgroups.py")()
    return {
        "recorded_with": (
            "examples/train/record_telemetry.py: examples/train/train.py "
            f"{' '.join(TRAIN_ARGS)} as a kubesim pod, limits cpu 1 / memory 1Gi, OMP_NUM_THREADS=1, "
            f"{warmup:.0f} s warm-up, one look every {interval:.0f} s (metrics.k8s.io usage, mean "
            "samples_per_sec of the lines printed since the last look)"
        ),
        "cpu_limit_enforced_by": str(enforced),
        "machine": f"{platform.node()} ({platform.machine()}), recorded {datetime.now(UTC):%Y-%m-%d}",
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--looks", type=int, default=12)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    data = record(args.looks, args.interval, args.warmup)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({"rows": len(data["rows"]), "out": str(args.out)}))


if __name__ == "__main__":
    main()

"""Threads benchmark: does sizing thread pools to the CPU limit (`tuning.threads: auto`) beat the
frameworks' defaults (`off`) for the example PyTorch job under a 1-CPU limit?

Run: ``.venv/bin/python bench/threads_bench.py`` (about 2 minutes; prints one JSON line per figure).
kubesim starts in-process (state in a temporary folder) and runs the learner pods the platform's own
builder makes (`clusterio.builders.make_learner_pod`, so the thread variables are exactly what a launch
sets), through the official client; each pod runs examples/train/train.py with an input-pipeline cost.

1. ``contended``: two copies at once, each with a 1-CPU limit on this machine (2 cores): both `auto`,
   then both `off`; median samples/s over each job's steady part (its first log window dropped).
2. ``alone``: one copy alone under a 1-CPU limit, `auto` then `off`.

``ratio_auto_over_off`` > 1 means `auto` is faster. `off` leaves PyTorch at its default intra-op pool,
one thread per host core (``os.cpu_count()``), here more threads than the quota has CPUs. The line
``mechanism`` says how kubesim enforced the CPU limit (cgroup CFS quota, or its SIGSTOP/SIGCONT fallback).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from clusterio import names  # noqa: E402
from clusterio.builders import JobPodsSpec, make_learner_pod, to_dict  # noqa: E402
from clusterio.client import Cluster  # noqa: E402
from kubesim.testing import running_kubesim  # noqa: E402

SCRIPT = ROOT / "examples" / "train" / "train.py"
STEPS = int(os.environ.get("THREADS_BENCH_STEPS", "400"))
ARGS = [
    f"--steps={STEPS}",
    "--log-every=20",
    "--checkpoint-every=100000",
    "--batch-size=128",
    "--input-cost=6",
]


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def pod_spec(job_id: str, threads: str) -> JobPodsSpec:
    return JobPodsSpec(
        job_id=job_id,
        attempt=1,
        tenant="bench",
        namespace="ty-bench",
        image="pytorch/pytorch:2.3.0",
        command=["python", "-u", "-c", SCRIPT.read_text(), *ARGS],  # pods do not see the checkout
        learners=1,
        gpus=0,
        cpu_millis=1000,
        memory_mib=1024,
        checkpoint_dir="/checkpoints",
        data_dir="/data",
        result_dir="/results",
        master_port=29500,
        master_addr="127.0.0.1",
        threads=threads,  # type: ignore[arg-type]
    )


def rates(lines: list[str]) -> list[float]:
    found = []
    for line in lines:
        if line.startswith("{"):
            found.append(float(json.loads(line)["metrics"]["samples_per_sec"]))
    return found[1:]  # the first window includes start-up


def run(cluster: Cluster, threads: str, copies: int, tag: str) -> list[float]:
    """Start `copies` pods at once, wait for all to finish, return each one's median samples/s."""
    pods = []
    for i in range(copies):
        job_id = f"{tag}{i}"
        pod = to_dict(make_learner_pod(pod_spec(job_id, threads), 0))
        cluster.core.create_namespaced_pod("ty-bench", pod)
        pods.append(names.learner_pod_name(job_id, 1, 0))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        phases = [
            (cluster.get_pod(namespace="ty-bench", pod=p) or {}).get("status", {}).get("phase") for p in pods
        ]
        if all(phase in ("Succeeded", "Failed") for phase in phases):
            break
        time.sleep(0.5)
    medians = []
    for pod in pods:
        lines = cluster.pod_log_tail(namespace="ty-bench", pod=pod, lines=10000)
        found = rates(lines)
        if not found:
            raise RuntimeError(f"{pod} printed no rate: {lines[-5:]}")
        medians.append(statistics.median(found))
        cluster.delete_pod(namespace="ty-bench", pod=pod)
    return medians


def main() -> None:
    with running_kubesim(Path(tempfile.mkdtemp(prefix="threads-bench-"))) as sim:
        cluster = Cluster(kubeconfig=str(sim.kubeconfig_path))
        cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="ty-bench")))
        emit(
            {"figure": "mechanism", "cpu_limit": sim.cluster.cgroups.describe(), "host_cpus": os.cpu_count()}
        )
        for label, copies in (("contended", 2), ("alone", 1)):
            auto = run(cluster, "auto", copies, f"{label[:3]}a")
            off = run(cluster, "off", copies, f"{label[:3]}o")
            emit(
                {
                    "figure": label,
                    "copies": copies,
                    "cpu_limit_per_copy": 1,
                    "samples_per_sec_auto": [round(x, 1) for x in auto],
                    "samples_per_sec_off": [round(x, 1) for x in off],
                    "ratio_auto_over_off": round(sum(auto) / sum(off), 3),
                }
            )


if __name__ == "__main__":
    main()

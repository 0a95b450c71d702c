"""kubesim sandbox benchmark: what running each container under bubblewrap costs a pod's life.

Run: ``.venv/bin/python bench/sandbox_bench.py [--pods 20]``. Starts two kubesims in this process, one with
the sandbox (its own mount and PID namespaces per container) and one without (plain local processes), and
runs the same short pods through each, one at a time, alternating: create -> Running and create ->
Succeeded (``python -c "print(1)"``), measured from the create call's return to the watch event that shows
the phase. Prints one JSON line per mode (median, p90) and one with the ratios sandbox/plain, measured in
the same run. Needs root and Debian's bubblewrap for the sandboxed side (``make sandbox``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client, watch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from kubesim.testing import KubeSim, running_kubesim


def _pod(name: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy="Never",
            termination_grace_period_seconds=1,
            containers=[client.V1Container(name="c", image="x", command=["python", "-c", "print(1)"])],
        ),
    )


def _one_pod(sim: KubeSim, core: client.CoreV1Api, name: str) -> tuple[float, float]:
    """Seconds from create to Running and to Succeeded, as a watch sees them."""
    start_rv = core.list_namespaced_pod("default").metadata.resource_version
    created = time.perf_counter()
    core.create_namespaced_pod("default", _pod(name))
    running = succeeded = 0.0
    for event in watch.Watch().stream(
        core.list_namespaced_pod,
        "default",
        field_selector=f"metadata.name={name}",
        resource_version=start_rv,
        timeout_seconds=60,
    ):
        phase = event["object"].status.phase
        if phase == "Running" and not running:
            running = time.perf_counter() - created
        if phase == "Succeeded":
            succeeded = time.perf_counter() - created
            running = running or succeeded
            break
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    return running, succeeded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    results: dict[str, dict[str, list[float]]] = {}
    with (
        running_kubesim(root / "sandboxed") as boxed,
        running_kubesim(root / "plain", sandbox=False) as plain,
    ):
        if not boxed.cluster.sandboxed:
            raise SystemExit(f"no sandbox here: {boxed.cluster.sandbox.reason}")
        sims = {"sandbox": boxed, "plain": plain}
        cores = {mode: client.CoreV1Api(sim.api_client()) for mode, sim in sims.items()}
        for i in range(args.pods + 1):  # pod 0 of each mode warms up, unmeasured
            for mode, sim in sims.items():
                running, succeeded = _one_pod(sim, cores[mode], f"p{i}")
                if i:
                    times = results.setdefault(mode, {"running": [], "succeeded": []})
                    times["running"].append(running)
                    times["succeeded"].append(succeeded)
    medians: dict[str, dict[str, float]] = {}
    for mode, times in results.items():
        medians[mode] = {k: statistics.median(v) for k, v in times.items()}
        line = {"figure": "pod_start", "mode": mode, "pods": args.pods}
        for key, values in times.items():
            line[f"create_to_{key}_ms_p50"] = round(statistics.median(values) * 1000, 1)
            line[f"create_to_{key}_ms_p90"] = round(statistics.quantiles(values, n=10)[-1] * 1000, 1)
        print(json.dumps(line))
    print(
        json.dumps(
            {
                "figure": "pod_start_ratio",
                "sandbox_over_plain_running": round(
                    medians["sandbox"]["running"] / medians["plain"]["running"], 2
                ),
                "sandbox_over_plain_succeeded": round(
                    medians["sandbox"]["succeeded"] / medians["plain"]["succeeded"], 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()

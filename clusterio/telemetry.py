"""Pod telemetry from the metrics API (metrics.k8s.io: metrics-server on real clusters, kubesim locally).

Turns a `PodMetrics` object into plain numbers (millicores, MiB), so nothing above clusterio parses
Kubernetes quantities. GPU utilization is not part of metrics.k8s.io; where a cluster publishes it as a
container usage entry (`nvidia.com/gpu`, a 0-100 percentage, as some exporters' adapters do) it is read,
otherwise it stays None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from clusterio import names
from clusterio.client import Cluster

GPU_USAGE_KEY = "nvidia.com/gpu"


@dataclass(frozen=True)
class PodUsage:
    """What one pod's containers use right now, summed: CPU in millicores, memory in MiB, GPU 0-1."""

    cpu_millis: int
    memory_mib: int
    gpu_util: float | None = None


def pod_usage(metrics: dict[str, Any] | None) -> PodUsage | None:
    """Sum a `PodMetrics` object's containers; None when there is no sample (pod gone or not started)."""
    if not metrics:
        return None
    containers = metrics.get("containers") or []
    if not containers:
        return None
    cpu = memory = 0.0
    gpu: list[float] = []
    for container in containers:
        usage = container.get("usage") or {}
        try:
            cpu += float(parse_quantity(usage.get("cpu", "0")))
            memory += float(parse_quantity(usage.get("memory", "0")))
            if GPU_USAGE_KEY in usage:
                gpu.append(float(parse_quantity(usage[GPU_USAGE_KEY])) / 100.0)
        except ValueError:
            continue
    return PodUsage(
        cpu_millis=round(cpu * 1000),
        memory_mib=round(memory / 2**20),
        gpu_util=sum(gpu) / len(gpu) if gpu else None,
    )


def learner_usage(
    cluster: Cluster, *, namespace: str, job_id: names.JobId, attempt: int, learners: int
) -> dict[int, PodUsage | None]:
    """Each learner's usage in one attempt, by learner index (None for a learner without a sample)."""
    return {
        index: pod_usage(
            cluster.pod_metrics(namespace=namespace, pod=names.learner_pod_name(job_id, attempt, index))
        )
        for index in range(learners)
    }

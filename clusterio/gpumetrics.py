"""GPU utilisation per pod from NVIDIA's DCGM exporter, where a cluster runs one.

metrics.k8s.io has no GPU usage. Clusters with NVIDIA GPUs usually run dcgm-exporter (the GPU Operator
installs it as a DaemonSet serving Prometheus text on :9400/metrics); with its Kubernetes mapping on, each
GPU's series carries the `pod` and `namespace` of the container holding it (`exported_pod` and
`exported_namespace` once a Prometheus server has re-labelled them, e.g. through its /federate endpoint).

The platform reads the URLs it is given (`GPU_METRICS_URLS`: each node's exporter, or one Prometheus
federate URL) and averages, per pod, the GPUs it holds: `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (a 0-1 ratio, which
also covers MIG slices) where exported, else `DCGM_FI_DEV_GPU_UTIL` (a 0-100 percentage).
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from clusterio.errors import Unavailable

PodKey = tuple[str, str]
"""(namespace, pod name)."""

UTIL_METRICS = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1.0, "DCGM_FI_DEV_GPU_UTIL": 100.0}
"""The metrics read, preferred first, with the divisor that makes each a 0-1 fraction."""
MAX_BYTES = 16 * 2**20


def parse(text: str) -> dict[PodKey, float]:
    """Each pod's mean GPU utilisation (0-1) in one exporter's output; GPUs no pod holds are left out.

    Raises ValueError when the text is not Prometheus' exposition format."""
    found: dict[str, dict[PodKey, list[float]]] = {name: defaultdict(list) for name in UTIL_METRICS}
    try:
        samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not Prometheus text: {exc}") from None
    for sample in samples:
        if sample.name not in UTIL_METRICS:
            continue
        labels = sample.labels
        pod = labels.get("pod") or labels.get("exported_pod")
        namespace = labels.get("namespace") or labels.get("exported_namespace")
        if not pod or not namespace or sample.value != sample.value:  # no workload, or NaN
            continue
        fraction = sample.value / UTIL_METRICS[sample.name]
        found[sample.name][(namespace, pod)].append(min(1.0, max(0.0, fraction)))
    result: dict[PodKey, float] = {}
    for name in reversed(list(UTIL_METRICS)):  # the preferred metric overwrites the other
        for key, values in found[name].items():
            result[key] = sum(values) / len(values)
    return result


def scrape(urls: Sequence[str], *, timeout: float = 5.0) -> dict[PodKey, float]:
    """Read every URL and merge what they say; Unavailable when none of them answered."""
    merged: dict[PodKey, float] = {}
    problems: list[str] = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (configured URLs)
                text = response.read(MAX_BYTES + 1)
            if len(text) > MAX_BYTES:
                raise ValueError(f"more than {MAX_BYTES} bytes")
            merged.update(parse(text.decode("utf-8", errors="replace")))
        except (OSError, ValueError) as exc:
            problems.append(f"{url}: {exc}")
    if problems and len(problems) == len(urls):
        raise Unavailable("GPU metrics could not be read: " + "; ".join(problems))
    return merged


def for_pods(readout: Mapping[PodKey, float], namespace: str, pods: Mapping[int, str]) -> dict[int, float]:
    """The readout's values for the given pods (learner index → pod name), by learner index."""
    return {index: readout[(namespace, pod)] for index, pod in pods.items() if (namespace, pod) in readout}

"""metrics.k8s.io/v1beta1: PodMetrics and NodeMetrics from the kubelets' /proc samples."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubesim.errors import ApiError, not_found
from kubesim.resources import Resource
from kubesim.runtime import RATE_WINDOW, now_rfc3339
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster
    from kubesim.server import Params


def _pod_metrics(cluster: Cluster, pod: Obj) -> Obj | None:
    uid = pod["metadata"]["uid"]
    for kubelet in cluster.kubelets.values():
        runtime_ = kubelet.pods.get(uid)
        if runtime_ is None:
            continue
        containers = [
            {
                "name": name,
                "usage": {"cpu": f"{proc.cpu_nanocores}n", "memory": f"{proc.rss_bytes // 1024}Ki"},
            }
            for name, proc in runtime_.containers.items()
            if proc.exit_code is None
        ]
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {
                "name": pod["metadata"]["name"],
                "namespace": pod["metadata"]["namespace"],
                "labels": pod["metadata"].get("labels") or {},
                "creationTimestamp": now_rfc3339(),
            },
            "timestamp": now_rfc3339(),
            "window": f"{RATE_WINDOW:g}s",
            "containers": containers,
        }
    return None


def serve(cluster: Cluster, res: Resource, namespace: str | None, name: str | None, params: Params) -> Any:
    """Answer GET for pod or node metrics (one object, or a list for a namespace or all)."""
    if res.plural == "nodes":
        nodes = cluster.store.list("nodes")[0]
        items: list[Obj] = []
        for node in nodes:
            kubelet = cluster.kubelets.get(node["metadata"]["name"])
            procs = [p for rt in (kubelet.pods.values() if kubelet else []) for p in rt.containers.values()]
            items.append(
                {
                    "kind": "NodeMetrics",
                    "apiVersion": "metrics.k8s.io/v1beta1",
                    "metadata": {"name": node["metadata"]["name"]},
                    "timestamp": now_rfc3339(),
                    "window": f"{RATE_WINDOW:g}s",
                    "usage": {
                        "cpu": f"{sum(p.cpu_nanocores for p in procs)}n",
                        "memory": f"{sum(p.rss_bytes for p in procs) // 1024}Ki",
                    },
                }
            )
        if name:
            found = [i for i in items if i["metadata"]["name"] == name]
            if not found:
                raise not_found("nodes", name, "metrics.k8s.io")
            return found[0]
        return {
            "kind": "NodeMetricsList",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {},
            "items": items,
        }
    if name:
        pod = cluster.store.peek("pods", namespace or "", name)
        metrics = _pod_metrics(cluster, pod) if pod else None
        if metrics is None:
            raise not_found("pods", name, "metrics.k8s.io")
        return metrics
    if params.flag("watch"):
        raise ApiError(405, "MethodNotAllowed", "watch is not supported for metrics")
    pods = cluster.store.list("pods", namespace)[0]
    items = [m for m in (_pod_metrics(cluster, p) for p in pods) if m is not None]
    return {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items}

"""What the API server fills in when an object is created, per kind (before validation and admission).

Pods and Jobs take their defaults from `kubesim.validation`, claims and storage classes from their own
modules; namespaces, Services, Secrets and ResourceQuotas are filled in here.
"""

from __future__ import annotations

import base64

from kubesim import priorityclasses, storageclasses, validation, volumes
from kubesim.store import Obj, Store


def apply_defaults(store: Store, plural: str, obj: Obj, *, default_toleration_seconds: int) -> None:
    """Fill in `obj`'s defaults as the apiserver would for a new object of resource `plural`."""
    if plural == "pods":
        validation.default_pod(obj, default_toleration_seconds)
    elif plural == "jobs":
        validation.default_job(obj)
    elif plural == "namespaces":
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif plural == "services":
        _default_service(store, obj)
    elif plural == "secrets":
        obj.setdefault("type", "Opaque")
        encode_string_data(obj)
    elif plural == "resourcequotas":
        obj["status"] = {"hard": dict((obj.get("spec") or {}).get("hard") or {}), "used": {}}
    elif plural == "persistentvolumeclaims":
        volumes.default_claim(obj, storageclasses.default_class_name(store))
    elif plural == storageclasses.PLURAL:
        storageclasses.default_class(obj)
    elif plural == priorityclasses.PLURAL:
        priorityclasses.default_class(obj)


def encode_string_data(secret: Obj) -> None:
    """Move a Secret's write-only `stringData` into `data`, base64-encoded (on create and on update)."""
    for key, value in (secret.pop("stringData", None) or {}).items():
        secret.setdefault("data", {})[key] = base64.b64encode(str(value).encode()).decode()


def _default_service(store: Store, obj: Obj) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") in (None, ""):
        with store.lock:
            used = {(s.get("spec") or {}).get("clusterIP") for s in store.list("services")[0]}
            for n in range(1, 65000):
                candidate = f"10.96.{n // 250}.{n % 250 + 1}"
                if candidate not in used:
                    spec["clusterIP"] = candidate
                    break
    spec["clusterIPs"] = [spec["clusterIP"]]
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    obj["status"] = {"loadBalancer": {}}

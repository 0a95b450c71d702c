"""Strict manifest validation for builder tests: the object as the API would receive it, checked against
the Kubernetes 1.37 schema by kubernetes-validate."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from clusterio.builders import to_dict

K8S_VERSION = "1.37.0"


def validated(obj: Any) -> dict[str, Any]:
    """The serialized object, after asserting it validates strictly against Kubernetes 1.37."""
    data = to_dict(obj)
    assert kubernetes_validate.validate(data, K8S_VERSION, strict=True) == "1.37"
    return data

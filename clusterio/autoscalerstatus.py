"""The cluster autoscaler's status ConfigMap (`kube-system/cluster-autoscaler-status`): the min and max size
of each node group it scales, so pools declared with a `node_group` follow what the operator set there.

The Cluster Autoscaler writes it every ~10 s. Since 1.30 its `status` key is YAML (`nodeGroups:` entries with
`name` and `health.minSize`/`maxSize`/`cloudProviderTarget`); before, a readable text with lines such as
``Name: <group>`` then ``Health: Healthy (ready=1 ... cloudProviderTarget=1 (minSize=0, maxSize=5))``. Both
are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

_TEXT_GROUP = re.compile(
    r"^\s*Name:\s*(?P<name>\S+)\s*\n\s*Health:.*?minSize=(?P<min>\d+),\s*maxSize=(?P<max>\d+)", re.MULTILINE
)


@dataclass(frozen=True)
class NodeGroupSize:
    """One node group's sizes as the autoscaler reports them."""

    min_nodes: int
    max_nodes: int
    target: int | None = None


def parse_status(text: str) -> dict[str, NodeGroupSize]:
    """Node group name -> sizes, from the ConfigMap's `status` (YAML or the older text); {} when it names
    none or cannot be read."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    found: dict[str, NodeGroupSize] = {}
    if isinstance(data, dict) and isinstance(data.get("nodeGroups"), list):
        for group in data["nodeGroups"]:
            health = group.get("health") if isinstance(group, dict) else None
            if not isinstance(health, dict) or not isinstance(group.get("name"), str):
                continue
            try:
                target = health.get("cloudProviderTarget")
                found[group["name"]] = NodeGroupSize(
                    int(health["minSize"]), int(health["maxSize"]), None if target is None else int(target)
                )
            except (KeyError, TypeError, ValueError):
                continue
        return found
    for match in _TEXT_GROUP.finditer(text or ""):
        found[match["name"]] = NodeGroupSize(int(match["min"]), int(match["max"]))
    return found

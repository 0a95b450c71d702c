"""Reading the cluster autoscaler's status ConfigMap: the YAML of Cluster Autoscaler 1.30+ and the older text,
as the autoscaler writes them (node group names as clouds spell them)."""

from __future__ import annotations

from clusterio.autoscalerstatus import NodeGroupSize, parse_status

YAML = """\
time: 2026-10-02 14:29:22.999645779 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    nodeCounts:
      registered:
        ready: 4
        total: 4
    status: Healthy
nodeGroups:
- health:
    cloudProviderTarget: 3
    maxSize: 3
    minSize: 2
    nodeCounts:
      registered:
        ready: 3
        total: 3
    status: Healthy
  name: aks-user-25795745-vmss
- health:
    cloudProviderTarget: 0
    maxSize: 4
    minSize: 0
    status: Healthy
  name: https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-a100-pool-grp
- name: broken
  health: {status: Healthy}
"""

TEXT = """\
Cluster-autoscaler status at 2021-10-19 19:06:40.008835646 +0000 UTC:
Cluster-wide:
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3 longUnregistered=0)
NodeGroups:
  Name:        MachineDeployment/default/aws-autoscale-01-md-0
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3 longUnregistered=0 \
cloudProviderTarget=3 (minSize=3, maxSize=10))
               LastProbeTime:      2021-10-19 19:06:40.008835646 +0000 UTC m=+433068.513173981
  ScaleUp:     NoActivity (ready=3 cloudProviderTarget=3)
"""


def test_the_yaml_status_gives_each_groups_sizes_and_skips_an_entry_without_them() -> None:
    groups = parse_status(YAML)
    assert groups["aks-user-25795745-vmss"] == NodeGroupSize(2, 3, 3)
    assert groups[
        "https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-a100-pool-grp"
    ] == NodeGroupSize(0, 4, 0)
    assert "broken" not in groups


def test_the_older_text_status_gives_min_and_max() -> None:
    assert parse_status(TEXT) == {"MachineDeployment/default/aws-autoscale-01-md-0": NodeGroupSize(3, 10)}


def test_nothing_readable_gives_no_groups() -> None:
    assert parse_status("") == {}
    assert parse_status(": : [") == {}
    assert parse_status("nodeGroups: 3") == {}

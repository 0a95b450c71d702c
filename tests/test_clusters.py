"""The external-cluster switch of the test fixtures (tests/clusters.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _pytest.outcomes import Skipped
from kubernetes import client

from kubesim.testing import KubeSim
from tests.clusters import ExternalCluster


def test_external_cluster_talks_to_the_kubeconfigs_server_and_skips_kubesim_controls(
    kubesim_cluster: KubeSim, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kubesim_cluster.kubeconfig_path.read_text())
    external = ExternalCluster(str(kubeconfig))
    assert external.url == kubesim_cluster.url
    nodes = client.CoreV1Api(external.api_client()).list_node().items
    assert nodes, "the API client reaches the cluster"
    with pytest.raises(Skipped, match="lose_node"):
        external.lose_node("kubesim-node")
    with pytest.raises(AttributeError):
        external.no_such_thing  # noqa: B018
    with pytest.raises(pytest.UsageError, match="no such file"):
        ExternalCluster(str(tmp_path / "missing"))


def test_reading_kubesims_state_folder_on_an_external_cluster_skips_the_test(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    with pytest.raises(Skipped, match="state_dir"):
        ExternalCluster(str(kubeconfig)).state_dir  # noqa: B018

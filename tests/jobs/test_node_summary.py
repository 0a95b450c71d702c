"""The watcher's watch-backed node summary against kubesim: the scheduler cycle reads capacity from it
(no list of nodes or pods while it is fresh), it follows other teams' pods, and without it the cycle lists."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from jobs import cluster
from jobs.cluster import nodesummary
from jobs.tasks import schedule
from jobs.watcher import Watcher
from kubesim.testing import KubeSim
from tests.jobs.engine import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.kubesim_only, pytest.mark.django_db(transaction=True)]

LISTS = ("list nodes", "list pods")


@pytest.fixture
def sim(kubesim_cluster: KubeSim, settings: Any) -> KubeSim:
    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    nodesummary.clear(cluster.installation_id())
    return kubesim_cluster


@pytest.fixture
def watcher(sim: KubeSim) -> Iterator[Watcher]:
    """The watch loop in a thread (node summary on), until it has published; stopped and joined after."""
    watcher = Watcher(cluster.cluster(), follow_logs=False)
    thread = threading.Thread(target=watcher.run, name="watcher", daemon=True)
    thread.start()
    try:
        wait_until(lambda: nodesummary.read(cluster.installation_id()) is not None, timeout=30)
        yield watcher
    finally:
        watcher.stop()
        thread.join(timeout=20)
        assert not thread.is_alive()


def _lists(sim: KubeSim) -> dict[str, int]:
    return {k: v for k, v in sim.request_counts().items() if k in LISTS}


def test_the_cycle_reads_capacity_from_the_fresh_summary_without_listing_nodes_or_pods(
    sim: KubeSim, watcher: Watcher
) -> None:
    assert nodesummary.read(cluster.installation_id()) == cluster.cluster().nodes()
    assert cluster.gpu_products() == cluster.cluster().gpu_products() != []
    sim.request_counts(reset=True)

    for _ in range(3):
        assert schedule()["ran"] is not False
    cluster.node_room()
    cluster.node_names()
    cluster.gpu_products()

    assert _lists(sim) == {}


def test_the_summary_follows_another_teams_pod_onto_a_node(sim: KubeSim, watcher: Watcher) -> None:
    core = client.CoreV1Api(cluster.cluster().api_client)
    namespace = f"other-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    before = {n.name: n.free for n in cluster.nodes()}
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="theirs"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    command=["sleep", "3600"],
                    resources=client.V1ResourceRequirements(requests={"cpu": "700m", "memory": "100Mi"}),
                )
            ],
            termination_grace_period_seconds=0,
        ),
    )
    try:
        core.create_namespaced_pod(namespace, pod)

        def moved() -> str | None:
            now = {n.name: n.free for n in cluster.nodes()}
            return next((n for n, free in now.items() if before[n].cpu_millis - free.cpu_millis == 700), None)

        node = wait_until(moved, timeout=30)
        during = {n.name: n.free for n in cluster.nodes()}[node]
        assert cluster.nodes() == cluster.cluster().nodes()
    finally:
        core.delete_namespace(namespace)
    # The summary follows the pod off its node. The session's kubesim is shared: pods other tests left may
    # end meanwhile, so the node may free more than the 700m, and the summary then equals the cluster's own
    # view rather than the one before.
    wait_until(lambda: {n.name: n.free for n in cluster.nodes()}[node].cpu_millis >= during.cpu_millis + 700)
    wait_until(lambda: cluster.nodes() == cluster.cluster().nodes(), timeout=60)


def test_without_a_fresh_summary_the_cycle_lists_the_cluster(sim: KubeSim, watcher: Watcher) -> None:
    installation = cluster.installation_id()
    watcher.stop()
    wait_until(lambda: nodesummary.read(installation) is None, timeout=30)
    sim.request_counts(reset=True)

    schedule()

    assert _lists(sim) == {"list nodes": 1, "list pods": 1}


def test_a_summary_older_than_the_staleness_limit_is_not_used(sim: KubeSim, watcher: Watcher) -> None:
    installation = cluster.installation_id()
    assert nodesummary.read(installation, max_age=60) is not None
    assert nodesummary.read(installation, max_age=-1) is None

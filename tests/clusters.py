"""The cluster the tests talk to: kubesim by default, or a real one named by TRAINYARD_TEST_KUBECONFIG.

With ``TRAINYARD_TEST_KUBECONFIG=/path/to/kubeconfig`` every cluster fixture hands out an `ExternalCluster`
for that cluster (kind, k3s, a managed one) instead of starting kubesim. It answers the API parts of
`KubeSim` (``kubeconfig_path``, ``api_client()``, ``wait_for``); tests that need kubesim's own controls
(lose a node, inject API faults, fail image pulls, step the control loop) carry the ``kubesim_only`` marker
and are skipped there, and calling such a control (or reading kubesim's ``state_dir``) on an external cluster
skips the test as a safety net.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, cast
from urllib.parse import urlsplit, urlunsplit

import pytest

from kubesim.network import HOST_NAME
from kubesim.testing import KubeSim, running_kubesim

EXTERNAL_KUBECONFIG = os.environ.get("TRAINYARD_TEST_KUBECONFIG", "")
KUBESIM_ONLY_REASON = (
    "needs kubesim's own controls (node loss, injected faults, image-pull failures or its local processes); "
    "TRAINYARD_TEST_KUBECONFIG points the tests at a real cluster"
)
_CONTROLS = frozenset(
    {
        "add_gpu_node",
        "add_private_registry",
        "clear_image_pull_failures",
        "cluster",
        "compact",
        "evict_pod",
        "fail_image_pulls",
        "inject_fault",
        "lose_node",
        "pause_kubelet",
        "remove_private_registry",
        "set_node_ready",
        "step",
    }
)
_STATE = frozenset({"state_dir"})


class ExternalCluster:
    """A real cluster in the place of kubesim: its kubeconfig and API client; kubesim's controls skip."""

    auto = True

    def __init__(self, kubeconfig: str):
        self.kubeconfig_path = Path(kubeconfig).expanduser().resolve()
        if not self.kubeconfig_path.is_file():
            raise pytest.UsageError(f"TRAINYARD_TEST_KUBECONFIG={kubeconfig}: no such file")

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the kubeconfig's current context."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    @property
    def url(self) -> str:
        """The API server's address, as the kubeconfig's current context names it."""
        return str(self.api_client().configuration.host)

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
        """Poll ``predicate`` until it returns something truthy (as `KubeSim.wait_for`)."""
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)
        return value

    def clear_faults(self) -> None:
        """Nothing to clear: no faults can be injected into a real cluster from here."""

    def __getattr__(self, name: str) -> Any:
        if name in _STATE:
            pytest.skip(f"{name}: {KUBESIM_ONLY_REASON}")
        if name not in _CONTROLS:
            raise AttributeError(name)

        def skip(*_: Any, **__: Any) -> NoReturn:
            pytest.skip(f"{name}(): {KUBESIM_ONLY_REASON}")

        return skip


@contextlib.contextmanager
def cluster_for_tests(state_dir: Path, **kubesim_options: Any) -> Iterator[KubeSim]:
    """kubesim started with ``kubesim_options``, or the external cluster when TRAINYARD_TEST_KUBECONFIG is
    set (typed as `KubeSim`: it answers the same API-side calls, see `ExternalCluster`)."""
    if EXTERNAL_KUBECONFIG:
        yield cast(KubeSim, ExternalCluster(EXTERNAL_KUBECONFIG))
        return
    with running_kubesim(state_dir, **kubesim_options) as sim:
        yield sim


def pod_url(sim: KubeSim, url: str) -> str:
    """``url`` of a server on this machine's loopback as pods reach it: kubesim exposes its port on the node
    address and pods call it by the node's name (``host.kubesim.internal``); unchanged where pods share the
    loopback or the cluster is an external one."""
    parts = urlsplit(url)
    if isinstance(sim, ExternalCluster) or parts.hostname not in ("127.0.0.1", "localhost") or not parts.port:
        return url
    sim.expose_host_port(parts.port)
    if not sim.cluster.network.available:
        return url
    return urlunsplit(parts._replace(netloc=f"{HOST_NAME}:{parts.port}"))


def pod_host(sim: KubeSim, port: int) -> str:
    """The host name under which pods reach ``127.0.0.1:port`` of this machine (see `pod_url`)."""
    return urlsplit(pod_url(sim, f"http://127.0.0.1:{port}")).hostname or "127.0.0.1"

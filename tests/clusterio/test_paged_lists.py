"""Paged lists through the official client against kubesim: a continue token that expires between pages
(410 after a compaction) restarts the list once instead of failing it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from clusterio import connection, names
from clusterio.client import Cluster
from clusterio.errors import Gone
from kubesim.testing import KubeSim

pytestmark = pytest.mark.kubesim_only  # compacts the emulator's history on demand

SECRETS = 3


def _secrets(core: client.CoreV1Api, ns: str) -> None:
    for i in range(SECRETS):
        core.create_namespaced_secret(
            ns,
            client.V1Secret(
                metadata=client.V1ObjectMeta(
                    name=f"paged-{i}", labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}
                ),
                string_data={"k": "v"},
            ),
        )


def _compacting(
    sim: KubeSim, core: client.CoreV1Api, ns: str, original: Callable[..., Any], compactions: int
) -> tuple[Callable[..., Any], list[str | None]]:
    """Wrap a list call so that, before each of the first `compactions` page requests carrying a continue
    token, the cluster moves on (a ConfigMap is written) and compacts its history: the token is then too old."""
    tokens: list[str | None] = []

    def call(*args: Any, **kwargs: Any) -> Any:
        token = kwargs.get("_continue")
        tokens.append(token)
        if token and sum(1 for t in tokens if t) <= compactions:
            core.create_namespaced_config_map(
                ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="tick-"))
            )
            sim.compact(keep=0)
        return original(*args, **kwargs)

    return call, tokens


def test_an_expired_continue_token_relists_from_the_first_page_once(
    cluster: Cluster, core: client.CoreV1Api, sim: KubeSim, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _secrets(core, ns)
    call, tokens = _compacting(sim, core, ns, core.list_secret_for_all_namespaces, compactions=1)
    monkeypatch.setattr(connection, "_LIST_PAGE", 1)
    monkeypatch.setattr(cluster.core, "list_secret_for_all_namespaces", call)

    items = [s for s in cluster.managed_objects("secrets") if s["metadata"]["namespace"] == ns]

    assert sorted(s["metadata"]["name"] for s in items) == [f"paged-{i}" for i in range(SECRETS)]
    assert tokens[0] is None and tokens[1] is not None
    assert tokens.count(None) == 2, "the list must start again from its first page, exactly once"


def test_a_continue_token_that_expires_again_after_the_relist_is_gone(
    cluster: Cluster, core: client.CoreV1Api, sim: KubeSim, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _secrets(core, ns)
    call, tokens = _compacting(sim, core, ns, core.list_secret_for_all_namespaces, compactions=2)
    monkeypatch.setattr(connection, "_LIST_PAGE", 1)
    monkeypatch.setattr(cluster.core, "list_secret_for_all_namespaces", call)

    with pytest.raises(Gone):
        cluster.managed_objects("secrets")
    assert tokens.count(None) == 2

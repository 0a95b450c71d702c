"""The one call path from Trainyard to the Kubernetes API: configuration, retries, typed errors, paging.

Every request goes through `Connection._retry` (its callers apply the request timeout), which retries
transient failures (5xx, 429, timeouts, broken connections) with exponential backoff and jitter, and
turns every failure into a typed `clusterio.errors` exception. Objects come back as plain dicts in the
API's own JSON shape (camelCase), so callers never depend on the client's model classes. The topics
built on it (tenant fences, job objects, reads) live in their own modules and meet in `Cluster`.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from clusterio import names
from clusterio.errors import Gone, Unavailable, error_from_api_exception
from clusterio.logs import Stream

T = TypeVar("T")
Obj = dict[str, Any]
_LIST_PAGE = 500
_RETRY_AFTER_MAX = 10.0


def labels_of(obj: Obj) -> dict[str, str]:
    """An object's labels (empty when it has none), from its JSON shape."""
    return (obj.get("metadata") or {}).get("labels") or {}


class Connection:
    """A connection to one Kubernetes cluster, with its own `ApiClient` (the global config is untouched).

    `kubeconfig` is a kubeconfig file (with an optional `context`); without one, the pod's in-cluster
    service-account credentials are used. `retries` is how many times a transient failure is retried
    (so up to `retries + 1` tries), sleeping `backoff * 2**n` seconds (with jitter) before retry n.
    """

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        request_timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        installation: str | None = None,
        pool_label: str = "",
    ) -> None:
        configuration = client.Configuration()
        try:
            if kubeconfig:
                config.load_kube_config(
                    config_file=kubeconfig,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                config.load_incluster_config(client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError) as exc:
            where = f"kubeconfig {kubeconfig}" if kubeconfig else "in-cluster service account"
            raise Unavailable(f"no usable cluster configuration ({where}): {exc}") from exc
        configuration.retries = False
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 32)
        self.request_timeout = request_timeout
        self.retries = retries
        self.backoff = backoff
        # Every job object this client creates carries the installation's label, and every selector it
        # lists, watches or tears down by is narrowed to it: two installations can share a cluster.
        self.installation = names.label_value(installation) if installation else None
        # The node label that names a node's pool (GKE `cloud.google.com/gke-nodepool`, EKS
        # `eks.amazonaws.com/nodegroup`, Karpenter `karpenter.sh/nodepool`): `NodeInfo.pool` reads it.
        self.pool_label = pool_label
        self.api_client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api_client)
        self.networking = client.NetworkingV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.scheduling = client.SchedulingV1Api(self.api_client)

    def close(self) -> None:
        """Close the connection pool."""
        self.api_client.close()

    def ping(self, timeout: float = 3.0) -> str:
        """The API server's version: a cheap reachability check for readiness probes (one try, no retry)."""
        try:
            info = client.VersionApi(self.api_client).get_code(_request_timeout=timeout)
        except ApiException as exc:
            raise error_from_api_exception(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}") from exc
        return str(info.git_version)

    def selector(self, base: str) -> str:
        """`base` narrowed to this client's installation (unchanged without one)."""
        return names.installation_selector(base, self.installation)

    def _retry(self, operation: Callable[[], T]) -> T:
        """Run one API operation, retrying transient failures with backoff; raise typed errors.

        The only path to the API server: 5xx, 429 (honouring Retry-After, capped), timeouts and
        connection errors are retried `self.retries` times, anything else is raised at once.
        """
        attempt = 0
        while True:
            delay = self.backoff * (2**attempt) * random.uniform(0.8, 1.2)
            try:
                return operation()
            except ApiException as exc:
                error = error_from_api_exception(exc)
                headers = getattr(exc, "headers", None) or {}
                with contextlib.suppress(TypeError, ValueError):
                    delay = min(max(delay, float(headers.get("Retry-After") or "")), _RETRY_AFTER_MAX)
                cause: BaseException = exc
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                error = Unavailable(f"{type(exc).__name__}: {exc}")
                cause = exc
            if not isinstance(error, Unavailable) or attempt >= self.retries:
                raise error from cause
            time.sleep(delay)
            attempt += 1

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call an API method and return its body parsed as JSON (None when empty), reading included."""
        kwargs.setdefault("_request_timeout", self.request_timeout)

        def call() -> Any:
            data = fn(*args, _preload_content=False, **kwargs).data
            return json.loads(data) if data else None

        return self._retry(call)

    def _open_stream(self, fn: Callable[..., Any], *args: Any, read_timeout: float, **kwargs: Any) -> Stream:
        timeout = (self.request_timeout, read_timeout)
        return Stream(
            self._retry(lambda: fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs))
        )

    def _list_all(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[list[Obj], str]:
        """List every page of a collection; returns the items and the list's resourceVersion.

        A continue token can expire between pages (410 once etcd compacts past the list's revision, every
        5 minutes on a real cluster); the list then starts again from its first page, once, since pages of
        two revisions cannot be stitched together. A second 410 is raised (`Gone`)."""
        try:
            return self._list_pages(fn, *args, **kwargs)
        except _ExpiredContinue:
            return self._list_pages(fn, *args, relist=True, **kwargs)

    def _list_pages(
        self, fn: Callable[..., Any], *args: Any, relist: bool = False, **kwargs: Any
    ) -> tuple[list[Obj], str]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            try:
                page = self._json(fn, *args, limit=_LIST_PAGE, _continue=token, **kwargs)
            except Gone as exc:
                if token is None or relist:
                    raise
                raise _ExpiredContinue from exc
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")


class _ExpiredContinue(Exception):
    """A continue token got 410 Gone part-way through a paged list."""

"""Running kubesim in-process for tests: ``with running_kubesim(tmp_path) as sim: ...``."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from kubesim import auth, tls
from kubesim.cluster import Cluster
from kubesim.faults import WEBHOOK_FAILURE, AdmissionRule, FaultRule, ImagePullRule, pod_create_path
from kubesim.server import ApiHTTPServer


def kubeconfig_text(url: str, token: str, ca_cert: Path) -> str:
    """A kubeconfig for the HTTPS server at ``url`` (trusting ``ca_cert``), authenticating with ``token``."""
    ca_data = base64.b64encode(ca_cert.read_bytes()).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kubesim", "cluster": {"server": url, "certificate-authority-data": ca_data}}
            ],
            "users": [{"name": "kubesim", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "kubesim",
                    "context": {"cluster": "kubesim", "user": "kubesim", "namespace": "default"},
                }
            ],
            "current-context": "kubesim",
        }
    )


class KubeSim:
    """A kubesim server (HTTP thread + control loop) with handles for fault injection."""

    def __init__(
        self,
        state_dir: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        kubeconfig_path: Path | None = None,
        auto: bool = True,
        token: str | None = None,
        advertise_host: str = "127.0.0.1",
        **cluster_options: Any,
    ):
        self.state_dir = Path(state_dir)
        self.host = host
        self.options = cluster_options
        self.cluster = Cluster(self.state_dir, **cluster_options)  # locks the state dir first
        try:
            self.token = token or auth.load_or_create_token(self.state_dir)
            self.tls = tls.serving_files(self.state_dir, advertise_host)
            self.server = ApiHTTPServer((host, port), self.cluster, self.token, self.tls.server_context())
        except OSError:
            self.cluster.stop()  # its pod network and DNS server too
            raise
        self.port = self.server.server_address[1]
        self.cluster.port = self.port
        host_part = f"[{advertise_host}]" if ":" in advertise_host else advertise_host
        self.url = f"https://{host_part}:{self.port}"
        self.kubeconfig_path = Path(kubeconfig_path or self.state_dir / "kubeconfig")
        self.auto = auto
        self._thread: threading.Thread | None = None

    def start(self) -> KubeSim:
        """Write the kubeconfig and start serving (and, unless ``auto=False``, the control loop)."""
        self.kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.kubeconfig_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(kubeconfig_text(self.url, self.token, self.tls.ca_cert))
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name="kubesim-http", daemon=True
        )
        self._thread.start()
        if self.auto:
            self.cluster.start()
        return self

    def stop(self) -> None:
        """Stop serving, end all streams and kill every pod process."""
        self.cluster.stopping.set()
        self.server.shutdown()
        self.server.close_all()
        self.server.server_close()
        self.cluster.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self, **changes: Any) -> KubeSim:
        """Stop, then start again on the same state dir and port, as ``make up`` after a stop does: the
        stored objects come back and the pods that were running are reported as after a node reboot.
        ``changes`` override cluster options for the new start (``fresh=True`` wipes the store)."""
        self.stop()
        self.options = {**{k: v for k, v in self.options.items() if k != "fresh"}, **changes}
        self.cluster = Cluster(self.state_dir, **self.options)
        self.server = ApiHTTPServer(
            (self.host, self.port), self.cluster, self.token, self.tls.server_context()
        )
        self.cluster.port = self.port
        return self.start()

    def stop_api_server(self) -> None:
        """Take the API server down as a kube-apiserver restart does: every open connection (watches, followed
        logs, keep-alives) is cut and new ones are refused, while the cluster runs on: the store (as etcd
        keeps it), scheduler, controllers, kubelets and the pods' processes. ``start_api_server`` ends it."""
        self.server.shutdown()
        self.server.close_all()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def start_api_server(self) -> None:
        """Serve the same cluster again on the same port after ``stop_api_server``. A new kube-apiserver's
        watch cache starts at the current resourceVersion: a watch resuming from an older one gets 410 Gone
        and its client must list again, as against a real restarted apiserver."""
        self.cluster.store.compact(0)
        self.server = ApiHTTPServer(
            (self.host, self.port), self.cluster, self.token, self.tls.server_context()
        )
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name="kubesim-http", daemon=True
        )
        self._thread.start()

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` configured for this server."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        config.api_key = {"authorization": self.token}
        config.api_key_prefix = {"authorization": "Bearer"}
        config.ssl_ca_cert = str(self.tls.ca_cert)
        return client.ApiClient(config)

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context trusting this cluster's CA, for raw HTTPS requests (with ``auth_headers()``)."""
        return self.tls.client_context()

    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header for raw HTTP requests to this server."""
        return {"Authorization": f"Bearer {self.token}"}

    def expose_host_port(self, port: int, host_port: int | None = None) -> None:
        """Let pods reach ``127.0.0.1:host_port`` (default ``port``) of this machine at
        ``host.kubesim.internal:port``."""
        self.cluster.expose_host_port(port, host_port)

    @property
    def node_ip(self) -> str:
        """The node address pods see (127.0.0.1 when pods share this machine's network)."""
        return self.cluster.node_ip

    def step(self, times: int = 1) -> None:
        """Run the scheduler, controllers and kubelets explicitly (deterministic mode, ``auto=False``)."""
        for _ in range(times):
            self.cluster.step()

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
        """Poll ``predicate`` until it returns something truthy (stepping when not in auto mode)."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.auto:
                self.step()
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout}s")
            time.sleep(interval)

    def inject_fault(
        self,
        method: str,
        path: str,
        code: int | None = None,
        hang_seconds: float = 0.0,
        count: int | None = None,
    ) -> FaultRule:
        """Answer requests matching ``method`` (or ``*``) and the ``path`` regex with ``code`` / a hang."""
        return self.cluster.faults.add(FaultRule(method, path, code, hang_seconds, count))

    def clear_faults(self) -> None:
        """Remove every injected fault (API rules, image-pull failures, kubelet admission rejections)."""
        self.cluster.faults.clear()
        self.cluster.clear_image_pull_failures()
        self.cluster.faults.clear_admission_rejections()

    def fail_image_pulls(self, image_pattern: str, message: str | None = None) -> ImagePullRule:
        """Containers whose image matches the regex (``re.search``) never start: they wait with reason
        ErrImagePull, then ImagePullBackOff, until ``clear_image_pull_failures()``."""
        return self.cluster.fail_image_pulls(image_pattern, message)

    def clear_image_pull_failures(self, rule: ImagePullRule | None = None) -> None:
        """Let images pull again (one rule, or all); waiting containers start at their next retry."""
        self.cluster.clear_image_pull_failures(rule.id if rule else None)

    def add_private_registry(
        self, host: str, username: str | None = None, password: str | None = None
    ) -> None:
        """Make ``host`` a private registry (kubesim.registries): its images pull only for pods whose
        ``imagePullSecrets`` hold credentials for it (these ones, when given), else ErrImagePull."""
        login = (username, password or "") if username is not None else None
        self.cluster.registries.add(host, login)

    def remove_private_registry(self, host: str | None = None) -> None:
        """Make ``host`` (or every private host) public again; waiting containers start at their next retry."""
        self.cluster.registries.remove(host)

    def fail_pod_creates(
        self, namespace_regex: str, code: int = 500, count: int | None = None, message: str = WEBHOOK_FAILURE
    ) -> FaultRule:
        """Answer pod creations in matching namespaces (the whole name matches the regex) as the apiserver
        does when an admission webhook fails (500 ``Internal error occurred: failed calling webhook ...``),
        ``count`` times or until ``clear_faults()`` / ``cluster.faults.clear(rule.id)``."""
        rule = FaultRule("POST", pod_create_path(namespace_regex), code, 0.0, count, message)
        return self.cluster.faults.add(rule)

    def reject_pod_admission(
        self,
        pattern: str,
        node: str = "",
        reason: str = "UnexpectedAdmissionError",
        message: str = "",
        count: int | None = None,
    ) -> AdmissionRule:
        """Make the kubelet reject pods whose ``namespace/name`` matches ``pattern`` (on nodes matching
        ``node``): phase Failed, ``reason``, ``Pod was rejected: <message>``, as a kubelet whose device plugin
        restarted does (``UnexpectedAdmissionError``, ``OutOfnvidia.com/gpu``)."""
        rule = AdmissionRule(pattern, reason, message, node, count)
        return self.cluster.faults.reject_pod_admission(rule)

    def clear_admission_rejections(self, rule: AdmissionRule | None = None) -> None:
        """Let kubelets admit pods again (one rule, or all)."""
        self.cluster.faults.clear_admission_rejections(rule.id if rule else None)

    def inject_sidecars(self, mode: str | None = "classic") -> None:
        """Switch the sidecar injector (kubesim.sidecars): pods created in namespaces labelled
        ``kubesim.io/inject-sidecar: "true"`` get a never-ending ``classic`` or ``native`` sidecar; None: off."""
        self.cluster.api.sidecars.switch(mode)

    def evict_pod(self, namespace: str, name: str, grace_period_seconds: int | None = None) -> None:
        """Evict a pod as ``POST .../pods/NAME/eviction`` does: DisruptionTarget (EvictionByEvictionAPI),
        SIGTERM, SIGKILL after the grace period, phase Failed with reason Evicted."""
        self.cluster.evict_pod(namespace, name, grace_period_seconds)

    def kubelet_evict(self, namespace: str, name: str, message: str | None = None) -> None:
        """Evict a running pod as its kubelet does under node pressure: DisruptionTarget
        (TerminationByKubelet), containers killed, phase Failed with reason Evicted; the pod is not deleted."""
        self.cluster.kubelet_evict(namespace, name, message)

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Make a node NotReady (Ready=Unknown, unreachable taints; its pods not Ready, then evicted once
        their toleration of the NoExecute taint runs out, 300 s by default) or Ready again."""
        self.cluster.set_node_ready(name, ready)

    def lose_node(self, name: str) -> None:
        """Lose a node: its pods fail with reason NodeLost."""
        self.cluster.lose_node(name)

    def add_gpu_node(self, name: str, gpus: int, **options: Any) -> None:
        """Add a simulated GPU node."""
        self.cluster.add_node(
            name,
            cpu=options.pop("cpu", 32),
            memory=options.pop("memory", 256 * 2**30),
            gpus=gpus,
            simulated=True,
            **options,
        )

    def add_node_group(self, group: dict[str, Any]) -> None:
        """Let the cluster autoscaler (kubesim.autoscaler) grow a node group from now on (see NodeGroup)."""
        from kubesim.autoscaler import NodeGroup

        made = NodeGroup.from_dict(group)
        with self.cluster.loop_lock:
            self.cluster.autoscaler.groups[made.name] = made

    def remove_node_group(self, name: str) -> None:
        """Stop scaling a group; its nodes stay (scale it to zero first to leave none)."""
        with self.cluster.loop_lock:
            self.cluster.autoscaler.groups.pop(name, None)

    def pause_kubelet(self, paused: bool = True) -> None:
        """Freeze or resume all kubelets."""
        self.cluster.pause_kubelets(paused)

    def request_counts(self, reset: bool = False) -> dict[str, int]:
        """API requests served so far by ``"verb resource"`` (e.g. ``"list pods"``, ``"watch nodes"``);
        `reset` starts the count again."""
        counts = self.cluster.requests.snapshot()
        if reset:
            self.cluster.requests.reset()
        return counts

    def compact(self, keep: int = 0) -> None:
        """Drop watch history so older resourceVersions get 410 Gone."""
        self.cluster.store.compact(keep)


@contextlib.contextmanager
def running_kubesim(tmp_path: Path, gpu_nodes: int = 0, **options: Any) -> Iterator[KubeSim]:
    """Start kubesim on a free port in this process; stop it (and every pod process) on exit."""
    sim = KubeSim(Path(tmp_path), gpu_nodes=gpu_nodes, **options)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()

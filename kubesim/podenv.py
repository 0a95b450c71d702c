"""What a container process sees of its pod: volumes mapped to local folders, and its environment."""

from __future__ import annotations

import base64
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kubesim import runtime
from kubesim.network import HOST_NAME, pod_hostname
from kubesim.podstatus import POD_IP
from kubesim.quantity import parse_quantity
from kubesim.runtime import PathMap, expand, resolve_executable
from kubesim.sandbox import Layout, Mount, gpu_devices, identity
from kubesim.store import Obj
from kubesim.volumes import PLURAL as PVCS
from kubesim.volumes import claim_folder

if TYPE_CHECKING:
    from kubesim.cluster import Cluster
    from kubesim.kubelet import PodRuntime

_SVC_HOST = re.compile(r"\b[a-z0-9]([-a-z0-9.]*[a-z0-9])?\.svc(\.cluster\.local)?\b")
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


@dataclass
class Launch:
    """How to start one container: its full command line, environment and (host) working directory, or
    the ``problem`` that keeps it from starting."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    problem: str | None = None


class PodEnvironment:
    """Builds mounts and env for the containers of one node's pods (there is no chroot or DNS to lean on)."""

    def __init__(self, cluster: Cluster, node_name: str, gpu_count: int):
        self.cluster = cluster
        self.node_name = node_name
        self.gpu_count = gpu_count

    def prepare_volumes(self, pod_dir: Path, pod: Obj, container: Obj, links: bool = True) -> list[Mount]:
        """Create the local folders behind the container's mounts and return them; ``links`` also mirrors
        them in a symlink tree under ``pod_dir/rootfs`` (for the unsandboxed mode's working directories).

        emptyDir and claim folders are created 0777, as a cluster's are, so a ``runAsUser`` can write them;
        a ``subPath`` folder gets its volume's mode, as the kubelet creates it."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        mounts = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"], {})
            if "hostPath" in volume:
                host = self.cluster.state_dir / "hostpath" / volume["hostPath"]["path"].lstrip("/")
            elif "persistentVolumeClaim" in volume:
                host = self._claim_folder(pod_dir, pod, volume["persistentVolumeClaim"].get("claimName", ""))
            else:
                host = pod_dir / "volumes" / mount["name"]
            if not host.exists():
                host.mkdir(parents=True)
                if "hostPath" not in volume:
                    host.chmod(0o777)
            self._fill_volume(pod["metadata"]["namespace"], volume, host)
            sub = mount.get("subPath")
            target = host / sub if sub else host
            if not target.exists():
                target.mkdir(parents=True)
                target.chmod(host.stat().st_mode & 0o7777)
            mounts.append(Mount(mount["mountPath"], str(target), _read_only(volume, mount)))
            if not links:
                continue
            link = pod_dir / "rootfs" / mount["mountPath"].lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists() and not link.is_symlink():
                link.symlink_to(target)
        return mounts

    def command(
        self,
        pod_dir: Path,
        gpus: list[int],
        pod: Obj,
        container: Obj,
        restart: int,
        rt: PodRuntime | None = None,
    ) -> Launch:
        """The container's launch: in the sandbox (volumes at their mountPaths, a fresh root folder per
        start) when there is one, else as a plain process with mount paths rewritten to their folders; in
        the pod's network namespace (``rt.net``) when it has one."""
        sandbox = self.cluster.sandbox
        net = rt.net if rt is not None else None
        pod_ip = rt.ip if rt is not None else POD_IP
        mounts = self.prepare_volumes(pod_dir, pod, container, links=not sandbox.available)
        user = identity(pod, container)
        paths = PathMap([] if sandbox.available else [(m.path, m.source) for m in mounts])
        home = user.home if sandbox.available else None
        env = self.env(pod_dir, gpus, pod, container, paths, home=home, pod_ip=pod_ip)
        enter = ["/usr/bin/nsenter", f"--net={net.path}", "--"] if net is not None else []
        argv = [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
        argv = resolve_executable([paths.rewrite(a) for a in argv])
        if not argv:
            return Launch([], env, "", "kubesim cannot run image entrypoints: set the container's command")
        workdir = container.get("workingDir") or ""
        if not sandbox.available:
            cwd = paths.rewrite(workdir) if workdir else str(pod_dir)
            if workdir and cwd == workdir:
                cwd = str(pod_dir / "rootfs" / workdir.lstrip("/"))
                os.makedirs(cwd, exist_ok=True)
            return Launch([*enter, *argv], env, cwd)
        etc = [Mount(path, source, True) for path, source in (rt.etc_files if rt is not None else {}).items()]
        layout = Layout(
            pod_dir / "containers" / f"{container['name']}.{restart}",
            mounts + etc,
            workdir or "/",
            user,
            read_only_root=bool((container.get("securityContext") or {}).get("readOnlyRootFilesystem")),
            devices=gpu_devices(),
            hostname=pod_hostname(pod) if net is not None else None,
        )
        problem = sandbox.problem(layout)
        if problem is not None:
            return Launch([], env, "", problem)
        sandbox.prepare(layout)
        return Launch([*enter, *sandbox.wrap(argv, layout)], env, str(pod_dir))

    def _claim_folder(self, pod_dir: Path, pod: Obj, claim_name: str) -> Path:
        claim = self.cluster.store.peek(PVCS, pod["metadata"]["namespace"], claim_name)
        if claim is None or not (claim.get("spec") or {}).get("volumeName"):
            # volume_problem keeps such pods from starting; a claim lost in between gets a scratch folder.
            return pod_dir / "volumes" / f"missing-claim-{claim_name}"
        return claim_folder(self.cluster.state_dir, claim)

    def volume_problem(self, pod: Obj) -> str | None:
        """Why the kubelet cannot set up the pod's volumes yet (a missing claim, ConfigMap or Secret), in
        the words of its FailedMount event, or None."""
        namespace = pod["metadata"]["namespace"]
        store = self.cluster.store
        for volume in pod["spec"].get("volumes") or []:
            vname = volume.get("name", "")
            if "persistentVolumeClaim" in volume:
                claim_name = volume["persistentVolumeClaim"].get("claimName", "")
                claim = store.peek(PVCS, namespace, claim_name)
                if claim is None or (claim.get("status") or {}).get("phase") != "Bound":
                    return (
                        f"Unable to attach or mount volumes: unmounted volumes=[{vname}]: "
                        f'persistentvolumeclaim "{claim_name}" not found or not bound'
                    )
            for kind, plural, key in (
                ("configMap", "configmaps", "name"),
                ("secret", "secrets", "secretName"),
            ):
                ref = volume.get(kind)
                if ref is None or ref.get("optional"):
                    continue
                if store.peek(plural, namespace, ref.get(key) or "") is None:
                    return (
                        f'MountVolume.SetUp failed for volume "{vname}" : '
                        f'{kind.lower()} "{ref.get(key) or ""}" not found'
                    )
        return None

    def _fill_volume(self, namespace: str, volume: Obj, host: Path) -> None:
        """Write a configMap/secret volume's keys as files (``items`` picks keys and renames them)."""
        for kind, plural in (("configMap", "configmaps"), ("secret", "secrets")):
            if kind not in volume:
                continue
            ref = volume[kind]
            obj = self.cluster.store.peek(plural, namespace, ref.get("name") or ref.get("secretName") or "")
            files: dict[str, bytes] = {}
            for key, value in ((obj or {}).get("data") or {}).items():
                files[key] = base64.b64decode(value) if kind == "secret" else str(value).encode()
            for key, value in ((obj or {}).get("binaryData") or {}).items():
                files[key] = base64.b64decode(value)
            items = ref.get("items")
            if items:
                files = {item["path"]: files[item["key"]] for item in items if item.get("key") in files}
            mode = ref.get("defaultMode", 0o644)
            for rel, data in files.items():
                target = (host / rel).resolve()
                if not target.is_relative_to(host.resolve()):
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                target.chmod(mode)

    def env(
        self,
        pod_dir: Path,
        gpus: list[int],
        pod: Obj,
        container: Obj,
        paths: PathMap,
        home: str | None = None,
        pod_ip: str = POD_IP,
    ) -> dict[str, str]:
        """The container's environment (service host names rewritten to the shared loopback when pods have
        no network of their own); ``home``
        (sandboxed containers) replaces this machine's HOME and TMPDIR, which the container cannot see."""
        meta = pod["metadata"]
        namespace = meta["namespace"]
        env = {k: os.environ[k] for k in runtime._PASS_ENV if k in os.environ}
        if home is not None:
            env.pop("TMPDIR", None)
            env["HOME"] = home
        # `python` run by a shell inside the container (`sh -c "python train.py"`) finds kubesim's own
        # interpreter first, as a bare `python` command does (runtime.resolve_executable).
        env["PATH"] = os.pathsep.join(p for p in (str(Path(sys.executable).parent), env.get("PATH")) if p)
        env.update(
            {
                "HOSTNAME": meta["name"],
                "KUBERNETES_SERVICE_HOST": self.cluster.node_ip,
                "KUBERNETES_SERVICE_PORT": str(self.cluster.port),
                "KUBESIM_POD_DIR": str(pod_dir),
            }
        )
        if self.gpu_count:
            env["CUDA_VISIBLE_DEVICES"] = env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        services = self.cluster.store.list("services", namespace)[0]
        isolated = self.cluster.network.available
        service_names = set() if isolated else {s["metadata"]["name"] for s in services}
        if pod["spec"].get("enableServiceLinks", True):
            for svc in services:
                ports = (svc.get("spec") or {}).get("ports") or []
                ip = (svc.get("spec") or {}).get("clusterIP")
                if ports and ip and ip != "None":
                    prefix = svc["metadata"]["name"].upper().replace("-", "_")
                    env[f"{prefix}_SERVICE_HOST"] = ip if isolated else POD_IP
                    env[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for source in container.get("envFrom") or []:
            ref = source.get("configMapRef") or source.get("secretRef") or {}
            plural = "configmaps" if "configMapRef" in source else "secrets"
            obj = self.cluster.store.peek(plural, namespace, ref.get("name", "")) or {}
            for key, value in (obj.get("data") or {}).items():
                decoded = base64.b64decode(value).decode() if plural == "secrets" else str(value)
                env[source.get("prefix", "") + key] = decoded
        for var in container.get("env") or []:
            if "valueFrom" in var:
                value = self._value_from(pod, var["valueFrom"], pod_ip)
            else:
                value = expand(str(var.get("value", "")), env)
            env[var["name"]] = paths.rewrite(value if isolated else localize_hosts(value, service_names))
        return env

    def _value_from(self, pod: Obj, source: Obj, pod_ip: str = POD_IP) -> str:
        meta = pod["metadata"]
        if "fieldRef" in source:
            path = source["fieldRef"].get("fieldPath", "")
            simple = {
                "metadata.name": meta["name"],
                "metadata.namespace": meta["namespace"],
                "metadata.uid": meta["uid"],
                "spec.nodeName": self.node_name,
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
                "status.podIP": pod_ip,
                "status.hostIP": self.cluster.node_ip,
            }
            if path in simple:
                return simple[path]
            if m := _FIELD.match(path):
                return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
            return ""
        for kind, plural in (("configMapKeyRef", "configmaps"), ("secretKeyRef", "secrets")):
            if kind in source:
                ref = source[kind]
                obj = self.cluster.store.peek(plural, meta["namespace"], ref.get("name", "")) or {}
                value = (obj.get("data") or {}).get(ref.get("key", ""), "")
                return base64.b64decode(value).decode() if plural == "secrets" and value else str(value)
        if "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            for container in pod["spec"].get("containers") or []:
                if not ref.get("containerName") or container["name"] == ref["containerName"]:
                    section, _, res = ref.get("resource", "").partition(".")
                    value = ((container.get("resources") or {}).get(section) or {}).get(res)
                    if value is not None:
                        return str(int(parse_quantity(value).__ceil__()))
        return ""


def _read_only(volume: Obj, mount: Obj) -> bool:
    """Whether the container gets the volume read-only: asked for, or a kind the kubelet always mounts so."""
    if mount.get("readOnly") or (volume.get("persistentVolumeClaim") or {}).get("readOnly"):
        return True
    return any(kind in volume for kind in ("configMap", "secret", "downwardAPI", "projected"))


def localize_hosts(value: str, service_names: set[str]) -> str:
    """Rewrite ``*.svc[.cluster.local]`` names, a bare Service name and ``host.kubesim.internal`` to the pods'
    shared loopback IP: the fallback where pods have no network namespace and no cluster DNS."""
    if value in service_names:
        return POD_IP
    return _SVC_HOST.sub(POD_IP, value.replace(HOST_NAME, POD_IP))

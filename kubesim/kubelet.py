"""The kubelet of one node: starts pods bound to it as local processes and reports their status."""

from __future__ import annotations

import base64
import logging
import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kubesim import runtime
from kubesim.quantity import parse_quantity
from kubesim.runtime import ContainerProcess, PathMap, expand, now_rfc3339, resolve_executable
from kubesim.store import Obj, clone

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

log = logging.getLogger("kubesim.kubelet")
GPU = "nvidia.com/gpu"
POD_IP = "127.0.0.1"
_SVC_HOST = re.compile(r"\b[a-z0-9]([-a-z0-9.]*[a-z0-9])?\.svc(\.cluster\.local)?\b")
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


@dataclass
class PodRuntime:
    """What the kubelet knows about one pod it runs."""

    uid: str
    namespace: str
    name: str
    dir: Path
    gpus: list[int]
    containers: dict[str, ContainerProcess] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    backoff_until: dict[str, float] = field(default_factory=dict)
    last_state: dict[str, Obj] = field(default_factory=dict)
    terminating_since: float | None = None
    killed: bool = False
    done: bool = False


class Kubelet:
    """Runs the pods bound to ``node_name``; ``sync`` reacts to the store, ``poll`` watches processes."""

    def __init__(self, cluster: Cluster, node_name: str, gpu_count: int):
        self.cluster = cluster
        self.node_name = node_name
        self.gpu_count = gpu_count
        self.pods: dict[str, PodRuntime] = {}
        self.paused = False
        self.last_sample = 0.0

    def step(self) -> None:
        """Start newly bound pods, terminate deleted ones and report container state changes."""
        if self.paused:
            return
        pods, _ = self.cluster.store.list("pods")
        mine = {
            p["metadata"]["uid"]: p for p in pods if (p.get("spec") or {}).get("nodeName") == self.node_name
        }
        for uid, runtime_ in list(self.pods.items()):
            if uid not in mine:
                self._kill(runtime_, grace=0)
                self._release(runtime_)
        for uid, pod in mine.items():
            phase = (pod.get("status") or {}).get("phase")
            if uid not in self.pods:
                if phase in ("Succeeded", "Failed"):
                    continue
                if pod["metadata"].get("deletionTimestamp"):
                    if not pod["metadata"].get("finalizers"):
                        self.cluster.store.remove(
                            "pods", pod["metadata"]["namespace"], pod["metadata"]["name"]
                        )
                    continue
                self.pods[uid] = self._start_pod(pod)
            self._sync_pod(self.pods[uid], pod)
        now = time.monotonic()
        if now - self.last_sample >= self.cluster.sample_interval:
            self.last_sample = now
            self._sample(now)

    def _start_pod(self, pod: Obj) -> PodRuntime:
        meta = pod["metadata"]
        pod_dir = self.cluster.state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        pod_dir.mkdir(parents=True, exist_ok=True)
        used = {g for r in self.pods.values() for g in r.gpus}
        want = sum(
            int(parse_quantity(((c.get("resources") or {}).get("limits") or {}).get(GPU, 0)))
            for c in pod["spec"].get("containers") or []
        )
        free = [g for g in range(self.gpu_count) if g not in used]
        runtime_ = PodRuntime(meta["uid"], meta["namespace"], meta["name"], pod_dir, free[:want])
        for container in pod["spec"].get("containers") or []:
            self.cluster.api.record_event(
                pod,
                "Normal",
                "Pulled",
                f'kubesim ignores container images: "{container.get("image", "")}" was not pulled; '
                f"the container's command runs as a local process",
                "kubelet",
            )
        self.cluster.api.mutate("pods", meta["namespace"], meta["name"], lambda p: _set_started(p))
        return runtime_

    def _sync_pod(self, rt: PodRuntime, pod: Obj) -> None:
        if rt.done:
            return
        spec = pod["spec"]
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(rt, pod)
            return
        changed = False
        for container in spec.get("containers") or []:
            cname = container["name"]
            proc = rt.containers.get(cname)
            if proc is None:
                if time.monotonic() < rt.backoff_until.get(cname, 0):
                    continue
                rt.containers[cname] = self._launch(rt, pod, container)
                self.cluster.api.record_event(
                    pod, "Normal", "Started", f"Started container {cname}", "kubelet"
                )
                changed = True
                continue
            if proc.stopped:
                continue
            self._enforce_memory(rt, proc)
            code = proc.poll()
            if code is None:
                continue
            proc.stopped = True
            if code == 137 and self.cluster.cgroups.oom_killed(proc.cgroup):
                proc.oom_killed = True
            self.cluster.cgroups.remove(proc.cgroup)
            changed = True
            policy = spec.get("restartPolicy", "Always")
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                rt.last_state[cname] = {"terminated": _terminated(proc)}
                rt.restarts[cname] = rt.restarts.get(cname, 0) + 1
                delay = min(self.cluster.restart_backoff * 2 ** (rt.restarts[cname] - 1), 300)
                rt.backoff_until[cname] = time.monotonic() + delay
                del rt.containers[cname]
                self.cluster.api.record_event(
                    pod, "Warning", "BackOff", f"Back-off restarting failed container {cname}", "kubelet"
                )
        if changed:
            self._report(rt, pod)

    def _launch(self, rt: PodRuntime, pod: Obj, container: Obj) -> ContainerProcess:
        mounts = self._prepare_volumes(rt, pod, container)
        paths = PathMap(mounts)
        env = self._env(rt, pod, container, paths)
        argv = [expand(a, env) for a in (container.get("command") or []) + (container.get("args") or [])]
        argv = resolve_executable([paths.rewrite(a) for a in argv])
        workdir = container.get("workingDir") or ""
        cwd = paths.rewrite(workdir) if workdir else str(rt.dir)
        if workdir and cwd == workdir:
            cwd = str(rt.dir / "rootfs" / workdir.lstrip("/"))
            os.makedirs(cwd, exist_ok=True)
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        memory = int(parse_quantity(limits["memory"])) if "memory" in limits else None
        cpu = float(parse_quantity(limits["cpu"])) if "cpu" in limits else None
        restart = rt.restarts.get(container["name"], 0)
        log_path = rt.dir / "logs" / f"{container['name']}.{restart}.log"
        if not argv:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.touch()
            return ContainerProcess(
                container["name"],
                None,
                log_path,
                now_rfc3339(),
                start_error="kubesim cannot run image entrypoints: set the container's command",
            )
        cgroup_name = f"{rt.uid[:8]}-{container['name']}-{restart}"
        return runtime.start_container(
            container["name"], argv, env, cwd, log_path, self.cluster.cgroups, cgroup_name, memory, cpu
        )

    def _prepare_volumes(self, rt: PodRuntime, pod: Obj, container: Obj) -> list[tuple[str, str]]:
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        mounts = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(mount["name"], {})
            if "hostPath" in volume:
                host = self.cluster.state_dir / "hostpath" / volume["hostPath"]["path"].lstrip("/")
            else:
                host = rt.dir / "volumes" / mount["name"]
            host.mkdir(parents=True, exist_ok=True)
            self._fill_volume(rt.namespace, volume, host)
            sub = mount.get("subPath")
            target = host / sub if sub else host
            target.mkdir(parents=True, exist_ok=True)
            mounts.append((mount["mountPath"], str(target)))
            link = rt.dir / "rootfs" / mount["mountPath"].lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists() and not link.is_symlink():
                link.symlink_to(target)
        return mounts

    def _fill_volume(self, namespace: str, volume: Obj, host: Path) -> None:
        for kind, plural in (("configMap", "configmaps"), ("secret", "secrets")):
            if kind not in volume:
                continue
            ref = volume[kind]
            obj = self.cluster.store.peek(plural, namespace, ref.get("name") or ref.get("secretName") or "")
            for key, value in ((obj or {}).get("data") or {}).items():
                data = base64.b64decode(value) if kind == "secret" else str(value).encode()
                (host / key).write_bytes(data)

    def _env(self, rt: PodRuntime, pod: Obj, container: Obj, paths: PathMap) -> dict[str, str]:
        meta = pod["metadata"]
        env = {k: os.environ[k] for k in runtime._PASS_ENV if k in os.environ}
        env.update(
            {
                "HOSTNAME": meta["name"],
                "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(self.cluster.port),
                "KUBESIM_POD_DIR": str(rt.dir),
            }
        )
        if self.gpu_count:
            env["CUDA_VISIBLE_DEVICES"] = env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, rt.gpus))
        services = self.cluster.store.list("services", rt.namespace)[0]
        service_names = {s["metadata"]["name"] for s in services}
        if pod["spec"].get("enableServiceLinks", True):
            for svc in services:
                ports = (svc.get("spec") or {}).get("ports") or []
                ip = (svc.get("spec") or {}).get("clusterIP")
                if ports and ip and ip != "None":
                    prefix = svc["metadata"]["name"].upper().replace("-", "_")
                    env[f"{prefix}_SERVICE_HOST"] = "127.0.0.1"
                    env[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for source in container.get("envFrom") or []:
            ref = source.get("configMapRef") or source.get("secretRef") or {}
            plural = "configmaps" if "configMapRef" in source else "secrets"
            obj = self.cluster.store.peek(plural, rt.namespace, ref.get("name", "")) or {}
            for key, value in (obj.get("data") or {}).items():
                decoded = base64.b64decode(value).decode() if plural == "secrets" else str(value)
                env[source.get("prefix", "") + key] = decoded
        for var in container.get("env") or []:
            if "valueFrom" in var:
                value = self._value_from(pod, var["valueFrom"])
            else:
                value = expand(str(var.get("value", "")), env)
            env[var["name"]] = paths.rewrite(_localize_hosts(value, service_names))
        return env

    def _value_from(self, pod: Obj, source: Obj) -> str:
        meta = pod["metadata"]
        if "fieldRef" in source:
            path = source["fieldRef"].get("fieldPath", "")
            simple = {
                "metadata.name": meta["name"],
                "metadata.namespace": meta["namespace"],
                "metadata.uid": meta["uid"],
                "spec.nodeName": self.node_name,
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
                "status.podIP": POD_IP,
                "status.hostIP": POD_IP,
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

    def _enforce_memory(self, rt: PodRuntime, proc: ContainerProcess) -> None:
        if proc.memory_limit is None or proc.cgroup.memory_dir is not None or proc.exit_code is not None:
            return
        if proc.rss_bytes > proc.memory_limit:
            log.info("container %s/%s/%s over its memory limit: killing", rt.namespace, rt.name, proc.name)
            proc.signal_group(signal.SIGKILL)
            proc.oom_killed = True

    def _sample(self, now: float) -> None:
        for rt in self.pods.values():
            for proc in rt.containers.values():
                proc.sample(now)
                self._enforce_memory(rt, proc)
        self.cluster.throttle.update(self.pods.values())

    def _terminate(self, rt: PodRuntime, pod: Obj) -> None:
        meta = pod["metadata"]
        deadline = float((meta.get("annotations") or {}).get("kubesim.io/deletion-deadline", 0) or 0)
        running = [c for c in rt.containers.values() if c.poll() is None]
        if rt.terminating_since is None:
            rt.terminating_since = time.monotonic()
            for proc in running:
                proc.signal_group(signal.SIGTERM)
                self.cluster.api.record_event(
                    pod, "Normal", "Killing", f"Stopping container {proc.name}", "kubelet"
                )
        if running and time.time() >= deadline:
            for proc in running:
                proc.signal_group(signal.SIGKILL, self.cluster.cgroups.pids(proc.cgroup))
            runtime.wait_all(running, 2)
        if any(c.poll() is None for c in rt.containers.values()):
            return
        self._report(rt, pod)
        self._release(rt)
        if not meta.get("finalizers"):
            self.cluster.store.remove("pods", meta["namespace"], meta["name"])
            self.cluster.api._notify()

    def _kill(self, rt: PodRuntime, grace: float) -> None:
        for proc in rt.containers.values():
            if proc.poll() is None:
                proc.signal_group(signal.SIGKILL, self.cluster.cgroups.pids(proc.cgroup))
        runtime.wait_all(list(rt.containers.values()), 2)

    def _release(self, rt: PodRuntime) -> None:
        for proc in rt.containers.values():
            self.cluster.cgroups.remove(proc.cgroup)
        rt.done = True
        self.pods.pop(rt.uid, None)

    def _report(self, rt: PodRuntime, pod: Obj) -> None:
        spec = pod["spec"]
        statuses = []
        for container in spec.get("containers") or []:
            cname = container["name"]
            proc = rt.containers.get(cname)
            status: Obj = {
                "name": cname,
                "image": container.get("image", ""),
                "imageID": "",
                "restartCount": rt.restarts.get(cname, 0),
                "ready": False,
                "started": False,
                "lastState": rt.last_state.get(cname, {}),
            }
            if proc is None:
                reason = "CrashLoopBackOff" if rt.restarts.get(cname) else "ContainerCreating"
                status["state"] = {"waiting": {"reason": reason}}
            elif proc.exit_code is None:
                status.update(ready=True, started=True, containerID=f"kubesim://{proc.pid}")
                status["state"] = {"running": {"startedAt": proc.started_at}}
            else:
                status["containerID"] = f"kubesim://{proc.pid or 0}"
                status["state"] = {"terminated": _terminated(proc)}
            statuses.append(status)
        phase = _phase(spec.get("restartPolicy", "Always"), statuses)
        ready = all(s["ready"] for s in statuses)

        def apply(p: Obj) -> None:
            st = p.setdefault("status", {})
            st["containerStatuses"] = statuses
            st["phase"] = phase
            _set_condition(st, "ContainersReady", ready, "" if ready else "ContainersNotReady")
            _set_condition(st, "Ready", ready, "" if ready else "ContainersNotReady")
            if phase in ("Succeeded", "Failed"):
                _set_condition(st, "Ready", False, "PodCompleted")
                _set_condition(st, "ContainersReady", False, "PodCompleted")

        self.cluster.api.mutate("pods", rt.namespace, rt.name, apply)
        if phase in ("Succeeded", "Failed"):
            self._release(rt)

    def fail_all(self, reason: str, message: str) -> None:
        """Kill every pod of this node and mark it Failed with a DisruptionTarget condition (node loss)."""
        pods = [p for p in self.cluster.store.list("pods")[0] if p["spec"].get("nodeName") == self.node_name]
        for rt in list(self.pods.values()):
            self._kill(rt, grace=0)
            self._release(rt)
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue

            def apply(p: Obj) -> None:
                st = p.setdefault("status", {})
                st.update(phase="Failed", reason=reason, message=message)
                for cs in st.get("containerStatuses") or []:
                    started = (cs.get("state") or {}).get("running", {}).get("startedAt")
                    cs["state"] = {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "Terminated",
                            "startedAt": started,
                            "finishedAt": now_rfc3339(),
                            "message": message,
                        }
                    }
                    cs["ready"] = False
                _set_condition(st, "DisruptionTarget", True, "DeletionByPodGC", message)
                _set_condition(st, "Ready", False, "PodFailed")

            self.cluster.api.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], apply)

    def shutdown(self) -> None:
        """Kill every process this kubelet started."""
        for rt in list(self.pods.values()):
            self._kill(rt, grace=0)
            self._release(rt)


def _localize_hosts(value: str, service_names: set[str]) -> str:
    if value in service_names:
        return POD_IP
    return _SVC_HOST.sub(POD_IP, value)


def _terminated(proc: ContainerProcess) -> Obj:
    code = proc.exit_code if proc.exit_code is not None else 0
    if proc.start_error:
        reason, code = "StartError", 128
    elif proc.oom_killed:
        reason, code = "OOMKilled", 137
    else:
        reason = "Completed" if code == 0 else "Error"
    result = {
        "exitCode": code,
        "reason": reason,
        "startedAt": proc.started_at,
        "finishedAt": proc.finished_at or now_rfc3339(),
        "containerID": f"kubesim://{proc.pid or 0}",
    }
    if proc.start_error:
        result["message"] = proc.start_error
    return result


def _phase(policy: str, statuses: list[Obj]) -> str:
    states = [s["state"] for s in statuses]
    if any("running" in s for s in states):
        return "Running"
    if all("terminated" in s for s in states):
        if all(s["terminated"]["exitCode"] == 0 for s in states):
            return "Succeeded"
        return "Failed"
    if any(s.get("restartCount") for s in statuses):
        return "Running"
    return "Pending"


def _set_started(pod: Obj) -> None:
    st = pod.setdefault("status", {})
    st.update(
        hostIP=POD_IP,
        hostIPs=[{"ip": POD_IP}],
        podIP=POD_IP,
        podIPs=[{"ip": POD_IP}],
        startTime=now_rfc3339(),
    )
    _set_condition(st, "Initialized", True, "")
    _set_condition(st, "PodReadyToStartContainers", True, "")


def _set_condition(status: Obj, type_: str, value: bool, reason: str, message: str = "") -> None:
    conditions = status.setdefault("conditions", [])
    wanted = "True" if value else "False"
    for cond in conditions:
        if cond["type"] == type_:
            if cond["status"] != wanted or cond.get("reason", "") != reason:
                cond.update(status=wanted, lastTransitionTime=now_rfc3339())
                if reason:
                    cond["reason"] = reason
                else:
                    cond.pop("reason", None)
                if message:
                    cond["message"] = message
            return
    new: Obj = {"type": type_, "status": wanted, "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    conditions.append(new)


__all__ = ["Kubelet", "clone"]

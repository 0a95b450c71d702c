"""The kubelet of one node: starts pods bound to it as local processes and reports their status."""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kubesim import runtime
from kubesim.admission import TERMINAL
from kubesim.housekeeping import pod_dir_name
from kubesim.network import PodNet, write_pod_files
from kubesim.nodeadmit import admit
from kubesim.podenv import PodEnvironment
from kubesim.podstatus import POD_IP, init_failure, mark_started, pod_phase, set_condition, terminated_state
from kubesim.quantity import parse_quantity
from kubesim.runtime import ContainerProcess, now_rfc3339
from kubesim.sandbox import non_root_problem
from kubesim.sidecars import is_sidecar, sync_sidecars
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

log = logging.getLogger("kubesim.kubelet")
GPU = "nvidia.com/gpu"
DELETION_DEADLINE = "kubesim.io/deletion-deadline"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
_IGNORED_IMAGE = (
    'kubesim ignores container images: "{image}" was not pulled; '
    "the container's command runs as a local process"
)


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
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)
    pull_failures: dict[str, int] = field(default_factory=dict)
    pull_failed_at: dict[str, float] = field(default_factory=dict)
    init_done: set[str] = field(default_factory=set)
    init_failed: str | None = None
    terminating_since: float | None = None
    deadline_since: float | None = None  # when the kubelet began stopping it for activeDeadlineSeconds
    sidecars_stopping_since: float | None = None
    done: bool = False
    net: PodNet | None = None
    ip: str = POD_IP
    etc_files: dict[str, str] = field(default_factory=dict)

    def initialized(self, pod: Obj) -> bool:
        """Whether every init container has completed (trivially so without any)."""
        return len(self.init_done) == len(pod["spec"].get("initContainers") or [])


class Kubelet:
    """Runs the pods bound to ``node_name``; ``step`` reacts to the store and watches the processes.

    ``paused`` freezes it on request; ``unreachable`` is the partitioned node: no heartbeat reaches the
    control plane and nothing is reported or confirmed, while its processes keep running. It is kept apart
    from ``paused`` so that un-pausing leaves the node unreachable.
    """

    def __init__(self, cluster: Cluster, node_name: str, gpu_count: int):
        self.cluster = cluster
        self.node_name = node_name
        self.gpu_count = gpu_count
        self.pods: dict[str, PodRuntime] = {}
        self.paused = False
        self.unreachable = False
        self.last_sample = 0.0
        self.environment = PodEnvironment(cluster, node_name, gpu_count)
        self.mount_warned: dict[str, float] = {}
        self.last_heartbeat = time.monotonic()
        self.admitted: set[str] = set()
        # Pods to evict for node pressure (kubesim.disruption.kubelet_evict): uid -> the eviction message.
        self.evicting: dict[str, str] = {}

    def step(self) -> None:
        """Post a heartbeat, start newly bound pods, terminate deleted ones and report container changes."""
        if self.unreachable:
            return
        self.last_heartbeat = time.monotonic()
        if self.paused:
            return
        arrival = sorted(self.bound_pods(), key=lambda p: p["metadata"].get("creationTimestamp", ""))
        mine = {p["metadata"]["uid"]: p for p in arrival}
        for uid in [u for u in self.mount_warned if u not in mine]:
            del self.mount_warned[uid]
        self.admitted &= set(mine)
        for uid, runtime_ in list(self.pods.items()):
            if uid not in mine:
                self._kill(runtime_)
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
                if not self._admit(pod, mine) or not self._volumes_ready(pod):
                    continue
                self.pods[uid] = self._start_pod(pod)
            self._sync_pod(self.pods[uid], pod)
        now = time.monotonic()
        if now - self.last_sample >= self.cluster.sample_interval:
            self.last_sample = now
            self._sample(now)

    def bound_pods(self) -> list[Obj]:
        """The stored pods bound to this node."""
        return [
            p
            for p in self.cluster.store.list("pods")[0]
            if (p.get("spec") or {}).get("nodeName") == self.node_name
        ]

    def _admit(self, pod: Obj, mine: dict[str, Obj]) -> bool:
        """Admit a new pod if it fits beside those already admitted, else reject it (kubesim.nodeadmit)."""
        uid = pod["metadata"]["uid"]
        node = self.cluster.store.peek("nodes", "", self.node_name)
        if uid not in self.admitted and node is not None:
            others = [
                p for u, p in mine.items() if u in self.admitted and p["status"].get("phase") not in TERMINAL
            ]
            meta = pod["metadata"]
            forced = self.cluster.faults.admission_rejection(meta["namespace"], meta["name"], self.node_name)
            if admit(self.cluster.api, pod, node, others, forced):
                self.admitted.add(uid)
        return uid in self.admitted

    def _volumes_ready(self, pod: Obj) -> bool:
        """Hold a pod whose claim, ConfigMap or Secret is missing, with a FailedMount Event every 10 s, and
        one whose block disk another node holds (kubesim.attach reports that)."""
        if self.cluster.attacher.blocked(pod, self.node_name) is not None:
            return False
        problem = self.environment.volume_problem(pod)
        uid = pod["metadata"]["uid"]
        if problem is None:
            self.mount_warned.pop(uid, None)
            return True
        if time.monotonic() - self.mount_warned.get(uid, -1e9) >= 10:
            self.mount_warned[uid] = time.monotonic()
            self.cluster.api.record_event(pod, "Warning", "FailedMount", problem, "kubelet")
        return False

    def _start_pod(self, pod: Obj) -> PodRuntime:
        meta = pod["metadata"]
        pod_dir = self.cluster.state_dir / "pods" / pod_dir_name(pod)
        pod_dir.mkdir(parents=True, exist_ok=True)
        used = {g for r in self.pods.values() for g in r.gpus}
        want = max(
            sum(_gpus(c) for c in pod["spec"].get("containers") or []),
            max((_gpus(c) for c in pod["spec"].get("initContainers") or []), default=0),
        )
        free = [g for g in range(self.gpu_count) if g not in used]
        runtime_ = PodRuntime(meta["uid"], meta["namespace"], meta["name"], pod_dir, free[:want])
        self._attach_network(runtime_, pod)
        for container in (pod["spec"].get("initContainers") or []) + (pod["spec"].get("containers") or []):
            image = container.get("image", "")
            if self._pull_error(pod, image) is None:
                self.cluster.api.record_event(
                    pod, "Normal", "Pulled", _IGNORED_IMAGE.format(image=image), "kubelet"
                )
        inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
        ips = (runtime_.ip, self.cluster.node_ip)
        self.cluster.api.mutate(
            "pods", meta["namespace"], meta["name"], lambda p: mark_started(p, inits, *ips)
        )
        if runtime_.net is not None:
            self.cluster.policies.step()  # the pod's policies hold before its first container starts
        return runtime_

    def _attach_network(self, rt: PodRuntime, pod: Obj) -> None:
        """Give the pod its network sandbox: a namespace with its own IP on the node bridge, with its hosts
        and resolv.conf (a ``hostNetwork`` pod gets the node's address and network)."""
        network = self.cluster.network
        if not network.available:
            return
        if pod["spec"].get("hostNetwork"):
            rt.ip = network.node_ip
            return
        rt.net = network.attach(rt.uid)
        rt.ip = rt.net.ip
        rt.etc_files = write_pod_files(rt.dir / "etc", pod, rt.ip, network.node_ip)

    def _sync_pod(self, rt: PodRuntime, pod: Obj) -> None:
        if rt.done:
            return
        evicted = self.evicting.pop(rt.uid, None)
        if evicted is not None:
            self._kill(rt)
            self._report(rt, pod, ("Failed", "Evicted", evicted), disruption="TerminationByKubelet")
            return
        spec = pod["spec"]
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(rt, pod)
            return
        if rt.deadline_since is not None or past_active_deadline(pod, time.time()):
            self._stop_for_deadline(rt, pod)
            return
        changed = False
        if not rt.initialized(pod):
            changed = self._sync_init(rt, pod)
            if rt.init_failed or not rt.initialized(pod):
                if changed:
                    self._report(rt, pod)
                return
        policy = spec.get("restartPolicy", "Always")
        for container in spec.get("containers") or []:
            cname = container["name"]
            proc = rt.containers.get(cname)
            if proc is None:
                changed = self._maybe_launch(rt, pod, container) or changed
                continue
            code = self._reap(rt, proc)
            if code is None:
                continue
            changed = True
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                self._back_off(rt, pod, proc)
        changed = sync_sidecars(self, rt, pod) or changed
        if changed:
            self._report(rt, pod)

    def _sync_init(self, rt: PodRuntime, pod: Obj) -> bool:
        """Run init containers one at a time, in order: the first unfinished one is started, watched and,
        when it fails, retried with back-off (OnFailure, Always) or made to fail the pod (Never)."""
        changed = False
        for container in pod["spec"].get("initContainers") or []:
            cname = container["name"]
            if cname in rt.init_done:
                continue
            proc = rt.containers.get(cname)
            if proc is None:
                return self._maybe_launch(rt, pod, container) or changed
            code = self._reap(rt, proc)
            if is_sidecar(container):
                # A native sidecar lets the next container start once it runs; one that ended restarts.
                if code is None:
                    rt.init_done.add(cname)
                    changed = True
                    continue
                self._back_off(rt, pod, proc)
                return True
            if code is None:
                return changed
            changed = True
            if code == 0:
                rt.init_done.add(cname)
                continue
            if pod["spec"].get("restartPolicy", "Always") == "Never":
                rt.init_failed = cname
            else:
                self._back_off(rt, pod, proc)
            return True
        return changed

    def _reap(self, rt: PodRuntime, proc: ContainerProcess) -> int | None:
        """The exit code of a container that has just ended (None while it runs or once already reaped)."""
        if proc.stopped:
            return None
        self._enforce_memory(rt, proc)
        code = proc.poll()
        if code is None:
            return None
        proc.stopped = True
        if code == 137 and self.cluster.cgroups.oom_killed(proc.cgroup):
            proc.oom_killed = True
        self.cluster.cgroups.remove(proc.cgroup)
        return code

    def _back_off(self, rt: PodRuntime, pod: Obj, proc: ContainerProcess) -> None:
        """Schedule a restart of an ended container after the doubling back-off."""
        cname = proc.name
        rt.last_state[cname] = {"terminated": terminated_state(proc)}
        rt.restarts[cname] = rt.restarts.get(cname, 0) + 1
        delay = min(self.cluster.restart_backoff * 2 ** (rt.restarts[cname] - 1), 300)
        rt.backoff_until[cname] = time.monotonic() + delay
        del rt.containers[cname]
        self.cluster.api.record_event(
            pod, "Warning", "BackOff", f"Back-off restarting failed container {cname}", "kubelet"
        )

    def _pull_error(self, pod: Obj, image: str) -> str | None:
        """Why `image` does not pull for `pod`: an injected failure, or a private registry (kubesim.registries)
        for which the pod names no pull secret that logs in; None when it pulls."""
        error = self.cluster.faults.image_pull_error(image)
        if error is not None or not self.cluster.registries.hosts():
            return error
        namespace = pod["metadata"]["namespace"]
        secrets, missing = [], []
        for ref in pod["spec"].get("imagePullSecrets") or []:
            secret = self.cluster.store.get("secrets", namespace, str(ref.get("name") or ""))
            if secret is None:
                missing.append(str(ref.get("name") or ""))
            else:
                secrets.append(secret)
        if missing:
            self.cluster.api.record_event(
                pod,
                "Warning",
                "FailedToRetrieveImagePullSecret",
                f"Unable to retrieve some image pull secrets ({', '.join(missing)}); attempting to pull the "
                "image may not succeed.",
                "kubelet",
            )
        return self.cluster.registries.pull_error(image, secrets)

    def _maybe_launch(self, rt: PodRuntime, pod: Obj, container: Obj) -> bool:
        """Start a container unless it is backing off; an injected pull failure keeps it waiting."""
        cname, image = container["name"], container.get("image", "")
        now = time.monotonic()
        if now < rt.backoff_until.get(cname, 0):
            failed_at = rt.pull_failed_at.get(cname)
            pull_error = rt.waiting.get(cname, ("",))[0] == "ErrImagePull"
            if (
                failed_at is not None
                and pull_error
                and now - failed_at >= (rt.backoff_until[cname] - failed_at) / 2
            ):
                rt.waiting[cname] = ("ImagePullBackOff", f'Back-off pulling image "{image}"')
                self.cluster.api.record_event(
                    pod, "Normal", "BackOff", f'Back-off pulling image "{image}"', "kubelet"
                )
                self.cluster.api.record_event(pod, "Warning", "Failed", "Error: ImagePullBackOff", "kubelet")
                return True
            return False
        error = self._pull_error(pod, image)
        if error is not None:
            failures = rt.pull_failures[cname] = rt.pull_failures.get(cname, 0) + 1
            message = f'Failed to pull image "{image}": {error}'
            rt.waiting[cname] = ("ErrImagePull", message)
            rt.pull_failed_at[cname] = now
            rt.backoff_until[cname] = now + min(self.cluster.restart_backoff * 2 ** (failures - 1), 300)
            self.cluster.api.record_event(pod, "Normal", "Pulling", f'Pulling image "{image}"', "kubelet")
            self.cluster.api.record_event(pod, "Warning", "Failed", message, "kubelet")
            self.cluster.api.record_event(pod, "Warning", "Failed", "Error: ErrImagePull", "kubelet")
            return True
        refused = non_root_problem(pod, container)
        if refused is not None:
            if rt.waiting.get(cname, ("",))[0] == "CreateContainerConfigError":
                return False
            rt.waiting[cname] = ("CreateContainerConfigError", refused)
            self.cluster.api.record_event(pod, "Warning", "Failed", f"Error: {refused}", "kubelet")
            return True
        rt.waiting.pop(cname, None)
        if rt.pull_failed_at.pop(cname, None) is not None:
            self.cluster.api.record_event(
                pod, "Normal", "Pulled", _IGNORED_IMAGE.format(image=image), "kubelet"
            )
        rt.containers[cname] = self._launch(rt, pod, container)
        self.cluster.api.record_event(pod, "Normal", "Started", f"Started container {cname}", "kubelet")
        return True

    def _launch(self, rt: PodRuntime, pod: Obj, container: Obj) -> ContainerProcess:
        restart = rt.restarts.get(container["name"], 0)
        log_path = rt.dir / "logs" / f"{container['name']}.{restart}.log"
        launch = self.environment.command(rt.dir, rt.gpus, pod, container, restart, rt)
        if launch.problem is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log_path.touch()
            return ContainerProcess(
                container["name"], None, log_path, now_rfc3339(), start_error=launch.problem
            )
        limits = (container.get("resources") or {}).get("limits") or {}
        memory = int(parse_quantity(limits["memory"])) if "memory" in limits else None
        cpu = float(parse_quantity(limits["cpu"])) if "cpu" in limits else None
        cgroup_name = f"{rt.uid[:8]}-{container['name']}-{restart}"
        pid_file = rt.dir / "pids" / f"{container['name']}.pid"
        return runtime.start_container(
            container["name"],
            launch.argv,
            launch.env,
            launch.cwd,
            log_path,
            self.cluster.cgroups,
            cgroup_name,
            memory,
            cpu,
            pid_file,
            sandboxed=self.cluster.sandboxed,
        )

    def _enforce_memory(self, rt: PodRuntime, proc: ContainerProcess) -> None:
        if proc.memory_limit is None or proc.cgroup.memory_limited or proc.exit_code is not None:
            return
        if proc.rss_bytes > proc.memory_limit:
            log.info("container %s/%s/%s over its memory limit: killing", rt.namespace, rt.name, proc.name)
            proc.signal_group(signal.SIGKILL)
            proc.oom_killed = True

    def _sample(self, now: float) -> None:
        for rt in self.pods.values():
            for proc in rt.containers.values():
                proc.sample(now, self.cluster.cgroups)
                self._enforce_memory(rt, proc)
        self.cluster.throttle.update(self.pods.values())

    def _terminate(self, rt: PodRuntime, pod: Obj) -> None:
        """Graceful stop of a deleted pod: SIGTERM, SIGKILL once its grace period ends, then the final status
        is reported and the pod removed (unless finalizers hold it)."""
        meta = pod["metadata"]
        deadline = float((meta.get("annotations") or {}).get(DELETION_DEADLINE, 0) or 0)
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

    def _stop_for_deadline(self, rt: PodRuntime, pod: Obj) -> None:
        """A pod active longer than its `activeDeadlineSeconds` (counted from its startTime), as the kubelet's
        activeDeadlineHandler stops it: a `DeadlineExceeded` warning, SIGTERM to its containers, SIGKILL
        once its terminationGracePeriodSeconds have passed, and once they have stopped the pod is Failed
        with reason DeadlineExceeded (kubelets since 1.27 give the terminal phase only when no container
        runs any more). Whatever its restartPolicy, nothing is restarted."""
        running = [c for c in rt.containers.values() if c.poll() is None]
        now = time.monotonic()
        if rt.deadline_since is None:
            rt.deadline_since = now
            self.cluster.api.record_event(pod, "Warning", "DeadlineExceeded", DEADLINE_MESSAGE, "kubelet")
            for proc in running:
                proc.signal_group(signal.SIGTERM)
                self.cluster.api.record_event(
                    pod, "Normal", "Killing", f"Stopping container {proc.name}", "kubelet"
                )
        grace = pod["spec"].get("terminationGracePeriodSeconds")
        if running and now - rt.deadline_since >= (30 if grace is None else int(grace)):
            for proc in running:
                proc.signal_group(signal.SIGKILL, self.cluster.cgroups.pids(proc.cgroup))
            runtime.wait_all(running, 2)
        if any(c.poll() is None for c in rt.containers.values()):
            return
        for proc in rt.containers.values():
            self._reap(rt, proc)
        self._report(rt, pod, ("Failed", "DeadlineExceeded", DEADLINE_MESSAGE))

    def _kill(self, rt: PodRuntime) -> None:
        for proc in rt.containers.values():
            if proc.poll() is None:
                proc.signal_group(signal.SIGKILL, self.cluster.cgroups.pids(proc.cgroup))
        runtime.wait_all(list(rt.containers.values()), 2)

    def _release(self, rt: PodRuntime) -> None:
        for proc in rt.containers.values():
            self.cluster.cgroups.remove(proc.cgroup)
        self.cluster.network.detach(rt.uid)
        rt.done = True
        self.pods.pop(rt.uid, None)

    def _container_status(self, rt: PodRuntime, container: Obj, pending: str = "ContainerCreating") -> Obj:
        """One entry of containerStatuses or initContainerStatuses; ``pending`` is the waiting reason of a
        container that has not been started yet."""
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
            if cname in rt.waiting:
                reason, message = rt.waiting[cname]
                status["state"] = {"waiting": {"reason": reason, "message": message}}
            else:
                reason = "CrashLoopBackOff" if rt.restarts.get(cname) else pending
                status["state"] = {"waiting": {"reason": reason}}
        elif proc.exit_code is None:
            status.update(ready=True, started=True, containerID=f"kubesim://{proc.pid}")
            status["state"] = {"running": {"startedAt": proc.started_at}}
        else:
            status["containerID"] = f"kubesim://{proc.pid or 0}"
            status["state"] = {"terminated": terminated_state(proc, container)}
        return status

    def _init_status(self, rt: PodRuntime, container: Obj, index: int) -> Obj:
        """An initContainerStatuses entry: ready once it has completed; later ones wait PodInitializing."""
        status = self._container_status(rt, container, "PodInitializing")
        status["started"] = "running" in status["state"]
        status["ready"] = status["started"] if is_sidecar(container) else container["name"] in rt.init_done
        return status

    def _report(
        self, rt: PodRuntime, pod: Obj, terminal: tuple[str, str, str] | None = None, disruption: str = ""
    ) -> None:
        """Write container statuses, phase and readiness; ``terminal`` forces (phase, reason, message), and
        ``disruption`` adds a DisruptionTarget condition with that reason in the same write."""
        spec = pod["spec"]
        initialized = rt.initialized(pod)
        inits = spec.get("initContainers") or []
        init_statuses = [self._init_status(rt, c, i) for i, c in enumerate(inits)]
        waiting = "ContainerCreating" if initialized else "PodInitializing"
        statuses = [self._container_status(rt, c, waiting) for c in spec.get("containers") or []]
        if terminal is None and rt.init_failed:
            terminal = init_failure(rt.init_failed, init_statuses)
        phase = terminal[0] if terminal else pod_phase(statuses) if initialized else "Pending"
        sidecar_running = any(
            "running" in status["state"]
            for status, c in zip(init_statuses, inits, strict=True)
            if is_sidecar(c)
        )
        if terminal is None and phase in ("Succeeded", "Failed") and sidecar_running:
            phase = "Running"  # the main containers ended; the pod ends once its sidecars have stopped
        ready = all(s["ready"] for s in statuses)
        incomplete = [s["name"] for s in init_statuses if not s["ready"]]

        def apply(p: Obj) -> None:
            st = p.setdefault("status", {})
            if inits:
                st["initContainerStatuses"] = init_statuses
                message = f"containers with incomplete status: [{' '.join(incomplete)}]"
                if initialized:
                    set_condition(st, "Initialized", True, "")
                else:
                    set_condition(st, "Initialized", False, "ContainersNotInitialized", message)
            st["containerStatuses"] = statuses
            st["phase"] = phase
            if terminal:
                st.update(reason=terminal[1], message=terminal[2])
                if disruption:
                    set_condition(st, "DisruptionTarget", True, disruption, terminal[2])
            set_condition(st, "ContainersReady", ready, "" if ready else "ContainersNotReady")
            set_condition(st, "Ready", ready, "" if ready else "ContainersNotReady")
            if phase in ("Succeeded", "Failed"):
                set_condition(st, "Ready", False, "PodCompleted")
                set_condition(st, "ContainersReady", False, "PodCompleted")

        self.cluster.api.mutate("pods", rt.namespace, rt.name, apply)
        if phase in ("Succeeded", "Failed"):
            self._release(rt)

    def resync(self) -> None:
        """Report every running pod afresh (the node came back: its pods' readiness is real again)."""
        pods = {p["metadata"]["uid"]: p for p in self.bound_pods()}
        for uid, rt in list(self.pods.items()):
            if uid in pods and not rt.done:
                self._report(rt, pods[uid])

    def shutdown(self) -> None:
        """Kill every process this kubelet started."""
        for rt in list(self.pods.values()):
            self._kill(rt)
            self._release(rt)


def past_active_deadline(pod: Obj, now: float) -> bool:
    """Whether a pod has been active on its node longer than its `activeDeadlineSeconds`, counted from its
    status' startTime (set when the kubelet admitted it, before any image pull or init container)."""
    deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
    started = (pod.get("status") or {}).get("startTime")
    if not deadline or not started:
        return False
    try:
        since = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return now - since >= int(deadline)


def _gpus(container: Obj) -> int:
    return int(parse_quantity(((container.get("resources") or {}).get("limits") or {}).get(GPU, 0)))

"""Pods end to end: the kubelet runs commands, reports states, streams logs, enforces limits."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.testing import KubeSim
from tests.kubesim.conftest import error_body, follow_log, make_pod, wait_for, wait_phase


def sim_node_ip(core: client.CoreV1Api, node_name: str) -> str:
    """The InternalIP the pod's node reports."""
    addresses = core.read_node(node_name).status.addresses
    return next(a.address for a in addresses if a.type == "InternalIP")


def test_python_print_pod_succeeds_with_log(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, make_pod("hello", ["python", "-c", "print(1)"]))
    pod = wait_phase(core, ns, "hello", ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert pod.status.pod_ip and pod.status.pod_ip == pod.status.pod_ips[0].ip and pod.spec.node_name
    assert pod.status.host_ip == sim_node_ip(core, pod.spec.node_name)
    assert core.read_namespaced_pod_log("hello", ns) == "1\n"


def test_python_through_a_shell_is_kubesims_own_interpreter(core: client.CoreV1Api, ns: str) -> None:
    script = "python -c 'import sys; print(sys.executable)'; python3 -c 'import sys; print(sys.prefix)'"
    core.create_namespaced_pod(ns, make_pod("shell-python", ["/bin/sh", "-c", script]))
    assert wait_phase(core, ns, "shell-python", ("Succeeded", "Failed")).status.phase == "Succeeded"
    executable, prefix = core.read_namespaced_pod_log("shell-python", ns).split()
    assert Path(executable).parent == Path(sys.executable).parent and prefix == sys.prefix


def test_failing_command_gives_failed_phase_and_error_reason(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, make_pod("bad", ["sh", "-c", "exit 3"]))
    pod = wait_phase(core, ns, "bad", ("Succeeded", "Failed"))
    terminated = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, terminated.exit_code, terminated.reason) == ("Failed", 3, "Error")


def test_on_failure_restart_policy_restarts_until_success(core: client.CoreV1Api, ns: str) -> None:
    script = "test -f marker && exit 0; touch marker; exit 1"
    pod = make_pod(
        "retry",
        ["sh", "-c", script],
        restart_policy="OnFailure",
        working_dir="/work",
        volume_mounts=[client.V1VolumeMount(name="work", mount_path="/work")],
    )
    # A restarted container gets a fresh root filesystem: only a volume keeps the marker.
    pod.spec.volumes = [client.V1Volume(name="work", empty_dir=client.V1EmptyDirVolumeSource())]
    core.create_namespaced_pod(ns, pod)
    done = wait_phase(core, ns, "retry", ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].restart_count == 1


def test_env_expansion_and_downward_api(core: client.CoreV1Api, ns: str) -> None:
    env = [
        client.V1EnvVar(name="BASE", value="hi"),
        client.V1EnvVar(name="GREETING", value="$(BASE)-there"),
        client.V1EnvVar(
            name="MY_NAME",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")
            ),
        ),
        client.V1EnvVar(
            name="MY_NS",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.namespace")
            ),
        ),
        client.V1EnvVar(
            name="MY_IP",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="status.podIP")
            ),
        ),
        client.V1EnvVar(name="MASTER_ADDR", value="job-0.workers.default.svc.cluster.local"),
    ]
    command = ["sh", "-c", 'echo "$GREETING $MY_NAME $MY_NS $MY_IP $MASTER_ADDR $(BASE)"']
    core.create_namespaced_pod(ns, make_pod("envy", command, env=env))
    ip = wait_phase(core, ns, "envy", ("Succeeded",)).status.pod_ip
    master = "job-0.workers.default.svc.cluster.local"  # resolved by the pod's DNS, not rewritten
    assert core.read_namespaced_pod_log("envy", ns) == f"hi-there envy {ns} {ip} {master} hi\n"


def test_volume_mount_paths_reach_the_container(sim: KubeSim, core: client.CoreV1Api, ns: str) -> None:
    pod = make_pod(
        "vol",
        ["sh", "-c", "echo data > /scratch/f && cat /scratch/f && echo $OUT"],
        volume_mounts=[client.V1VolumeMount(name="s", mount_path="/scratch")],
        env=[client.V1EnvVar(name="OUT", value="/scratch/out")],
    )
    pod.spec.volumes = [client.V1Volume(name="s", empty_dir=client.V1EmptyDirVolumeSource())]
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "vol", ("Succeeded",))
    first, second = core.read_namespaced_pod_log("vol", ns).splitlines()
    assert first == "data"
    if sim.cluster.sandboxed:
        assert second == "/scratch/out"
    else:
        assert second.endswith("/volumes/s/out")  # no mount namespace: paths are rewritten


def test_log_follow_streams_until_container_ends(core: client.CoreV1Api, ns: str) -> None:
    script = "import time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.2)"
    core.create_namespaced_pod(ns, make_pod("stream", ["python", "-c", script]))
    wait_phase(core, ns, "stream", ("Running", "Succeeded"))
    response = follow_log(core, "stream", ns)
    started = time.monotonic()
    lines = [line.decode().strip() for line in response.stream()]
    text = "".join(lines)
    assert text.replace("\n", "") == "01234"
    assert time.monotonic() - started < 10
    assert core.read_namespaced_pod("stream", ns).status.phase == "Succeeded"


def test_log_tail_lines_and_timestamps(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, make_pod("tail", ["sh", "-c", "for i in 1 2 3 4; do echo line$i; done"]))
    wait_phase(core, ns, "tail", ("Succeeded",))
    assert core.read_namespaced_pod_log("tail", ns, tail_lines=2) == "line3\nline4\n"
    stamped = core.read_namespaced_pod_log("tail", ns, timestamps=True).splitlines()
    assert stamped[0].endswith(" line1") and stamped[0][:4].isdigit()
    assert core.read_namespaced_pod_log("tail", ns, since_seconds=3600).count("line") == 4


def test_memory_hog_is_oom_killed(core: client.CoreV1Api, ns: str) -> None:
    hog = "x = []\nwhile True:\n    x.append(bytearray(8 * 1024 * 1024))"
    resources = client.V1ResourceRequirements(limits={"memory": "64Mi"})
    core.create_namespaced_pod(ns, make_pod("hog", ["python", "-c", hog], resources=resources))
    pod = wait_phase(core, ns, "hog", ("Failed", "Succeeded"), timeout=30)
    terminated = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, terminated.reason, terminated.exit_code) == ("Failed", "OOMKilled", 137)


def test_pod_too_big_is_unschedulable_with_event(core: client.CoreV1Api, ns: str) -> None:
    resources = client.V1ResourceRequirements(requests={"cpu": "4000"})
    core.create_namespaced_pod(ns, make_pod("huge", ["true"], resources=resources))

    def condition() -> client.V1PodCondition | None:
        conditions = core.read_namespaced_pod("huge", ns).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.status == "False"), None)

    cond = wait_for(condition)
    assert cond.reason == "Unschedulable" and "Insufficient cpu" in cond.message
    events = wait_for(
        lambda: (
            core.list_namespaced_event(
                ns, field_selector="involvedObject.name=huge,reason=FailedScheduling"
            ).items
        )
    )
    assert events[0].type == "Warning"


def test_gpu_pods_get_exclusive_devices_and_wait_for_free_gpus(core: client.CoreV1Api, ns: str) -> None:
    gpus = client.V1ResourceRequirements(limits={"nvidia.com/gpu": "3"})
    script = ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES; sleep 1"]
    core.create_namespaced_pod(ns, make_pod("g1", script, resources=gpus))
    core.create_namespaced_pod(ns, make_pod("g2", script, resources=gpus))
    first = wait_phase(core, ns, "g1", ("Running", "Succeeded"))
    assert first.spec.node_name == "kubesim-gpu-0"
    assert core.read_namespaced_pod("g2", ns).spec.node_name is None
    wait_phase(core, ns, "g2", ("Succeeded",), timeout=20)
    assert len(core.read_namespaced_pod_log("g1", ns).strip().split(",")) == 3


def test_delete_sends_sigterm_then_removes_pod(core: client.CoreV1Api, ns: str) -> None:
    trap = "trap 'echo got-term; exit 0' TERM; while true; do sleep 0.1; done"
    core.create_namespaced_pod(ns, make_pod("term", ["sh", "-c", trap]))
    wait_phase(core, ns, "term", ("Running",))
    wait_for(lambda: core.read_namespaced_pod("term", ns).status.container_statuses)
    deleted = core.delete_namespaced_pod("term", ns)
    assert deleted.metadata.deletion_timestamp is not None

    def gone() -> bool:
        try:
            core.read_namespaced_pod("term", ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=10)


def test_quota_admission_refuses_pods_over_hard_limit(core: client.CoreV1Api, ns: str) -> None:
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="compute"),
        spec=client.V1ResourceQuotaSpec(hard={"requests.cpu": "1", "pods": "3"}),
    )
    core.create_namespaced_resource_quota(ns, quota)
    small = client.V1ResourceRequirements(requests={"cpu": "600m"})
    core.create_namespaced_pod(ns, make_pod("fits", ["sleep", "5"], resources=small))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(ns, make_pod("over", ["sleep", "5"], resources=small))
    assert err.value.status == 403
    message = error_body(err.value)["message"]
    assert (
        "exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: "
        "requests.cpu=1" in message
    )
    wait_for(
        lambda: (core.read_namespaced_resource_quota("compute", ns).status.used or {}).get("pods") == "1"
    )
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_pod(ns, make_pod("bare", ["true"]))
    assert missing.value.status == 403 and "must specify requests.cpu" in missing.value.body


def test_limit_range_defaults_are_applied(core: client.CoreV1Api, ns: str) -> None:
    item = client.V1LimitRangeItem(
        type="Container", default={"memory": "256Mi", "cpu": "500m"}, default_request={"cpu": "100m"}
    )
    core.create_namespaced_limit_range(
        ns,
        client.V1LimitRange(
            metadata=client.V1ObjectMeta(name="lr"), spec=client.V1LimitRangeSpec(limits=[item])
        ),
    )
    pod = core.create_namespaced_pod(ns, make_pod("defaulted", ["true"]))
    resources = pod.spec.containers[0].resources
    assert resources.limits == {"memory": "256Mi", "cpu": "500m"}
    assert resources.requests == {"cpu": "100m", "memory": "256Mi"}


def test_pod_metrics_report_cpu_and_memory(
    api_client: client.ApiClient, core: client.CoreV1Api, ns: str
) -> None:
    busy = "import time\nt = time.time()\nwhile time.time() - t < 20: pass"
    core.create_namespaced_pod(ns, make_pod("busy", ["python", "-c", busy]))
    wait_phase(core, ns, "busy", ("Running",))
    custom = client.CustomObjectsApi(api_client)

    def sample() -> dict | None:
        metrics = custom.get_namespaced_custom_object("metrics.k8s.io", "v1beta1", ns, "pods", "busy")
        usage = metrics["containers"][0]["usage"] if metrics["containers"] else None
        return usage if usage and int(usage["cpu"].rstrip("n")) > 100_000_000 else None

    usage = wait_for(sample, timeout=10)
    assert usage["memory"].endswith("Ki") and int(usage["memory"][:-2]) > 1000
    listed = custom.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", ns, "pods")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["busy"]
    core.delete_namespaced_pod("busy", ns, grace_period_seconds=0)


def test_active_deadline_stops_the_pod_gracefully_and_fails_it_with_deadline_exceeded(
    core: client.CoreV1Api, ns: str
) -> None:
    """As the kubelet does: past `activeDeadlineSeconds` from its startTime the pod's containers get SIGTERM
    and their grace period (the handler's last words reach the log), and the pod ends Failed,
    DeadlineExceeded, whatever its restartPolicy."""
    script = (
        "import signal, sys, time\n"
        "def stop(*_):\n"
        "    print('saving on SIGTERM', flush=True)\n"
        "    sys.exit(3)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    pod = make_pod("overtime", ["python", "-c", script], restart_policy="Always")
    pod.spec.active_deadline_seconds = 2
    core.create_namespaced_pod(ns, pod)
    wait_phase(core, ns, "overtime", ("Running",))
    wait_for(lambda: core.read_namespaced_pod_log("overtime", ns).startswith("up"), timeout=15)
    started = time.monotonic()
    ended = wait_phase(core, ns, "overtime", ("Succeeded", "Failed"), timeout=20)
    assert time.monotonic() - started < 6
    assert (ended.status.phase, ended.status.reason) == ("Failed", "DeadlineExceeded")
    assert ended.status.message == "Pod was active on the node longer than the specified deadline"
    terminated = ended.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 3 and ended.status.container_statuses[0].restart_count == 0
    assert core.read_namespaced_pod_log("overtime", ns).splitlines() == ["up", "saving on SIGTERM"]
    reasons = {e.reason for e in core.list_namespaced_event(ns).items if e.involved_object.name == "overtime"}
    assert "DeadlineExceeded" in reasons


def test_a_pod_without_active_deadline_runs_on(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, make_pod("untimed", ["python", "-c", "import time; time.sleep(3)"]))
    assert wait_phase(core, ns, "untimed", ("Succeeded", "Failed"), timeout=20).status.phase == "Succeeded"

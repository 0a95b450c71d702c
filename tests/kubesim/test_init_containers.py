"""Init containers: run in order before the main containers, share their volumes, fail or retry the pod."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from kubesim.testing import KubeSim
from tests.kubesim.conftest import table_rows, wait_for, wait_phase


def _pod(name: str, inits: list[list[str]], main: list[str], policy: str = "Never") -> client.V1Pod:
    """A pod whose init containers ``init-0``, ``init-1``... and main container share ``/work`` (emptyDir)
    and ``/shared`` (hostPath ``/NAME``, visible to the test under the state dir)."""
    mounts = [
        client.V1VolumeMount(name="work", mount_path="/work"),
        client.V1VolumeMount(name="shared", mount_path="/shared"),
    ]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            restart_policy=policy,
            termination_grace_period_seconds=5,
            init_containers=[
                client.V1Container(
                    name=f"init-{i}", image="fetch:1", command=cmd, volume_mounts=mounts, working_dir="/work"
                )
                for i, cmd in enumerate(inits)
            ],
            containers=[client.V1Container(name="main", image="x", command=main, volume_mounts=mounts)],
            volumes=[
                client.V1Volume(name="work", empty_dir=client.V1EmptyDirVolumeSource()),
                client.V1Volume(name="shared", host_path=client.V1HostPathVolumeSource(path=f"/{name}")),
            ],
        ),
    )


def _status_column(api_client: client.ApiClient, sim: KubeSim, ns: str, name: str) -> str:
    _, rows = table_rows(api_client, f"{sim.url}/api/v1/namespaces/{ns}/pods")
    return str(rows[name][2])


def _condition(pod: client.V1Pod, type_: str) -> client.V1PodCondition:
    return next(c for c in pod.status.conditions if c.type == type_)


def test_init_containers_run_in_order_and_leave_files_for_the_main_container(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    inits = [
        ["sh", "-c", "echo fetched; echo a > order"],
        ["sh", "-c", "test -f /work/order && echo b >> /work/order"],
    ]
    core.create_namespaced_pod(ns, _pod("ordered", inits, ["sh", "-c", "cat /work/order"]))
    pod = wait_phase(core, ns, "ordered", ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded"
    assert core.read_namespaced_pod_log("ordered", ns) == "a\nb\n"
    assert core.read_namespaced_pod_log("ordered", ns, container="init-0") == "fetched\n"
    states = [s.state.terminated for s in pod.status.init_container_statuses]
    assert [(s.exit_code, s.reason) for s in states] == [(0, "Completed"), (0, "Completed")]
    assert states[0].finished_at <= states[1].started_at
    assert _condition(pod, "Initialized").status == "True"


def test_pod_stays_pending_while_an_init_container_runs_and_deletion_stops_it(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    waiter = "trap 'echo stopped > /shared/term; exit 0' TERM; touch /shared/trapped; while true; do sleep 0.05; done"
    core.create_namespaced_pod(ns, _pod("slow-init", [["true"], ["sh", "-c", waiter]], ["true"]))

    def second_running() -> client.V1Pod | None:
        pod = core.read_namespaced_pod("slow-init", ns)
        statuses = pod.status.init_container_statuses or []
        return pod if len(statuses) == 2 and statuses[1].state.running else None

    pod = wait_for(second_running)
    assert pod.status.phase == "Pending"
    initialized = _condition(pod, "Initialized")
    assert (initialized.status, initialized.reason) == ("False", "ContainersNotInitialized")
    assert "init-1" in initialized.message and "init-0" not in initialized.message
    assert pod.status.container_statuses[0].state.waiting.reason == "PodInitializing"
    assert _status_column(api_client, sim, ns, "slow-init") == "Init:1/2"
    wait_for(lambda: (sim.state_dir / "hostpath" / "slow-init" / "trapped").exists())  # its handler is set
    core.delete_namespaced_pod("slow-init", ns)
    wait_for(lambda: not core.list_namespaced_pod(ns).items)
    assert (sim.state_dir / "hostpath" / "slow-init" / "term").read_text() == "stopped\n"


def test_failing_init_container_fails_the_pod_and_main_never_starts_under_never(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    inits = [["true"], ["sh", "-c", "echo cannot fetch >&2; exit 3"]]
    core.create_namespaced_pod(ns, _pod("bad-init", inits, ["sh", "-c", "touch /shared/ran"]))
    pod = wait_phase(core, ns, "bad-init", ("Succeeded", "Failed"))
    assert pod.status.phase == "Failed"
    failed = pod.status.init_container_statuses[1].state.terminated
    assert (failed.exit_code, failed.reason) == (3, "Error")
    assert pod.status.reason == "InitContainerFailed" and '"init-1"' in pod.status.message
    assert pod.status.container_statuses[0].state.waiting is not None
    assert _condition(pod, "Initialized").status == "False"
    assert core.read_namespaced_pod_log("bad-init", ns, container="init-1") == "cannot fetch\n"
    assert _status_column(api_client, sim, ns, "bad-init") == "Init:Error"
    assert not Path(sim.state_dir / "hostpath" / "bad-init" / "ran").exists()


def test_a_failed_container_with_fallback_to_logs_says_its_last_lines(
    core: client.CoreV1Api, ns: str
) -> None:
    pod = _pod(
        "says-why",
        [["sh", "-c", "echo working; echo 'fetch: bucket nope does not exist' >&2; exit 1"]],
        ["true"],
    )
    pod.spec.init_containers[0].termination_message_policy = "FallbackToLogsOnError"
    core.create_namespaced_pod(ns, pod)
    done = wait_phase(core, ns, "says-why", ("Succeeded", "Failed"))
    failed = done.status.init_container_statuses[0].state.terminated
    assert failed.message == "working\nfetch: bucket nope does not exist"
    core.create_namespaced_pod(ns, _pod("quiet", [["sh", "-c", "echo nothing to see; exit 1"]], ["true"]))
    quiet = wait_phase(core, ns, "quiet", ("Succeeded", "Failed"))
    assert quiet.status.init_container_statuses[0].state.terminated.message is None, "File policy: no message"


def test_failing_init_container_is_retried_with_back_off_under_on_failure(
    core: client.CoreV1Api, ns: str
) -> None:
    flaky = "test -f /shared/tried && exit 0; touch /shared/tried; exit 1"
    core.create_namespaced_pod(ns, _pod("retry-init", [["sh", "-c", flaky]], ["echo", "ok"], "OnFailure"))
    pod = wait_phase(core, ns, "retry-init", ("Succeeded", "Failed"))
    assert pod.status.phase == "Succeeded"
    status = pod.status.init_container_statuses[0]
    assert status.restart_count == 1 and status.last_state.terminated.exit_code == 1
    assert core.read_namespaced_pod_log("retry-init", ns) == "ok\n"


def test_init_container_that_always_fails_shows_init_crash_loop_back_off(
    api_client: client.ApiClient, sim: KubeSim, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, _pod("loop-init", [["false"]], ["true"], "Always"))
    wait_for(lambda: _status_column(api_client, sim, ns, "loop-init") == "Init:CrashLoopBackOff")
    pod = core.read_namespaced_pod("loop-init", ns)
    assert pod.status.phase == "Pending" and pod.status.init_container_statuses[0].restart_count >= 1
    assert pod.status.container_statuses[0].state.waiting.reason == "PodInitializing"
    core.delete_namespaced_pod("loop-init", ns, grace_period_seconds=0)

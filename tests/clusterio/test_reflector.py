"""`PodReflector` against kubesim: initial sync, a pod's whole life as events, relist after 410, errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterio import names
from clusterio.client import Cluster
from clusterio.reflector import PodReflector
from kubesim.testing import KubeSim
from tests.clusterio.conftest import Gate, job_spec, pod_phase, python, wait_file_code, wait_for

WATCH_PATH = r"^/api/v1/pods$"


class Recorder:
    """Collects callbacks and keeps the reflector's view: pod name -> latest pod dict."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.syncs: list[list[str]] = []
        self.events: list[tuple[str, str, str | None]] = []
        self.view: dict[str, dict[str, Any]] = {}

    def on_sync(self, pods: list[dict[str, Any]]) -> None:
        with self.lock:
            self.syncs.append(sorted(p["metadata"]["name"] for p in pods))
            self.view = {p["metadata"]["name"]: p for p in pods}

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        with self.lock:
            self.events.append((kind, name, (pod.get("status") or {}).get("phase")))
            if kind == "DELETED":
                self.view.pop(name, None)
            else:
                self.view[name] = pod

    def phase(self, name: str) -> str | None:
        with self.lock:
            pod = self.view.get(name)
        return None if pod is None else (pod.get("status") or {}).get("phase")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def start(cluster: Cluster, recorder: Recorder) -> Iterator[Any]:
    """Start a reflector (selector: one job; callbacks: the recorder's unless given) in a thread; stopped
    and joined at the end of the test."""
    running: list[tuple[threading.Event, threading.Thread]] = []

    def starter(job_id: str, **options: Any) -> PodReflector:
        options = {"on_sync": recorder.on_sync, "on_event": recorder.on_event, **options}
        reflector = PodReflector(cluster, label_selector=names.job_selector(job_id), **options)
        stop = threading.Event()
        thread = threading.Thread(target=reflector.run, args=(stop,), daemon=True)
        thread.start()
        running.append((stop, thread))
        return reflector

    yield starter
    for stop, thread in running:
        stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the reflector did not stop promptly"


def test_on_sync_lists_the_pods_that_already_exist(
    cluster: Cluster, ns: str, job_id: str, tmp_path: Path, recorder: Recorder, start: Any
) -> None:
    pods = cluster.launch(spec=job_spec(ns, job_id, python(wait_file_code(tmp_path / "x")), learners=2))
    reflector = start(job_id)
    wait_for(lambda: recorder.syncs)
    assert recorder.syncs[0] == sorted(pods)
    assert reflector.lists == 1 and reflector.relists == 0
    assert int(reflector.last_resource_version) > 0


def test_a_pods_life_arrives_as_added_modified_deleted(
    cluster: Cluster, ns: str, job_id: str, recorder: Recorder, start: Any
) -> None:
    start(job_id)
    wait_for(lambda: recorder.syncs == [[]])
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python("print('hello')")))
    wait_for(lambda: recorder.phase(pod) == "Succeeded")
    cluster.delete_pod(namespace=ns, pod=pod)
    wait_for(lambda: recorder.events[-1][0] == "DELETED")

    kinds = [kind for kind, _, _ in recorder.events]
    assert kinds[0] == "ADDED" and kinds[-1] == "DELETED"
    assert set(kinds[1:-1]) == {"MODIFIED"}
    phases = [phase for _, _, phase in recorder.events]
    assert "Succeeded" in phases and phases.index("Succeeded") > phases.index("Pending")
    assert {name for _, name, _ in recorder.events} == {pod}


@pytest.mark.kubesim_only
def test_relists_after_410_gone_without_losing_the_final_state(
    cluster: Cluster, sim: KubeSim, ns: str, job_id: str, gate: Gate, recorder: Recorder, start: Any
) -> None:
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python(gate.wait_code("done")), volumes=[gate.volume]))
    reflector = start(job_id, watch_timeout_seconds=1, backoff_max=0.1)
    wait_for(lambda: recorder.phase(pod) == "Running")

    sim.inject_fault("GET", WATCH_PATH, code=500)
    wait_for(lambda: reflector.errors > 0, timeout=10)
    gate.open("done")
    wait_for(lambda: pod_phase(cluster, ns, pod) == "Succeeded")
    assert recorder.phase(pod) == "Running", "the watch is down, so the change must not have arrived"
    sim.compact(keep=0)
    sim.clear_faults()

    wait_for(lambda: reflector.relists == 1)
    wait_for(lambda: recorder.phase(pod) == "Succeeded")
    assert recorder.syncs[-1] == [pod]


@pytest.mark.kubesim_only
def test_survives_injected_errors_and_callback_exceptions(
    cluster: Cluster, sim: KubeSim, ns: str, job_id: str, recorder: Recorder, start: Any
) -> None:
    failures: list[str] = []

    def on_event(kind: str, pod: dict[str, Any]) -> None:
        failures.append(kind)
        raise RuntimeError("a broken callback")

    sim.inject_fault("GET", WATCH_PATH, code=500, count=12)
    reflector = start(job_id, on_event=on_event, backoff_max=0.05)
    wait_for(lambda: recorder.syncs)
    assert reflector.errors >= 2
    cluster.launch(spec=job_spec(ns, job_id, python("pass")))
    wait_for(lambda: len(failures) >= 2)
    assert reflector.callback_errors == len(failures)


def test_a_failed_callback_is_followed_by_a_relist_that_brings_the_missed_state(
    cluster: Cluster, ns: str, job_id: str, recorder: Recorder, start: Any
) -> None:
    broken = threading.Event()
    broken.set()

    def on_event(kind: str, pod: dict[str, Any]) -> None:
        if broken.is_set():
            broken.clear()  # fails once, like a database that was briefly away
            raise RuntimeError("database unavailable")
        recorder.on_event(kind, pod)

    reflector = start(job_id, on_event=on_event)
    wait_for(lambda: recorder.syncs)
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python("pass")))
    wait_for(lambda: reflector.callback_errors == 1)
    wait_for(lambda: reflector.relists >= 1 and pod in recorder.syncs[-1])
    wait_for(lambda: recorder.phase(pod) == "Succeeded")


def test_the_reflector_lists_afresh_every_relist_seconds(job_id: str, start: Any) -> None:
    reflector = start(job_id, watch_timeout_seconds=1, relist_seconds=0.5)
    wait_for(lambda: reflector.relists >= 2, timeout=20)
    assert reflector.errors == 0 and reflector.callback_errors == 0


def test_the_reflector_reports_progress_at_each_list_watch_and_event(
    cluster: Cluster, ns: str, job_id: str, recorder: Recorder, start: Any
) -> None:
    pulses: list[float] = []
    start(job_id, on_alive=lambda: pulses.append(time.monotonic()))
    wait_for(lambda: len(pulses) >= 2)  # the list, and the watch it opened
    before = len(pulses)
    [pod] = cluster.launch(spec=job_spec(ns, job_id, python("pass")))
    wait_for(lambda: recorder.phase(pod) == "Succeeded")
    assert len(pulses) > before, "events count as progress"

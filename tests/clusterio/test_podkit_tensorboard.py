"""The launcher's TensorBoard sync (clusterio/podkit/launcher.py) against a real HTTP server that keeps
files by offset as the platform does: where `evaluation_metrics.in` resolves to, only new bytes sent, a
rewritten file sent again, a 409 followed, odd names quoted, links and other files left alone, and the last
bytes sent once the command has exited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clusterio.podkit import LAUNCHER_SOURCE
from clusterio.podkit.launcher import EventSync, tensorboard_dir
from tests.clusterio.artifact_server import PODKIT_PYTHON, TIMEOUT, TOKEN
from tests.jobs.engine import wait_until

EVENTS = "events.out.tfevents.100.host.1"


@dataclass
class OffsetServer:
    """Holds each file's bytes; a PUT must start where they end (or at 0, which replaces them)."""

    base: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    puts: list[tuple[str, int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def server() -> Iterator[OffsetServer]:
    state = OffsetServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = urllib.parse.unquote(self.path.split("/files/", 1)[1])
            offset = int(self.headers["X-Trainyard-Offset"])
            answer: dict[str, object]
            with state.lock:
                held = state.files.get(path, b"")
                if self.headers.get("X-Trainyard-Artifact-Token") != TOKEN:
                    status, answer = 403, {"detail": "token"}
                elif offset not in (0, len(held)):
                    status, answer = 409, {"size": len(held)}
                else:
                    state.files[path] = (held if offset else b"") + body
                    state.puts.append((path, offset, len(body)))
                    status, answer = 201, {"size": len(state.files[path])}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            return None

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}/tb"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("$JOB_STATE_DIR/logs/tb", "/results/logs/tb"),  # FfDL's variable stands for RESULT_DIR
        ("${RESULT_DIR}/tb", "/results/tb"),
        ("$CHECKPOINT_DIR/../tb", "/tb"),
        ("logs/tb", "/work/logs/tb"),  # relative: from the command's working directory
        ("", "/work/runs"),  # SummaryWriter's default folder
        ("/abs/tb", "/abs/tb"),
        ("$UNSET/tb", "/work/$UNSET/tb"),  # an unknown variable stays as written
    ],
)
def test_the_event_folder_resolves_variables_and_relative_paths(raw: str, expected: str) -> None:
    environ = {"RESULT_DIR": "/results", "CHECKPOINT_DIR": "/ckpt"}
    assert tensorboard_dir(raw, environ, "/work") == expected


def test_a_given_job_state_dir_wins_over_result_dir() -> None:
    assert (
        tensorboard_dir("$JOB_STATE_DIR/tb", {"RESULT_DIR": "/r", "JOB_STATE_DIR": "/state"}, "/w")
        == "/state/tb"
    )


def test_only_new_bytes_are_sent_and_a_rewritten_file_from_its_start(
    tmp_path: Path, server: OffsetServer
) -> None:
    events = tmp_path / "tb" / EVENTS
    events.parent.mkdir()
    events.write_bytes(b"a" * 100)
    sync = EventSync(server.base, TOKEN, str(tmp_path / "tb"))
    sync.round()
    events.write_bytes(b"a" * 100 + b"b" * 50)
    sync.round()
    sync.round()  # nothing new: nothing sent
    assert server.puts == [(EVENTS, 0, 100), (EVENTS, 100, 50)]
    events.write_bytes(b"c" * 20)  # rewritten, shorter
    sync.round()
    assert server.puts[-1] == (EVENTS, 0, 20) and server.files[EVENTS] == b"c" * 20
    assert (sync.files, sync.bytes) == (1, 170)


def test_a_409_is_followed_from_the_size_the_platform_holds(tmp_path: Path, server: OffsetServer) -> None:
    (tmp_path / EVENTS).write_bytes(b"0123456789")
    server.files[EVENTS] = b"0123"  # sent by an earlier launcher of this attempt
    sync = EventSync(server.base, TOKEN, str(tmp_path))
    sync.sent[EVENTS] = 2  # and this one's memory is behind
    sync.round()
    assert server.files[EVENTS] == b"0123456789" and server.puts == [(EVENTS, 4, 6)]


def test_only_event_files_are_sent_with_odd_names_quoted_and_links_skipped(
    tmp_path: Path, server: OffsetServer
) -> None:
    root = tmp_path / "tb"
    (root / "eval run").mkdir(parents=True)
    (root / "eval run" / "events.out.tfevents.1 %x").write_bytes(b"e")
    (root / "checkpoint.pt").write_bytes(b"not an event file")
    outside = tmp_path / "secret.tfevents"
    outside.write_bytes(b"outside the folder")
    (root / "link.tfevents").symlink_to(outside)
    (root / "linked-dir").symlink_to(tmp_path)
    EventSync(server.base, TOKEN, str(root)).round()
    assert server.files == {"eval run/events.out.tfevents.1 %x": b"e"}


def test_a_refused_file_is_not_sent_again(tmp_path: Path, server: OffsetServer) -> None:
    (tmp_path / EVENTS).write_bytes(b"x")
    sync = EventSync(server.base, "not-the-token", str(tmp_path))
    sync.round()
    sync.round()
    assert server.puts == [] and EVENTS in sync.refused


def test_the_launcher_sends_while_the_command_runs_and_the_rest_after_it_exits(
    tmp_path: Path, server: OffsetServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    child = (
        "import pathlib, time\n"
        f"p = pathlib.Path('logs') / {EVENTS!r}\n"
        "p.parent.mkdir()\n"
        "p.write_bytes(b'first')\n"
        f"marker = pathlib.Path({str(tmp_path / 'seen')!r})\n"
        "deadline = time.monotonic() + 60\n"
        "while not marker.exists() and time.monotonic() < deadline: time.sleep(0.05)\n"
        "with p.open('ab') as f: f.write(b'+last')\n"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "TRAINYARD_ARTIFACT_TOKEN": TOKEN,
        "TRAINYARD_TENSORBOARD_URL": server.base,
        "TRAINYARD_TENSORBOARD_DIR": "logs",
        "TRAINYARD_TENSORBOARD_INTERVAL": "0.2",
    }
    process = subprocess.Popen(
        [PODKIT_PYTHON, "-c", LAUNCHER_SOURCE, sys.executable, "-c", child],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(lambda: server.files.get(EVENTS) == b"first", timeout=TIMEOUT, what="the periodic sync")
        (tmp_path / "seen").write_text("")
        _, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert server.files[EVENTS] == b"first+last"
    assert b"sent 10 bytes of 1 TensorBoard event file(s)" in err


def test_the_builders_give_each_learner_its_event_file_url_folder_and_interval() -> None:
    from clusterio.builders import ArtifactSpec, JobPodsSpec, make_learner_pod, to_dict

    artifacts = ArtifactSpec(
        results_url="http://p/a/j/1/{learner}/results",
        tensorboard_url="http://p/a/j/1/{learner}/tensorboard",
        tensorboard_dir="$JOB_STATE_DIR/logs/tb",
        tensorboard_interval=2.5,
    )
    spec = JobPodsSpec(
        job_id="j", attempt=1, tenant="acme", namespace="ty-acme", image="python:3.11", command=["python"],
        learners=2, gpus=0, cpu_millis=500, memory_mib=256, checkpoint_dir="/ckpt", data_dir="/data",
        result_dir="/results", artifacts=artifacts,
    )  # fmt: skip
    env = {
        e["name"]: e.get("value") for e in to_dict(make_learner_pod(spec, 1))["spec"]["containers"][0]["env"]
    }
    assert env["TRAINYARD_TENSORBOARD_URL"] == "http://p/a/j/1/1/tensorboard"
    assert env["TRAINYARD_TENSORBOARD_DIR"] == "$JOB_STATE_DIR/logs/tb"
    assert env["TRAINYARD_TENSORBOARD_INTERVAL"] == "2.5"
    without = ArtifactSpec(results_url="http://p/r")
    plain = make_learner_pod(JobPodsSpec(**{**spec.__dict__, "artifacts": without}), 0)
    assert not any(
        e["name"].startswith("TRAINYARD_TENSORBOARD") for e in to_dict(plain)["spec"]["containers"][0]["env"]
    )
    with pytest.raises(ValueError, match="needs results_url"):
        ArtifactSpec(tensorboard_url="http://p/tb")

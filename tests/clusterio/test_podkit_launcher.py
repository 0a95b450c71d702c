"""The launcher run for real (`python -c LAUNCHER_SOURCE <argv...>`) against a local HTTP server.

Output and exit codes pass through unchanged, SIGTERM reaches the child's handler, result files
upload byte-identical with their sha256 (symlinks skipped), also when the child fails, and a
platform that is down or refuses never changes the exit code.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clusterio.podkit import LAUNCHER_SOURCE
from tests.clusterio.artifact_server import (
    PODKIT_PYTHON,
    TIMEOUT,
    TOKEN,
    ArtifactServer,
    closed_port_url,
)


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _env(tmp_path: Path, results_url: str | None, **extra: str) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "RESULT_DIR": str(tmp_path / "results"),
        "CHECKPOINT_DIR": str(tmp_path / "ckpt"),
        "TRAINYARD_ARTIFACT_TOKEN": TOKEN,
        **extra,
    }
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "ckpt").mkdir(exist_ok=True)
    if results_url:
        env["TRAINYARD_RESULTS_URL"] = results_url
    return env


def _launch(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [PODKIT_PYTHON, "-c", LAUNCHER_SOURCE, *argv], env=env, capture_output=True, timeout=TIMEOUT
    )


def _complete(server: ArtifactServer) -> dict[str, Any]:
    (post,) = server.received("POST")
    assert post.path == "/results/complete"
    assert post.headers["X-Trainyard-Artifact-Token"] == TOKEN
    result: dict[str, Any] = json.loads(post.body)
    return result


def _last_line(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode().rstrip("\n").rsplit("\n", 1)[-1]


CHATTY = (
    "import sys\n"
    "sys.stdout.buffer.write(b'line one\\n\\x00\\xff raw bytes, no newline')\n"
    "sys.stdout.flush()\n"
    "sys.stderr.write('to stderr\\n')\n"
)


def test_launcher_without_results_url_only_runs_the_child_and_passes_output_through(tmp_path: Path) -> None:
    result = _launch(_py(CHATTY), _env(tmp_path, None))
    assert result.returncode == 0
    assert result.stdout == b"line one\n\x00\xff raw bytes, no newline"
    assert result.stderr == b"to stderr\n"


def test_launcher_passes_output_through_unchanged_and_then_reports(
    server: ArtifactServer, tmp_path: Path
) -> None:
    result = _launch(_py(CHATTY), _env(tmp_path, server.results_url))
    assert result.returncode == 0
    # The command's unfinished stdout line is ended (on its own stream) before the launcher speaks.
    assert result.stdout == b"line one\n\x00\xff raw bytes, no newline\n"
    assert result.stderr == b"to stderr\ntrainyard: uploaded 0 result file(s), 0 bytes\n"
    assert _complete(server) == {"exit_code": 0, "files": 0, "bytes": 0, "checkpoint_bytes": 0}


def _launch_merged(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """The launcher with stdout and stderr on one pipe, as kubesim's runtime gives a container."""
    return subprocess.run(
        [PODKIT_PYTHON, "-c", LAUNCHER_SOURCE, *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=TIMEOUT,
    )


def test_launchers_lines_start_on_a_new_line_after_a_huge_line_without_one(
    server: ArtifactServer, tmp_path: Path
) -> None:
    """The issue's 20 MB line without a newline: the launcher's report was glued onto it (and cut off with
    it at ingest); now a newline ends the command's line first, and the bytes are otherwise unchanged."""
    huge = "import sys\nsys.stdout.write('x' * 20_000_000)\nsys.stdout.flush()\n"
    result = _launch_merged(_py(huge), _env(tmp_path, server.results_url))
    assert result.returncode == 0
    assert result.stdout[:20_000_000] == b"x" * 20_000_000
    assert result.stdout[20_000_000:] == b"\ntrainyard: uploaded 0 result file(s), 0 bytes\n"


def test_launcher_adds_no_blank_line_after_output_that_ends_its_line_and_keeps_the_streams_order(
    server: ArtifactServer, tmp_path: Path
) -> None:
    child = (
        "import sys\n"
        "for i in range(200):\n"
        "    stream = sys.stdout if i % 2 else sys.stderr\n"
        "    stream.write(f'{i}\\n')\n"
        "    stream.flush()\n"
    )
    result = _launch_merged(_py(child), _env(tmp_path, server.results_url))
    expected = "".join(f"{i}\n" for i in range(200)) + "trainyard: uploaded 0 result file(s), 0 bytes\n"
    assert result.stdout.decode() == expected


def test_launcher_waits_not_for_a_process_the_command_left_holding_its_output(
    server: ArtifactServer, tmp_path: Path
) -> None:
    pid_file = tmp_path / "daemon.pid"
    child = (
        "import subprocess, sys\n"
        "daemon = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(daemon.pid))\n"
    )
    started = time.monotonic()
    try:
        result = _launch(_py(child), _env(tmp_path, server.results_url))
        assert result.returncode == 0 and _complete(server)["exit_code"] == 0
        assert time.monotonic() - started < 30
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pass", 0),
        ("raise SystemExit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137),
    ],
    ids=["zero", "three", "sigkill"],
)
def test_launcher_exits_with_the_childs_code_or_128_plus_signal(
    code: str, expected: int, server: ArtifactServer, tmp_path: Path
) -> None:
    result = _launch(_py(code), _env(tmp_path, server.results_url))
    assert result.returncode == expected
    assert _complete(server)["exit_code"] == expected


def test_launcher_reports_a_command_that_cannot_run_as_127(server: ArtifactServer, tmp_path: Path) -> None:
    result = _launch(["/nonexistent/trainer"], _env(tmp_path, server.results_url))
    assert result.returncode == 127
    assert b"cannot run '/nonexistent/trainer'" in result.stderr
    assert _complete(server)["exit_code"] == 127


def test_launcher_forwards_sigterm_to_the_child_whose_handler_decides_the_exit_code(
    server: ArtifactServer, tmp_path: Path
) -> None:
    marker = tmp_path / "results" / "stopped.txt"
    child = (
        "import signal, sys, time\n"
        "def stop(signum, frame):\n"
        f"    open({str(marker)!r}, 'w').write('graceful')\n"
        "    sys.exit(7)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    launcher = subprocess.Popen(
        [PODKIT_PYTHON, "-c", LAUNCHER_SOURCE, *_py(child)],
        env=_env(tmp_path, server.results_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline() == b"ready\n"
        started = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 7, stderr
    assert time.monotonic() - started < 30, "the child stopped on the forwarded signal, not on its own"
    assert marker.read_text() == "graceful"
    assert [put.path for put in server.received("PUT")] == ["/results/files/stopped.txt"]
    assert _complete(server)["exit_code"] == 7


def _write(path: Path, data: bytes) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def test_launcher_uploads_nested_result_files_byte_identical_and_skips_symlinks(
    server: ArtifactServer, tmp_path: Path
) -> None:
    env = _env(tmp_path, server.results_url)
    results, ckpt = tmp_path / "results", tmp_path / "ckpt"
    files = {
        "model.pt": _write(results / "model.pt", os.urandom(300_000)),
        "logs/run 1/metrics.json": _write(results / "logs/run 1/metrics.json", b'{"loss": 0.1}'),
        "empty.txt": _write(results / "empty.txt", b""),
    }
    outside = tmp_path / "outside"
    _write(outside / "secret.txt", b"never uploaded")
    (results / "link.txt").symlink_to(outside / "secret.txt")
    (results / "linkdir").symlink_to(outside)
    ckpt_bytes = len(_write(ckpt / "step-10.pt", os.urandom(1234)) + _write(ckpt / "deep/x", b"12345"))
    (ckpt / "ext").symlink_to(outside / "secret.txt")
    token_probe = "import os; print(os.environ.get('TRAINYARD_ARTIFACT_TOKEN'))"

    result = _launch(_py(token_probe), env)

    assert result.returncode == 0
    assert result.stdout == b"None\n", "the user's command does not see the artifact token"
    puts = {put.path.removeprefix("/results/files/"): put for put in server.received("PUT")}
    assert set(puts) == {"model.pt", "logs/run%201/metrics.json", "empty.txt"}
    for rel, data in files.items():
        put = puts[rel.replace(" ", "%20")]
        assert put.body == data
        assert put.headers["X-Trainyard-Sha256"] == hashlib.sha256(data).hexdigest()
        assert put.headers["X-Trainyard-Artifact-Token"] == TOKEN
    total = sum(len(data) for data in files.values())
    assert _complete(server) == {"exit_code": 0, "files": 3, "bytes": total, "checkpoint_bytes": ckpt_bytes}
    assert _last_line(result) == f"trainyard: uploaded 3 result file(s), {total} bytes"


def test_launcher_still_uploads_results_when_the_child_fails(server: ArtifactServer, tmp_path: Path) -> None:
    partial = tmp_path / "results" / "partial.pt"
    child = f"open({str(partial)!r}, 'wb').write(b'half a model'); raise SystemExit(3)"
    result = _launch(_py(child), _env(tmp_path, server.results_url))
    assert result.returncode == 3
    (put,) = server.received("PUT")
    assert put.path == "/results/files/partial.pt" and put.body == b"half a model"
    assert _complete(server)["exit_code"] == 3
    assert _last_line(result) == "trainyard: uploaded 1 result file(s), 12 bytes"


def test_launcher_rides_out_a_platform_outage_longer_than_a_few_tries(
    server: ArtifactServer, tmp_path: Path
) -> None:
    _write(tmp_path / "results" / "model.pt", b"weights")
    server.unavailable_puts = 4  # 0.5 + 1 + 2 + 4 s of 503s: more than the old three tries rode out
    result = _launch(_py("pass"), _env(tmp_path, server.results_url))
    assert result.returncode == 0
    puts = server.received("PUT")
    assert len(puts) == 5 and puts[-1].body == b"weights"
    assert _last_line(result) == "trainyard: uploaded 1 result file(s), 7 bytes"


@pytest.mark.parametrize("child_code", [0, 3])
def test_launcher_survives_a_results_server_that_is_down(child_code: int, tmp_path: Path) -> None:
    _write(tmp_path / "results" / "model.pt", b"weights")
    env = _env(tmp_path, closed_port_url(), TRAINYARD_UPLOAD_RETRY_SECONDS="1")
    result = _launch(_py(f"raise SystemExit({child_code})"), env)
    assert result.returncode == child_code
    stderr = result.stderr.decode()
    assert "result upload of 'model.pt' failed" in stderr
    assert re.search(r"after [2-9] tries", stderr), stderr
    assert "could not report the attempt's end" in stderr
    assert _last_line(result) == "trainyard: uploaded 0 result file(s), 0 bytes"


def test_launcher_stops_uploading_when_the_platform_refuses_and_keeps_the_exit_code(
    server: ArtifactServer, tmp_path: Path
) -> None:
    server.reject_results = True
    for name in ("a.txt", "b.txt"):
        _write(tmp_path / "results" / name, b"x")
    result = _launch(_py("raise SystemExit(3)"), _env(tmp_path, server.results_url))
    assert result.returncode == 3
    assert len(server.received("PUT")) == 1, "a refusal is neither retried nor repeated for every file"
    assert "refused: HTTP 403" in result.stderr.decode()
    assert _last_line(result) == "trainyard: uploaded 0 result file(s), 0 bytes"

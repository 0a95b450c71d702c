"""The pod kit run for real, as pods run it (`python -c SOURCE ...`), against a local HTTP server.

fetch: downloads with the token, checks the sha256, unpacks safely (never outside MODEL_DIR) and
downloads S3 prefixes (against moto's server mode, when moto is installed). launcher: output and
exit codes pass through, signals are forwarded, results upload byte-identical, even on failure,
and a platform that is down or refuses never changes the exit code.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import stat
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterio.podkit import FETCH_SOURCE
from tests.clusterio.artifact_server import (
    PODKIT_PYTHON,
    TIMEOUT,
    TOKEN,
    ArtifactServer,
)


def _zip(entries: dict[str, bytes], *, executable: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (stat.S_IFREG | (0o755 if name in executable else 0o644)) << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def _symlink_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("ok.py", b"print('ok')\n")
        link = zipfile.ZipInfo("evil")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, b"/etc/passwd")
    return buffer.getvalue()


def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


def _run(source: str, *argv: str, env: dict[str, str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    full_env = {"PATH": os.environ.get("PATH", ""), **env}
    return subprocess.run(
        [PODKIT_PYTHON, "-c", source, *argv], env=full_env, capture_output=True, timeout=TIMEOUT, **kwargs
    )


def _fetch(
    server: ArtifactServer, model_dir: Path, archive: bytes, **env: str
) -> subprocess.CompletedProcess[bytes]:
    server.code = archive
    fetch_env = {
        "TRAINYARD_CODE_URL": server.code_url,
        "TRAINYARD_CODE_SHA256": hashlib.sha256(archive).hexdigest(),
        "TRAINYARD_ARTIFACT_TOKEN": TOKEN,
        "MODEL_DIR": str(model_dir),
        **env,
    }
    return _run(FETCH_SOURCE, env=fetch_env)


def _one_error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("trainyard fetch: ")
    return lines[0]


# -- fetch -----------------------------------------------------------------------------------------


def test_fetch_downloads_with_the_token_and_unpacks_the_code_into_model_dir(
    server: ArtifactServer, tmp_path: Path
) -> None:
    code = {"train.py": b"print('train')\n", "pkg/__init__.py": b"", "pkg/run.sh": b"#!/bin/sh\necho hi\n"}
    model = tmp_path / "model"
    result = _fetch(server, model, _zip(code, executable=("pkg/run.sh",)))
    assert result.returncode == 0, result.stderr
    assert _files_under(model) == set(code)
    assert all((model / name).read_bytes() == data for name, data in code.items())
    assert os.access(model / "pkg/run.sh", os.X_OK) and not os.access(model / "train.py", os.X_OK)
    assert b"unpacked 3 file(s)" in result.stderr
    (get,) = server.received("GET")
    assert get.headers["X-Trainyard-Artifact-Token"] == TOKEN


def test_fetch_refuses_a_download_whose_sha256_does_not_match(server: ArtifactServer, tmp_path: Path) -> None:
    model = tmp_path / "model"
    result = _fetch(server, model, _zip({"a.py": b"x"}), TRAINYARD_CODE_SHA256="0" * 64)
    assert result.returncode != 0
    assert "sha256 mismatch" in _one_error_line(result)
    assert _files_under(tmp_path) == set()


def test_fetch_reports_a_refused_token(server: ArtifactServer, tmp_path: Path) -> None:
    result = _fetch(server, tmp_path / "model", _zip({"a.py": b"x"}), TRAINYARD_ARTIFACT_TOKEN="wrong")
    assert result.returncode != 0
    assert "HTTP 403" in _one_error_line(result)
    assert len(server.received("GET")) == 1, "a refusal is not retried"


def test_fetch_without_code_or_s3_does_nothing(tmp_path: Path) -> None:
    result = _run(FETCH_SOURCE, env={"MODEL_DIR": str(tmp_path / "model")})
    assert result.returncode == 0 and result.stderr == b""


BAD_ARCHIVES = {
    "not-a-zip": (lambda root: b"this is not a zip at all", "not a valid ZIP"),
    "dot-dot": (lambda root: _zip({"ok.py": b"", "../escaped.txt": b"gotcha"}), "contains '..'"),
    "nested-dot-dot": (lambda root: _zip({"a/../../escaped.txt": b"gotcha"}), "contains '..'"),
    "absolute": (lambda root: _zip({f"{root}/escaped.txt": b"gotcha"}), "absolute path"),
    "symlink": (lambda root: _symlink_zip(), "symbolic link"),
    "zip-bomb": (lambda root: _zip({"zeros.bin": bytes(3 << 20)}), "TRAINYARD_CODE_MAX_UNPACKED"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCHIVES))
def test_fetch_refuses_a_bad_archive_and_writes_nothing_outside_model_dir(
    case: str, server: ArtifactServer, tmp_path: Path
) -> None:
    build, message = BAD_ARCHIVES[case]
    sandbox = tmp_path / "sandbox"
    model = sandbox / "model"
    result = _fetch(server, model, build(sandbox), TRAINYARD_CODE_MAX_UNPACKED=str(1 << 20))
    assert result.returncode != 0
    assert message in _one_error_line(result)
    assert not (sandbox / "escaped.txt").exists()
    assert {p for p in _files_under(sandbox) if not p.startswith("model/")} == set()
    assert _files_under(model) == set(), "a refused archive is refused before anything is unpacked"


def test_fetch_default_unpacked_cap_is_one_gib(server: ArtifactServer, tmp_path: Path) -> None:
    result = _fetch(server, tmp_path / "model", _zip({"zeros.bin": bytes(3 << 20)}))
    assert result.returncode == 0, result.stderr


# -- fetch from S3 (moto's server mode: a real S3 HTTP API) ------------------------------------------


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is not installed")
    moto_server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto_server.start()
    host, port = moto_server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        moto_server.stop()


def _s3_env(endpoint: str, target: Path, bucket: str = "datasets", prefix: str = "mnist/") -> dict[str, str]:
    item = {
        "endpoint": endpoint,
        "bucket": bucket,
        "prefix": prefix,
        "target": str(target),
        "access_key_env": "STORE_ACCESS_KEY_ID",
        "secret_key_env": "STORE_SECRET_ACCESS_KEY",
    }
    return {
        "TRAINYARD_S3_FETCH": json.dumps([item]),
        "STORE_ACCESS_KEY_ID": "testing",
        "STORE_SECRET_ACCESS_KEY": "testing",
    }


def _bucket(endpoint: str, objects: dict[str, bytes]) -> Any:
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="datasets")
    for key, data in objects.items():
        s3.put_object(Bucket="datasets", Key=key, Body=data)
    return s3


def test_fetch_downloads_an_s3_prefix_into_its_target_keeping_the_key_suffix(
    s3_endpoint: str, tmp_path: Path
) -> None:
    objects = {f"mnist/train/part-{i:04d}.bin": os.urandom(100 + i) for i in range(7)}
    objects["mnist/labels.json"] = b"[1, 2]"
    s3 = _bucket(s3_endpoint, {**objects, "mnist/": b"", "other/skip.txt": b"not under the prefix"})
    assert s3.list_objects_v2(Bucket="datasets", Prefix="mnist/", MaxKeys=3)["IsTruncated"]
    target = tmp_path / "data"
    env = {**_s3_env(s3_endpoint, target), "TRAINYARD_S3_PAGE_SIZE": "3"}
    result = _run(FETCH_SOURCE, env=env)
    assert result.returncode == 0, result.stderr
    expected = {key.removeprefix("mnist/"): data for key, data in objects.items()}
    assert _files_under(target) == set(expected), "every page of the listing is fetched"
    assert all((target / rel).read_bytes() == data for rel, data in expected.items())
    assert b"downloaded 8 object(s)" in result.stderr
    assert b"testing" not in result.stderr


def test_fetch_refuses_an_s3_key_that_would_escape_the_target(s3_endpoint: str, tmp_path: Path) -> None:
    _bucket(s3_endpoint, {"mnist/../../escaped.txt": b"gotcha"})
    sandbox = tmp_path / "sandbox"
    result = _run(FETCH_SOURCE, env=_s3_env(s3_endpoint, sandbox / "data"))
    assert result.returncode != 0
    assert "contains '..'" in _one_error_line(result)
    assert _files_under(tmp_path) == set()


def test_fetch_reports_a_missing_bucket(s3_endpoint: str, tmp_path: Path) -> None:
    result = _run(FETCH_SOURCE, env=_s3_env(s3_endpoint, tmp_path / "data", bucket="nope"))
    assert result.returncode != 0
    assert "NoSuchBucket" in _one_error_line(result)


def test_fetch_reports_a_credential_env_that_is_not_set(tmp_path: Path) -> None:
    env = _s3_env("http://127.0.0.1:9", tmp_path / "data")
    del env["STORE_SECRET_ACCESS_KEY"]
    result = _run(FETCH_SOURCE, env=env)
    assert result.returncode != 0
    assert "STORE_SECRET_ACCESS_KEY is not set" in _one_error_line(result)


@pytest.fixture
def not_s3() -> Iterator[str]:
    """An HTTP server that answers everything with a body no S3 client can parse (as a cloud metadata
    endpoint or a database would), holding a secret."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"iam-role-credentials: AKIA-SECRET-FROM-METADATA\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_fetch_never_repeats_what_a_non_s3_endpoint_replied(not_s3: str, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    result = _run(FETCH_SOURCE, env=_s3_env(not_s3, tmp_path / "data"))
    assert result.returncode != 0
    line = _one_error_line(result)
    assert "SECRET" not in result.stderr.decode(), "the reply is never echoed into the job's reason"
    assert line.startswith("trainyard fetch: s3://datasets/mnist/: "), line

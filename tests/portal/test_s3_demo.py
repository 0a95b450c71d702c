"""`manage.py s3_demo` (the `s3` process of `make up`): once it says it is up, its bucket holds the demo
dataset over the real S3 API; SIGTERM (honcho's Ctrl-C) stops it cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import boto3

from portal import demo_s3

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_dataset_is_deterministic_and_a_few_hundred_kb() -> None:
    data = demo_s3.dataset_csv()
    assert data == demo_s3.dataset_csv()
    assert 200_000 < len(data) < 800_000
    lines = data.decode().splitlines()
    assert lines[0] == "x0,x1,x2,x3,x4,x5,x6,x7,y" and len(lines) == demo_s3.ROWS + 1


def test_s3_demo_serves_the_bucket_until_sigterm() -> None:
    port = _free_port()
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "portal.settings.test"}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "s3_demo", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = ""
        for line in process.stdout:  # waits for the line the command prints once the bucket is filled
            if line.startswith("demo S3 at"):
                first = line
                break
        assert first.startswith(f"demo S3 at http://127.0.0.1:{port}: s3://trainyard-demo/"), first
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id=demo_s3.ACCESS_KEY_ID,
            aws_secret_access_key=demo_s3.SECRET_ACCESS_KEY,
            region_name=demo_s3.REGION,
        )
        body = s3.get_object(Bucket=demo_s3.BUCKET, Key=demo_s3.DATASET_KEY)["Body"].read()
        assert body == demo_s3.dataset_csv()
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=20)
        assert process.returncode == 0 and "demo S3 stopped" in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_taken_port_is_said_and_the_process_waits_for_sigterm_rather_than_stop_make_up() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = os.environ | {"DJANGO_SETTINGS_MODULE": "portal.settings.test"}
        process = subprocess.Popen(
            [sys.executable, "manage.py", "s3_demo", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # the first line it prints: why it did not start
            assert line.startswith(f"demo S3 not started: cannot listen on 127.0.0.1:{port}"), line
            assert process.poll() is None, "it must keep running: honcho stops every process when one exits"
            process.send_signal(signal.SIGTERM)
            rest, _ = process.communicate(timeout=20)
            assert process.returncode == 0 and "demo S3 stopped" in rest
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

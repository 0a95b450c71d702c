"""The embedded S3 of `make up` (`manage.py s3_demo`): moto's S3 server on this machine, with a demo bucket
holding a small regression dataset that the example specs read (examples/specs/pytorch-single.yaml, the
FfDL template). seed_demo gives the demo tenant a data-store secret for it and allows its endpoint.

moto checks no credentials; the demo's are fixed and public, so the examples show the real mechanism
(a tenant's data-store secret, or an FfDL manifest's inline credentials) without a real key.
"""

from __future__ import annotations

import io
import os
import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
from moto.server import ThreadedMotoServer

BUCKET = "trainyard-demo"
DATASET_KEY = "regression/points.csv"
SECRET_NAME = "demo-s3"  # noqa: S105 (a name, not a value)
ACCESS_KEY_ID = "trainyard-demo"
SECRET_ACCESS_KEY = "trainyard-demo-secret"  # noqa: S105 (moto checks no credentials; these are public)
REGION = "us-east-1"
POD_HOST = "host.kubesim.internal"  # how pods on kubesim reach this machine (an exposed port)
FEATURES = 8
ROWS = 6000


def dataset_csv(rows: int = ROWS, seed: int = 0) -> bytes:
    """A deterministic regression dataset: `x0..x7,y` with y a fixed linear function of x plus a little noise
    (about 400 KB for the default rows)."""
    rng = random.Random(seed)
    weights = [rng.uniform(-2, 2) for _ in range(FEATURES)]
    out = io.StringIO()
    out.write(",".join([*(f"x{i}" for i in range(FEATURES)), "y"]) + "\n")
    for _ in range(rows):
        xs = [rng.gauss(0, 1) for _ in range(FEATURES)]
        y = sum(w * x for w, x in zip(weights, xs, strict=True)) + 0.5 + rng.gauss(0, 0.05)
        out.write(",".join(f"{v:.4f}" for v in [*xs, y]) + "\n")
    return out.getvalue().encode()


def endpoint(host: str, port: int) -> str:
    return f"http://{host}:{port}"


def fill(url: str) -> None:
    """Create the demo bucket on the S3 server at `url` (if missing) and put the dataset in it."""
    s3 = boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
        region_name=REGION,
    )
    if BUCKET not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key=DATASET_KEY, Body=dataset_csv())


def check_free(host: str, port: int) -> None:
    """Raise OSError, saying so, when `host:port` cannot be listened on (moto's server thread would die there
    and its `start()` wait forever)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise OSError(f"cannot listen on {host}:{port} ({exc.strerror}); set S3_DEMO_PORT") from exc


def path_style_for(url: str) -> None:
    """Tell moto that requests to ``url`` name their bucket in the path: pods reach the demo S3 at kubesim's
    node name (``pod_host``), which moto would otherwise read as a virtual-hosted bucket ``host``."""
    known = [e for e in os.environ.get("MOTO_S3_CUSTOM_ENDPOINTS", "").split(",") if e]
    if url not in known:
        os.environ["MOTO_S3_CUSTOM_ENDPOINTS"] = ",".join([*known, url])


@contextmanager
def demo_s3(
    host: str = "127.0.0.1", port: int = 9000, pod_host: str = POD_HOST, pod_port: int | None = None
) -> Iterator[str]:
    """moto's S3 server on `host:port` with the demo bucket filled; yields its URL and stops it on exit.
    Pods reach it at `pod_host:pod_port` (default `port`: kubesim may forward another port of its node to
    it). Raises OSError when the address is taken."""
    check_free(host, port)
    path_style_for(f"http://{pod_host}:{port if pod_port is None else pod_port}")
    server = ThreadedMotoServer(ip_address=host, port=port, verbose=False)
    server.start()
    try:
        url = endpoint(host, port)
        fill(url)
        yield url
    finally:
        server.stop()

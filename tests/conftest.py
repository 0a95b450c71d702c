"""Shared fixtures and paths for the whole suite."""

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from kubesim.network import HOST_NAME
from kubesim.testing import KubeSim
from tests import scheduling
from tests.clusters import EXTERNAL_KUBECONFIG, KUBESIM_ONLY_REASON, cluster_for_tests
from tests.own_postgres import OwnPostgres, as_default

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("TRAINYARD_SHARED_DATA", ROOT.parent / "shared" / "data"))
FFDL_MANIFESTS = sorted((SHARED_DATA / "ffdl-manifests").glob("*.yml"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/kubesim tests the emulator itself: kubesim-only. With TRAINYARD_TEST_KUBECONFIG set, every
    kubesim-only test is skipped with the reason. On a pytest-xdist worker, the longest files first
    (tests/scheduling.py)."""
    emulator_tests = ROOT / "tests" / "kubesim"
    for item in items:
        if item.path.is_relative_to(emulator_tests):
            item.add_marker(pytest.mark.kubesim_only)
        if EXTERNAL_KUBECONFIG and item.get_closest_marker("kubesim_only"):
            item.add_marker(pytest.mark.skip(reason=KUBESIM_ONLY_REASON))
    if hasattr(config, "workerinput"):
        scheduling.order_for_workers(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (what `make test` runs) with the suite's own order and groups (tests/scheduling.py);
    xdist's other modes as they are."""
    if config.getoption("dist") != "loadfile":
        return None
    return scheduling.make_scheduler(config, log)


@pytest.fixture(autouse=True)
def _api_responses_match_the_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every response the in-process test clients (Django's Client, DRF's APIClient) get from `/api/v1/` is
    checked against the OpenAPI schema (tests/api_schema.py), so a test of any API view also proves that the
    schema describes what the view returned. Live-server tests talk HTTP and are not wrapped."""
    from django.test.client import Client

    from tests.api_schema import check_response

    request = Client.request

    def checked(self: Client, **kwargs: Any) -> Any:
        response = request(self, **kwargs)
        environ = response.request
        if environ["PATH_INFO"].startswith("/api/v1/"):
            check_response(environ["REQUEST_METHOD"], environ["PATH_INFO"], response)
        return response

    monkeypatch.setattr(Client, "request", checked)


@pytest.fixture(scope="session")
def kubesim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeSim]:
    """One embedded cluster for every end-to-end test of the session (one CPU node, one 4-GPU node), or the
    real cluster TRAINYARD_TEST_KUBECONFIG names (see tests/clusters.py)."""
    with cluster_for_tests(
        tmp_path_factory.mktemp("kubesim-e2e"), gpu_nodes=1, gpus_per_node=4, node_monitor_grace=1.0
    ) as sim:
        yield sim


@pytest.fixture(scope="session")
def installed_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `trainyard` command as users get it: `pip install .` of the CLI's own distribution into a fresh
    virtual environment, once per session; its bin directory. Built from a copy of what the distribution
    is made of, so the build leaves nothing in the checkout. Needs the package index `make install` uses."""
    import venv

    base = tmp_path_factory.mktemp("installed-cli")
    source = base / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "trainyard", source / "trainyard", ignore=shutil.ignore_patterns("__pycache__"))
    (source / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "cli.md", source / "docs")
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if sys.platform == "win32" else "bin")
    subprocess.run([bin_dir / "pip", "install", "-q", str(source)], check=True, timeout=540)
    return bin_dir


@pytest.fixture
def engine(kubesim_cluster: KubeSim, transactional_db: None, settings: Any) -> Iterator[KubeSim]:
    """The job engine running for one test against kubesim: a real Celery worker (threads, real Redis
    broker), the watch loop in a thread, and a beat stand-in that queues a scheduler cycle every second.
    Tests drive it through the services, as a user would."""
    from celery.contrib.testing.worker import start_worker

    from jobs.tasks import schedule
    from jobs.watcher import Watcher
    from portal.celery import app

    settings.KUBECONFIG = str(kubesim_cluster.kubeconfig_path)
    app.control.purge()
    from jobs import cluster

    watcher = Watcher(cluster.cluster())
    thread = threading.Thread(target=watcher.run, name="watcher", daemon=True)
    stop_beat = threading.Event()

    def beat() -> None:
        while not stop_beat.wait(1.0):
            schedule.delay()

    beat_thread = threading.Thread(target=beat, name="beat", daemon=True)
    before = set(threading.enumerate())
    queues = [app.conf.task_default_queue, settings.TENSORBOARD_QUEUE]  # every queue, as `make up` runs them
    with start_worker(
        app, pool="threads", concurrency=4, perform_ping_check=False, shutdown_timeout=10, queues=queues
    ) as worker:
        thread.start()
        beat_thread.start()
        try:
            yield kubesim_cluster
        finally:
            stop_beat.set()
            beat_thread.join(timeout=5)
            watcher.stop()
            thread.join(timeout=15)
            for follower in list(watcher.followers.values()):
                follower.join(timeout=15)
    # The worker's pool threads outlive the test worker's stop (a task still running, a launch talking to
    # a slow cluster, would write during the flush): shut the pool down, waiting for its running tasks.
    worker.pool.executor.shutdown(wait=True, cancel_futures=True)
    pool = [t for t in set(threading.enumerate()) - before if t.name.startswith("ThreadPoolExecutor")]
    mine = (thread, beat_thread, *watcher.followers.values(), *pool)
    alive = [t.name for t in mine if t.is_alive()]
    assert not alive, f"engine threads still running after the test: {alive}"
    _end_other_database_sessions()


def _end_other_database_sessions() -> None:
    """End every other session on the test database before pytest-django flushes it: a worker thread
    still inside a query (or idle in a transaction) would otherwise deadlock the flush's TRUNCATE."""
    from django.db import connection

    deadline = time.monotonic() + 10
    while True:  # until a pass finds nobody left (a thread may reconnect once in between)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            ended = len(cursor.fetchall())
        if not ended or time.monotonic() > deadline:
            return
        time.sleep(0.2)


@pytest.fixture(scope="session", autouse=True)
def _end_stray_database_sessions(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """At the very end, end the database sessions that worker, watcher and server threads left open, so
    the test database can be dropped (threads' connections are not closed by the test framework)."""
    yield
    from django.db import OperationalError

    try:
        with django_db_blocker.unblock():
            _end_other_database_sessions()
    except OperationalError:
        pass  # a run of database-free tests only: pytest-django never pointed the connection at a test db


@pytest.fixture(scope="session")
def own_postgres() -> Iterator[OwnPostgres]:
    """A PostgreSQL cluster of the session's own, with the project's schema in a template database, for
    tests that stop and start the database server (tests/own_postgres.py). Made on first use only (about
    5 s: initdb, then migrate); stopped and removed at the end of the session."""
    cluster = OwnPostgres()
    try:
        cluster.start()
        cluster.template()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def own_database(own_postgres: OwnPostgres, transactional_db: None) -> Iterator[str]:
    """A fresh database on the own cluster (a copy of the template), and this process's Django connections
    pointed at it for the test, so factories and services write where a server on the cluster reads. Its
    name is yielded; the test database is back before pytest-django flushes it."""
    name = own_postgres.fresh_database()
    try:
        with as_default(own_postgres, name):
            yield name
    finally:
        if not own_postgres.running:  # a test that failed while the server was down
            own_postgres.start()
        own_postgres.drop_database(name)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[str]:
    """moto's S3 server on a free port (a real S3 HTTP API; it checks no credentials), with bucket
    `datasets` holding toy/points.csv (20 rows `x,2x+1`)."""
    with _moto(tmp_path) as url:
        yield url


@pytest.fixture
def s3_server_and_pod_port(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """`s3_server`, and another free port at which pods may reach it once kubesim maps that port of its node
    to the server's (`KubeSim.expose_host_port(pod_port, port)`): moto reads the bucket from the path there
    too."""
    pod_port = _free_port()
    with _moto(tmp_path, pod_ports=(pod_port,)) as url:
        yield url, pod_port


@contextlib.contextmanager
def _moto(tmp_path: Path, pod_ports: tuple[int, ...] = ()) -> Iterator[str]:
    port = _free_port()
    log = (tmp_path / "moto.log").open("wb")
    # Pods reach it as http://host.kubesim.internal:PORT (tests.clusters.pod_url): buckets in the path.
    endpoints = ",".join(f"http://{HOST_NAME}:{p}" for p in (port, *pod_ports))
    env = {**os.environ, "MOTO_S3_CUSTOM_ENDPOINTS": endpoints}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=log,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(url):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"moto's S3 server did not start; see {tmp_path / 'moto.log'}")
            time.sleep(0.1)
        bucket = boto3.client(
            "s3",
            endpoint_url=url,
            aws_access_key_id="user",
            aws_secret_access_key="secret",
            region_name="us-east-1",
        )
        bucket.create_bucket(Bucket="datasets")
        points = "\n".join(f"{i / 10},{2 * i / 10 + 1}" for i in range(20))
        bucket.put_object(Bucket="datasets", Key="toy/points.csv", Body=points.encode())
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.HTTPError:
        return False
    return True

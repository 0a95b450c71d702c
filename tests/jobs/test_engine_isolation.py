"""A tenant's job on kubesim reaches neither the platform's services on this machine nor another tenant's
pods: issue 26's network attacks, tried from inside a pod that the engine launched (submit, tenant namespace
with its NetworkPolicy, learner pod), while a job of the victim's own tenant still reaches it."""

from __future__ import annotations

import json
import socket

import pytest

from jobs import cluster
from jobs.models import Job, LogLine
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tenants.models import Tenant
from tests.factories import make_tenant, member
from tests.jobs.engine import python_spec, wait_status, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBE = """
import json, os, socket
found = {}
for name, host, port in json.loads(os.environ["TARGETS"]):
    try:
        with socket.create_connection((host, port), timeout=2):
            found[name] = "open"
    except OSError:
        found[name] = "closed"
print("probe " + json.dumps(found, sort_keys=True), flush=True)
"""
SERVE = """
import socket
srv = socket.create_server(("0.0.0.0", 7000))
srv.settimeout(90)
print("serving", flush=True)
conn, peer = srv.accept()
print("visited", flush=True)
"""


def _texts(job: Job) -> list[str]:
    return list(LogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


def _probe(tenant: Tenant, name: str, targets: list[tuple[str, str, int]]) -> dict[str, str]:
    document = python_spec(name, PROBE, env={"TARGETS": json.dumps(targets)})
    job = job_submit(tenant=tenant, user=member(tenant), document=document)
    job = wait_status(job, "succeeded", timeout=90, logs=True)
    [line] = [t for t in _texts(job) if t.startswith("probe ")]
    return dict(json.loads(line.removeprefix("probe ")))


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_job_reaches_no_platform_service_and_no_other_tenants_pod(engine: KubeSim) -> None:
    if not engine.cluster.network.available:
        pytest.skip(f"kubesim runs pods without network isolation here: {engine.cluster.network.reason}")
    if not engine.cluster.network.bridge_filtered:
        pytest.skip("br_netfilter is missing here: kubesim enforces no NetworkPolicy")
    victim_tenant, attacker_tenant = make_tenant(), make_tenant()
    victim = job_submit(
        tenant=victim_tenant, user=member(victim_tenant), document=python_spec("victim", SERVE)
    )
    victim = wait_status(victim, "running", timeout=90)
    wait_until(lambda: "serving" in _texts(victim), timeout=90, what="the victim to listen")
    victim_ip = cluster.job_pods(victim)[0]["status"]["podIP"]

    services = {"postgres": 5432, "redis": 6379, "kubesim-api": engine.port}
    assert all(_listening(p) for p in services.values()), (
        "a platform service is down: the test proves nothing"
    )
    targets = [(f"{name}@loopback", "127.0.0.1", port) for name, port in services.items()]
    targets += [(f"{name}@node", engine.node_ip, port) for name, port in services.items()]
    targets += [("other-tenant", victim_ip, 7000)]
    found = _probe(attacker_tenant, "attacker", targets)
    assert found == dict.fromkeys(found, "closed") and len(found) == len(targets), found

    assert _probe(victim_tenant, "neighbour", [("same-tenant", victim_ip, 7000)]) == {"same-tenant": "open"}
    wait_status(victim, "succeeded", timeout=90, logs=True)
    assert "visited" in _texts(victim)

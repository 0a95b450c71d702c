"""A distributed job end to end on kubesim: two learner pods rendezvous through the env the platform sets
(MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and run a real torch.distributed all-reduce over gloo.

Each kubesim pod has its own network namespace and IP; MASTER_ADDR (`<pod>.<svc>.<ns>.svc`) resolves
through kubesim's cluster DNS to learner 0's address, as on a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobs.models import Job, LogLine
from jobs.services import job_submit
from kubesim.testing import KubeSim
from tests.factories import make_tenant, member
from tests.jobs.engine import python_spec, wait_status

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ALL_REDUCE = """
import datetime, os
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value, op=dist.ReduceOp.SUM)
print(f"rank {rank}/{world} all-reduced {value.item():g}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def spec(name: str, script: str, **extra: Any) -> str:
    return python_spec(name, script, **{"cpu": "1", "memory": "1Gi", **extra})


def submit(document: str) -> Job:
    tenant = make_tenant()
    return job_submit(tenant=tenant, user=member(tenant), document=document)


def test_two_learners_all_reduce_over_gloo_with_the_platform_env(engine: KubeSim) -> None:
    job = submit(spec("allreduce", ALL_REDUCE, learners=2))
    job = wait_status(job, "succeeded", timeout=90, logs=True)
    assert job.attempt == 1, "the attempt should not have been requeued"
    for learner in (0, 1):
        texts = list(LogLine.objects.filter(job=job, learner=learner).values_list("text", flat=True))
        reduced = [t for t in texts if "all-reduced" in t]
        assert reduced and reduced[0].startswith(f"rank {learner}/2 "), texts
        assert reduced[0].endswith("all-reduced 3"), texts
    rows = list(job.learner_set.filter(attempt=1).values_list("index", "phase", "exit_code"))
    assert rows == [(0, "Succeeded", 0), (1, "Succeeded", 0)]


RENDEZVOUS = """
import os, socket, time
addr, port, job = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), os.environ["JOB_ID"]
if os.environ["RANK"] == "0":
    server = socket.create_server((addr, port))  # as torch's TCPStore does: EADDRINUSE if taken
    time.sleep(2)  # hold the port while the other job starts
    server.settimeout(30)
    conn, _ = server.accept()
    conn.sendall(job.encode())
    conn.close()
    print(f"rank 0 served {job}", flush=True)
else:
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    met = conn.recv(64).decode()
    print(f"rank 1 met {met}", flush=True)
    assert met == job, f"joined job {met}'s rendezvous instead of {job}'s"
"""


def test_two_distributed_jobs_running_at_once_each_rendezvous_on_their_own_port(engine: KubeSim) -> None:
    """Two two-learner jobs at once: each learner 1 meets its own job's learner 0 (on a shared loopback, one
    fixed MASTER_PORT for every job made the second learner 0 fail to listen and its learner 1 join the
    other job's rendezvous)."""
    jobs = [submit(spec(f"rendezvous-{n}", RENDEZVOUS, cpu="250m", memory="128Mi", learners=2)) for n in "ab"]
    for job in jobs:
        job = wait_status(job, "succeeded", timeout=60, logs=True)
        assert job.attempt == 1
        texts = set(LogLine.objects.filter(job=job).values_list("text", flat=True))
        assert {f"rank 0 served {job.pk}", f"rank 1 met {job.pk}"} <= texts, texts

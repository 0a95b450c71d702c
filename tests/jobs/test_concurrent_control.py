"""Many people stopping many jobs at once while the admission cycle admits them: each write locks only its
job row (jobs/services/locking.py), so the cancels never deadlock with the cycle on the tenant's row (the
cycle admits several jobs in one transaction; a cancel that locked its job, then the tenant, waited on the
cycle holding the tenant while the cycle waited on that job) and every job ends cancelled or cancelling."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.test import Client

from clusterio.capacity import NodeInfo, Resources
from jobs.core.states import JobStatus
from jobs.models import Job
from jobs.scheduling import run_cycle
from portal.celery import app
from tests.factories import make_job, make_tenant, member

JOBS = 100
THREADS = 12  # each thread holds one connection of its own; the server's max_connections is shared
ROOMY = Resources(0, 10_000_000, 100_000_000)


@pytest.mark.django_db(transaction=True)
def test_a_hundred_concurrent_cancels_during_admission_cycles_all_succeed() -> None:
    tenant = make_tenant(
        cpu_millis=10_000_000, memory_mib=100_000_000, max_running_jobs=1000, max_queued_jobs=1000
    )
    owner = member(tenant, "owner")
    jobs = [make_job(tenant, owner) for _ in range(JOBS)]
    login = Client()
    login.force_login(owner)
    assert login.get("/api/v1/jobs/").status_code == 200  # the schema checker loads once, not in threads
    answers: dict[str, int] = {}
    cycles_done = threading.Event()
    admitted: list[str] = []

    def cancel(pk: str) -> None:
        client = Client()
        client.cookies = login.cookies
        try:
            answers[pk] = client.post(f"/api/v1/jobs/{pk}/cancel/").status_code
        finally:
            connection.close()

    def cycles() -> None:
        """The admission cycle, as beat runs it, admitting whatever is still queued meanwhile."""
        try:
            while not cycles_done.is_set():
                admitted.extend(run_cycle(nodes=[NodeInfo("cpu-0", True, None, ROOMY, ROOMY)]).admitted)
        finally:
            connection.close()

    scheduler = threading.Thread(target=cycles, name="cycles")
    scheduler.start()
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(cancel, [job.pk for job in jobs]))
    finally:
        cycles_done.set()
        scheduler.join(timeout=60)
        app.control.purge()  # the launches and teardowns the test queued, for no worker
    assert not scheduler.is_alive()
    assert admitted, "the cycle admitted none of the jobs while they were being cancelled"
    assert sorted(set(answers.values())) == [200], {pk: s for pk, s in answers.items() if s != 200}
    statuses = dict(Job.objects.values_list("pk", "status"))
    for job in jobs:
        assert statuses[job.pk] in (JobStatus.CANCELLED, JobStatus.CANCELLING), (job.pk, statuses[job.pk])

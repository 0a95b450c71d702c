"""The web process's body handling in-process (portal/web.py, portal/asgi_body.py): the lazy receive queue
hands a spooled body out a piece at a time, or hands the file itself to Django's handler, which then reads
it without asking receive() for a body. The real process is exercised by tests/jobs/test_uploads.py."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from typing import Any

import pytest

from jobs.artifacts.tokens import HEADER, mint_token
from jobs.core.states import JobStatus
from jobs.models import Job, JobEvent
from jobs.services import job_submit
from portal.asgi_body import EXTENSION, spooled_asgi_application
from portal.web import PIECE, LazyBodyQueue
from tests.factories import make_tenant, member


def test_the_queue_hands_out_the_spooled_body_a_piece_at_a_time_and_then_the_disconnect() -> None:
    data = os.urandom(PIECE * 3 + 123)
    with tempfile.TemporaryFile() as spool:
        spool.write(data)
        spool.seek(0)
        queue = LazyBodyQueue(spool)
        queue.put_nowait({"type": "http.request", "body": b"", "more_body": False})  # daphne's own: dropped

        async def drain() -> tuple[list[dict[str, Any]], dict[str, Any]]:
            messages = [await queue.get()]
            while messages[-1]["more_body"]:
                messages.append(await queue.get())
            queue.put_nowait({"type": "http.disconnect"})
            return messages, await queue.get()

        messages, last = asyncio.run(drain())
    assert b"".join(m["body"] for m in messages) == data
    assert [len(m["body"]) for m in messages] == [PIECE, PIECE, PIECE, 123]
    assert [m["more_body"] for m in messages] == [True, True, True, False]
    assert last == {"type": "http.disconnect"}


@pytest.mark.django_db(transaction=True)
def test_djangos_handler_reads_the_offered_file_and_never_asks_receive_for_the_body() -> None:
    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document="name: b\nimage: python:3.11\ncommand: [x]\n"
    )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, attempt=1)
    report = json.dumps({"exit_code": 0, "files": 3, "bytes": 7, "checkpoint_bytes": 0}).encode()
    application = spooled_asgi_application()
    asked: list[str] = []
    sent: list[dict[str, Any]] = []

    async def run() -> None:
        with tempfile.TemporaryFile() as spool:
            spool.write(report)
            queue = LazyBodyQueue(spool)

            async def receive() -> Any:
                asked.append("receive")
                return await queue.get()

            async def send(message: Any) -> None:
                sent.append(message)

            scope = {
                "type": "http",
                "method": "POST",
                "path": f"/api/v1/artifacts/{job.pk}/1/0/results/complete",
                "query_string": b"",
                "headers": [
                    (b"host", b"127.0.0.1"),
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(report)).encode()),
                    (HEADER.lower().encode(), mint_token(job_id=job.pk, attempt=1).encode()),
                ],
                "client": ("127.0.0.1", 1),
                "server": ("127.0.0.1", 80),
                "scheme": "http",
                "extensions": {EXTENSION: {"claim": queue.claim}},
            }
            await asyncio.wait_for(application(scope, receive, send), timeout=30)
            assert queue.claim() is None, "the handler claimed the file"

    asyncio.run(run())
    assert sent[0]["status"] == 200, sent
    assert JobEvent.objects.get(job=job, kind="results").data["files"] == 3
    # receive() may be awaited only by Django's disconnect listener, which the queue never answers with a body.
    assert len(asked) <= 1

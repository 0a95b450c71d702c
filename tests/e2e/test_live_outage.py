"""A job page through a PostgreSQL outage, in Chromium against a real daphne: the server closes the live
socket with 4503 when the database goes away under it, the page reconnects with backoff (failing while the
database is still down), resubscribes from its last sequences once it is back, and shows every line, each
once, without a reload. The outage is a real one: the server runs on a PostgreSQL cluster of the test's own
(tests/own_postgres.py), which the test stops (`pg_ctl stop -m fast`: sessions ended, connections refused)
and starts again; the test's data lives in that cluster."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from jobs.models import Learner
from jobs.services.logs import logs_append
from tests.e2e.conftest import _new_page, login
from tests.e2e.test_live_pages import _in_thread
from tests.factories import make_job, make_tenant, member
from tests.own_postgres import OwnPostgres
from tests.web_process import web_process

pytestmark = pytest.mark.slow

# Counts the page's sockets and records their close codes, so the test can see reconnects happen.
RECORD_SOCKETS = """
(() => {
  const Real = window.WebSocket;
  window.__ws = { opened: 0, closes: [] };
  window.WebSocket = class extends Real {
    constructor(...args) {
      super(...args);
      window.__ws.opened += 1;
      this.addEventListener("close", (event) => window.__ws.closes.push(event.code));
    }
  };
})();
"""


@pytest.fixture
def outage_server(own_postgres: OwnPostgres, own_database: str, tmp_path: Any) -> Iterator[str]:
    """A daphne of this test's own on the own cluster's database, which checks each socket's credentials
    (in the database) every 0.5 s, so a socket notices the outage soon even when no client message comes."""
    env = {
        "DATABASE_URL": own_postgres.url(own_database),
        "KUBECONFIG": "",
        "LIVE_AUTH_RECHECK_SECONDS": "0.5",
    }
    with web_process(own_database, env, tmp_path) as url:
        yield url


def _store(job_id: str, first: int, last: int) -> None:
    records = [(None, f"line {n}") for n in range(first, last + 1)]
    _in_thread(lambda: logs_append(job_id=job_id, attempt=1, learner=0, records=records, cursor=(None, 0)))


def _shown(page: Any) -> list[int]:
    return [int(n) for n in re.findall(r"line (\d+)", page.locator("#log").inner_text())]


def test_job_page_catches_up_after_a_postgresql_outage_without_reload(
    browser: Any, own_postgres: OwnPostgres, outage_server: str
) -> None:
    tenant = make_tenant()
    member(tenant, username="alice")
    job = make_job(tenant=tenant, status="running")
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="p")
    _store(job.pk, 1, 20)
    page = next(pages := _new_page(browser, outage_server))
    try:
        page.add_init_script(RECORD_SOCKETS)
        login(page, "alice")
        page.goto(f"/jobs/{job.pk}/")
        page.wait_for_selector("#job-status[data-live=live]")
        page.wait_for_function("document.querySelector('#log').innerText.includes('line 20')")
        page.evaluate("window.__sameDocument = true")  # gone if the page reloads

        with own_postgres.down():
            # Closed with the platform's code, not left open and silent; the reconnects fail meanwhile.
            page.wait_for_function("window.__ws.closes[0] === 4503", timeout=15_000)
            page.wait_for_function("window.__ws.closes.length >= 2", timeout=15_000)
            assert page.locator("#job-status").get_attribute("data-live") != "live"

        _store(job.pk, 21, 40)  # stored while the page is still backing off: only the backlog brings them
        page.wait_for_selector("#job-status[data-live=live]", timeout=30_000)
        page.wait_for_function("document.querySelector('#log').innerText.includes('line 40')")
        _store(job.pk, 41, 60)  # and live frames flow again on the new socket
        page.wait_for_function("document.querySelector('#log').innerText.includes('line 60')")
        assert _shown(page) == list(range(1, 61))
        assert page.evaluate("window.__sameDocument") is True
        assert page.evaluate("window.__ws.opened") >= 3
    finally:
        next(pages, None)  # closes the context

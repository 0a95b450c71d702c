"""One server (daphne, against the test database) and one headless Chromium for all browser tests; the
live tests get a second server whose cluster is the session's kubesim, with the job engine running.

Tests use `transactional_db`, so what they create is committed where the server process reads it, and it is
flushed after each test (the server clears its content-type caches per request: see `tests/e2e/asgi.py`).
Chromium is Debian's (/usr/bin/chromium); Playwright never downloads a browser.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kubesim.testing import KubeSim
from tests.web_process import web_process

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "tmp"
# Put in a page with add_init_script: records every uPlot chart the page creates in window.__plots, so a test
# can read how many points a chart holds, its scales and its tick labels.
RECORD_PLOTS = """
(() => {
  let wrapped;
  window.__plots = [];
  Object.defineProperty(window, "uPlot", {
    configurable: true,
    get() { return wrapped; },
    set(real) {
      wrapped = function (options, data, el) {
        const plot = new real(options, data, el);
        window.__plots.push(plot);
        return plot;
      };
      Object.assign(wrapped, real);
    },
  });
})();
"""


def _test_database_name(django_db_blocker: Any) -> str:
    from django.db import connection

    with django_db_blocker.unblock():
        return str(connection.settings_dict["NAME"])


@pytest.fixture(scope="package")
def server_url(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A daphne server (HTTP + WebSockets) on a free port, serving the test database; no cluster."""
    name = _test_database_name(django_db_blocker)
    with web_process(name, {"KUBECONFIG": ""}, tmp_path_factory.mktemp("e2e-server")) as url:
        yield url


@pytest.fixture(scope="package")
def live_server_url(
    django_db_setup: None,
    django_db_blocker: Any,
    kubesim_cluster: KubeSim,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """A second daphne server for the live tests: the same test database, and the session's kubesim as its
    cluster (the same KUBECONFIG as the `engine` fixture gives the worker and the watcher in this process).
    Celery tasks it queues go through the shared Redis db to that worker."""
    name = _test_database_name(django_db_blocker)
    env = {"KUBECONFIG": str(kubesim_cluster.kubeconfig_path)}
    with web_process(name, env, tmp_path_factory.mktemp("e2e-live-server")) as url:
        yield url


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One headless Chromium for the browser tests; skipped, with the reason, where Debian's chromium is absent.

    Package-scoped, not session-scoped: Playwright's sync API runs an asyncio loop on the test thread
    while it lives, and later tests that call async_to_sync on that thread would fail.
    """
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (`make browser` installs Debian's chromium)")
    from django.db import connections
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an asyncio loop on this thread; the tests' own ORM calls are plain
    # synchronous code between browser steps, so Django's async-safety guard does not apply to them.
    #
    # While that loop runs, Django's connections on this thread are not the thread's own (asgiref's Local
    # keeps database handles per async context where a loop runs): the thread's own connection, opened
    # before the browser, sits idle meanwhile, and a test's `_end_other_database_sessions` ends it as another
    # session. So both sets are closed, the loop's before it stops and the thread's after: the first test
    # after the browser opens a fresh connection, not the ended one (AdminShutdown under pytest-xdist, where
    # a worker goes on from the browser tests to other tests).
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
                connections.close_all()
        connections.close_all()
    finally:
        if before is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


@contextmanager
def open_page(browser: Any, base_url: str) -> Iterator[Any]:
    """A page in a fresh browser context (no cookies) with `base_url` as its base: a second person's
    browser beside the test's `page`. Closed on exit."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(10000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def _new_page(browser: Any, base_url: str) -> Iterator[Any]:
    with open_page(browser, base_url) as page:
        yield page


@pytest.fixture
def page(browser: Any, server_url: str, transactional_db: None) -> Iterator[Any]:
    """A fresh browser context (no cookies) per test, with the server's URL as its base."""
    yield from _new_page(browser, server_url)


@pytest.fixture
def live_page(browser: Any, live_server_url: str, engine: KubeSim) -> Iterator[Any]:
    """A fresh browser context on the live server, with the job engine running (see `engine` in
    tests/conftest.py: a Celery worker and the watcher in this process, on kubesim). Closed before the
    engine stops and before the database is flushed."""
    yield from _new_page(browser, live_server_url)


def login(page: Any, username: str, password: str = "pw") -> None:  # noqa: S107 (the factories' password)
    """Log in through the login page."""
    page.goto("/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: url.endswith("/") and "/login/" not in url)


def add_member(page: Any, username: str, role: str) -> None:
    """On the tenant page an owner has open: add the existing user `username` with `role`, and wait for the
    page to confirm it."""
    form = page.locator("#member-add")
    form.locator("input[name=username]").fill(username)
    form.locator("select[name=role]").select_option(role)
    form.locator("button[data-action=add-member]").click()
    page.locator(".msg-success", has_text=f"{username} added to ").wait_for()


def create_token(
    page: Any, name: str, *, scope: str | None = None, expires_in_days: int | None = None
) -> str:
    """From any page of a logged-in user: open Tokens, create a token (the form's default scope and expiry
    unless given) and return its secret, which the page shows this once."""
    page.click("nav >> text=Tokens")
    form = page.locator("#token-create")
    form.locator("input[name=name]").fill(name)
    if scope is not None:
        form.locator("select[name=scope]").select_option(scope)
    if expires_in_days is not None:
        form.locator("input[name=expires_in_days]").fill(str(expires_in_days))
    form.locator("button[data-action=create-token]").click()
    return str(page.locator("[data-testid=token-secret]").inner_text()).strip()


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot under tmp/ for a person to look at."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), full_page=True)
    return path

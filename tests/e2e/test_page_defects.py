"""Page defects a person saw in a browser (issue 29 item 8), each checked where a browser shows it: the
portal's own 404 page and favicon, ..."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import login
from tests.factories import make_tenant, member

pytestmark = pytest.mark.slow


def test_a_missing_page_answers_with_the_portals_own_404_and_every_page_has_a_favicon(page: Any) -> None:
    member(make_tenant("vision"), "member", username="alice")
    login(page, "alice")
    response = page.goto("/no-such-page/")
    assert response is not None and response.status == 404
    expect(page.locator("#not-found h1")).to_have_text("Page not found")
    expect(page.locator("header.topbar .brand")).to_be_visible()  # the portal's look, not Django's bare page
    expect(page.locator("#not-found code")).to_have_text("/no-such-page/")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon
    favicon = page.request.get(icon)
    assert favicon.status == 200
    assert favicon.headers["content-type"].startswith("image/svg+xml")

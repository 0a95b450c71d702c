"""The portal's 500 page renders without a request context, as Django's handler500 renders it."""

from django.test import RequestFactory
from django.views.defaults import server_error


def test_the_500_page_is_the_portals_own_and_needs_no_request_context() -> None:
    response = server_error(RequestFactory().get("/jobs/"))
    body = response.content.decode()
    assert response.status_code == 500
    assert 'id="server-error"' in body
    assert "css/app.css" in body and "favicon.svg" in body

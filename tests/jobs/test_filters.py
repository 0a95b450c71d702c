"""The list filters and query parameters (jobs/filters.py): one FilterSet narrows what the scoping helper
already let through, for the API and the jobs page alike, and bad parameters get the field-level messages
clients have always seen."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from jobs.core.states import JobStatus
from jobs.models import Job
from tests.factories import make_job, make_tenant, member
from tests.portal.test_pages import named_job

pytestmark = pytest.mark.django_db


def api(user: Any) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def ids(client: Client, query: str) -> set[str]:
    response = client.get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 200, response.content
    return {job["id"] for job in response.json()["results"]}


def test_the_api_filters_narrow_only_the_jobs_the_caller_may_see() -> None:
    mine, other = make_tenant(), make_tenant()
    user, colleague = member(mine), member(mine)
    own = named_job(mine, user, "resnet big")
    theirs = named_job(mine, colleague, "bert", status=JobStatus.FAILED)
    hidden = named_job(other, colleague, "resnet-hidden")
    client = api(user)
    assert ids(client, "") == {own.pk, theirs.pk}
    assert ids(client, f"tenant={mine.slug}") == {own.pk, theirs.pk}
    assert ids(client, f"tenant={other.slug}") == set(), "a filter never widens the scope"
    assert ids(client, "search=RESNET") == {own.pk}
    assert ids(client, "owner=me") == {own.pk}
    assert ids(client, f"owner={colleague.username}") == {theirs.pk}, hidden.pk
    assert ids(client, "status=failed&search=") == {theirs.pk}, "an empty value filters nothing"
    assert ids(client, "search=%20big") == {own.pk}, "text is matched as sent"
    assert ids(client, "search=big%20") == set()


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        ("status=nonsense", {"status": [f"unknown status; use one of {', '.join(JobStatus.values)}"]}),
        ("status=%00", {"status": ["must not contain NUL characters"]}),
        ("tenant=a%00", {"tenant": ["must not contain NUL characters"]}),
    ],
)
def test_a_bad_list_filter_is_a_field_error(query: str, errors: dict[str, list[str]]) -> None:
    response = api(member(make_tenant())).get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    body = response.json()
    assert body["errors"] == errors
    assert body["detail"] == "; ".join(f"{field}: {m}" for field, msgs in errors.items() for m in msgs)


@pytest.mark.parametrize(
    ("suffix", "errors"),
    [
        ("logs/?after=abc", {"after": ["must be a whole number, got 'abc'"]}),
        ("logs/?limit=0", {"limit": ["must be between 1 and 10000"]}),
        ("logs/?learner=1025", {"learner": ["must be between 0 and 1024"]}),
        ("logs/?tail=5.0", {"tail": ["must be a whole number, got '5.0'"]}),
        ("telemetry/?attempt=x", {"attempt": ["must be a whole number, got 'x'"]}),
        ("telemetry/?limit=10001", {"limit": ["must be between 1 and 10000"]}),
        ("metrics/?name=a%00", {"name": ["must not contain NUL characters"]}),
        ("results/?learner=1", None),
        ("results/?attempt=%2B1", {"attempt": ["must be a whole number"]}),
    ],
)
def test_a_bad_query_parameter_of_a_job_read_is_a_field_error(
    suffix: str, errors: dict[str, list[str]] | None
) -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    response = api(user).get(f"/api/v1/jobs/{job.pk}/{suffix}")
    if errors is None:
        assert response.status_code == 200, response.content
        return
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == errors


def test_empty_query_parameters_of_a_job_read_take_their_defaults() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    response = api(user).get(f"/api/v1/jobs/{job.pk}/logs/?learner=&after=&limit=&tail=")
    assert response.status_code == 200 and response.json() == {"lines": [], "last_seq": 0}
    assert api(user).get(f"/api/v1/jobs/{job.pk}/telemetry/?attempt=&limit=").status_code == 200


def test_the_jobs_page_filters_with_the_same_filterset_and_ignores_a_bad_value() -> None:
    tenant = make_tenant()
    user, colleague = member(tenant), member(tenant)
    named_job(tenant, user, "mine-job")
    named_job(tenant, colleague, "their-job", status=JobStatus.FAILED)
    client = api(user)

    def names(query: str) -> set[str]:
        page = client.get(f"/jobs/?{query}").content.decode()
        return {name for name in ("mine-job", "their-job") if name in page}

    assert names("") == {"mine-job", "their-job"}
    assert names("owner=me") == {"mine-job"}
    assert names("status=failed") == {"their-job"}
    assert names("q=MINE") == {"mine-job"}
    assert names("status=bogus&owner=me") == {"mine-job", "their-job"}, "a bad value drops every filter"
    assert names("search=mine") == {"mine-job", "their-job"}, "the page's name filter is q"
    assert Job.objects.count() == 2

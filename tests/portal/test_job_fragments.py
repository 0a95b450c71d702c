"""The job page's live parts as htmx asks for them: one fragment whose out-of-band elements land in the
page's own containers, rendered from the same templates as the parts in JSON."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.test import Client

from jobs.models import Learner
from jobs.services import job_cancel, job_submit
from tenants.models import Tenant
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db

GOOD_SPEC = "name: hello\nimage: python:3.11\ncommand: [python, -c, 'print(1)']\n"
HTMX = {"HX-Request": "true"}


class _Ids(HTMLParser):
    """Every element's tag by id, and the ids of the out-of-band elements with their swap."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, str] = {}
        self.oob: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if element_id := found.get("id"):
            self.tags[element_id] = tag
            if (swap := found.get("hx-swap-oob")) is not None:
                self.oob[element_id] = swap


def _ids(html: str) -> _Ids:
    parser = _Ids()
    parser.feed(html)
    return parser


def test_htmx_gets_every_job_part_swapped_into_the_pages_own_container(
    signed_in: Client, team: Tenant, alice: User
) -> None:
    job = job_submit(tenant=team, user=alice, document=GOOD_SPEC)
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="hello-0", node="gpu-node-0", phase="Failed")
    job_cancel(job=job, user=alice)
    page = _ids(signed_in.get(f"/jobs/{job.pk}/").content.decode())
    response = signed_in.get(f"/jobs/{job.pk}/parts/", headers=HTMX)
    fragment = response.content.decode()
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    oob = _ids(fragment)
    ids = ["events", "learners", "job-times", "results", "job-borrowed", "job-actions", "job-resources"]
    ids += ["job-info", "job-reason", "job-eta", "job-tuning", "job-telemetry", "job-gpu"]
    assert oob.oob == dict.fromkeys(ids, "innerHTML")
    assert all(page.tags[element_id] == oob.tags[element_id] for element_id in oob.oob)
    parts = signed_in.get(f"/jobs/{job.pk}/parts/").json()
    containers = {"events": "timeline", "learners": "learners", "job-times": "times", "results": "results"}
    containers["job-borrowed"] = "borrowed"  # the actions differ by their forms' masked CSRF tokens
    containers |= {"job-resources": "resources", "job-info": "info", "job-reason": "reason"}
    containers |= {"job-tuning": "tuning", "job-telemetry": "telemetry", "job-gpu": "gpu"}
    assert 'data-action="retry"' in parts["actions"] and 'data-action="retry"' in fragment
    for element_id, name in containers.items():
        assert f'id="{element_id}" hx-swap-oob="innerHTML">{parts[name]}</' in fragment
    assert "event-cancelled" in fragment and "CancelledByUser" in fragment and "gpu-node-0" in fragment


def test_job_parts_vary_on_the_htmx_header(signed_in: Client, team: Tenant, alice: User) -> None:
    job = make_job(team, alice)
    for headers in [{}, HTMX]:
        assert "HX-Request" in signed_in.get(f"/jobs/{job.pk}/parts/", headers=headers)["Vary"]


def test_other_tenant_gets_404_on_job_parts_over_htmx(signed_in: Client) -> None:
    other = make_tenant("beta")
    job = make_job(other, member(other))
    assert signed_in.get(f"/jobs/{job.pk}/parts/", headers=HTMX).status_code == 404

"""The OpenAPI schema: `/api/schema/` is valid OpenAPI 3, Swagger UI at `/api/docs/` loads its files from
this server, and real responses of a live server match the schema (schemathesis fuzzes a few endpoints)."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

from jobs.services import job_submit
from tenants.tokens import token_create
from tests.factories import SPEC, make_tenant, member

API_ROUTES = {
    "/api/v1/jobs/",
    "/api/v1/jobs/{job_id}/",
    "/api/v1/jobs/{job_id}/cancel/",
    "/api/v1/jobs/{job_id}/retry/",
    "/api/v1/jobs/{job_id}/halt/",
    "/api/v1/jobs/{job_id}/resume/",
    "/api/v1/jobs/{job_id}/events/",
    "/api/v1/jobs/{job_id}/logs/",
    "/api/v1/jobs/{job_id}/metrics/",
    "/api/v1/jobs/{job_id}/telemetry/",
    "/api/v1/jobs/{job_id}/results/",
    "/api/v1/jobs/{job_id}/results.zip",
    "/api/v1/jobs/{job_id}/results/{path}",
    "/api/v1/jobs/{job_id}/code/",
    "/api/v1/jobs/compare/",
    "/api/v1/tenants/",
    "/api/v1/tenants/{slug}/",
    "/api/v1/tenants/{slug}/members/",
    "/api/v1/tenants/{slug}/members/{username}/",
    "/api/v1/tenants/{slug}/member-events/",
    "/api/v1/tenants/{slug}/invitations/",
    "/api/v1/tenants/{slug}/invitations/{invitation_id}/",
    "/api/v1/tenants/{slug}/policy/",
    "/api/v1/tenants/{slug}/quota/",
    "/api/v1/tenants/{slug}/secrets/",
    "/api/v1/tenants/{slug}/secrets/{name}/",
    "/api/v1/tenants/{slug}/secret-events/",
    "/api/v1/tenants/{slug}/registries/",
    "/api/v1/tenants/{slug}/registries/{name}/",
    "/api/v1/tenants/{slug}/registry-events/",
    "/api/v1/cluster/",
    "/api/v1/tokens/",
    "/api/v1/tokens/{token_id}/",
    "/api/v1/spec/schema/",
    "/api/v1/spec/validate/",
    "/api/v1/notifications/",
    "/api/v1/notifications/{subscription_id}/",
    "/api/v1/notifications/{subscription_id}/test/",
    "/api/v1/notifications/{subscription_id}/verify/",
    "/api/v1/notifications/{subscription_id}/deliveries/",
}
FUZZED = [
    ("/api/v1/jobs/", "GET"),
    ("/api/v1/tenants/", "GET"),
    ("/api/v1/tokens/", "GET"),
    ("/api/v1/notifications/", "GET"),
    ("/api/v1/jobs/", "POST"),
    ("/api/v1/jobs/compare/", "GET"),
    ("/api/v1/tokens/", "POST"),
    ("/api/v1/jobs/{job_id}/results/", "GET"),
    ("/api/v1/jobs/{job_id}/logs/", "GET"),
    ("/api/v1/tenants/{slug}/policy/", "GET"),
    ("/api/v1/tenants/{slug}/policy/", "PATCH"),
    ("/api/v1/tenants/{slug}/quota/", "GET"),
    ("/api/v1/tenants/{slug}/quota/", "PATCH"),
    ("/api/v1/tenants/{slug}/secrets/", "POST"),
    ("/api/v1/tenants/{slug}/secrets/{name}/", "PUT"),
    ("/api/v1/tenants/{slug}/registries/", "POST"),
    ("/api/v1/tenants/{slug}/registries/{name}/", "PUT"),
    ("/api/v1/spec/validate/", "POST"),
]


def test_schema_endpoint_answers_valid_openapi_3_for_every_api_route() -> None:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == API_ROUTES
    assert set(schema["components"]["securitySchemes"]) == {"bearerAuth", "cookieAuth"}
    error = {"$ref": "#/components/schemas/Error"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for code in ("401", "429"):
                assert operation["responses"][code]["content"]["application/json"]["schema"] == error, (
                    method,
                    path,
                    code,
                )
    submit = schema["paths"]["/api/v1/jobs/"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/yaml", "text/yaml"} <= set(submit)


def test_schema_generates_without_warnings(tmp_path: Path) -> None:
    # The same check as `manage.py spectacular --validate --fail-on-warn` (CI runs it too).
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert "openapi: 3" in (tmp_path / "schema.yml").read_text()


def test_swagger_ui_is_served_from_this_server_not_a_cdn() -> None:
    page = Client().get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/api/schema/" in html and "drf_spectacular_sidecar/swagger-ui-dist/" in html
    assert "http://" not in html and "https://" not in html  # nothing from a CDN: the browser may be offline
    assert finders.find("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_live_responses_match_the_schema(live_server: Any) -> None:
    started = time.monotonic()
    tenant = make_tenant(slug="demo")  # the tenant the schema's request examples name
    user = member(tenant, "owner")
    job_submit(tenant=tenant, user=user, document=SPEC)
    token_create(user=user, name="existing")
    _, secret = token_create(
        user=user, name="schemathesis", scope="admin"
    )  # every operation, as its role allows
    auth = {"Authorization": f"Bearer {secret}"}
    with urllib.request.urlopen(f"{live_server.url}/api/schema/?format=json", timeout=10) as answer:  # noqa: S310
        schema = schemathesis.openapi.from_dict(json.load(answer))
    session = requests.Session()
    checks = [not_a_server_error, response_schema_conformance, status_code_conformance]
    seen: dict[str, set[int]] = {}

    def fuzz(path: str, method: str) -> None:
        operation = schema[path][method]
        label = f"{method} {path}"

        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def exercise(case: schemathesis.Case) -> None:
            response = case.call(base_url=live_server.url, session=session, headers=auth)
            seen.setdefault(label, set()).add(response.status_code)
            case.validate_response(response, checks=checks, headers=auth)

        exercise()

    for path, method in FUZZED:
        fuzz(path, method)

    assert set(seen) == {f"{method} {path}" for path, method in FUZZED}
    assert 200 in seen["GET /api/v1/jobs/"] and 200 in seen["GET /api/v1/tokens/"]
    assert {201, 400} <= seen["POST /api/v1/jobs/"]  # the examples are accepted, fuzzed specs refused
    assert time.monotonic() - started < 60


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/jobs/?tenant=%00",
        "/api/v1/jobs/?owner=a%00",
        "/api/v1/jobs/?search=%00",
        "/api/v1/jobs/{job}/metrics/?name=%00",
    ],
)
def test_nul_in_a_query_parameter_is_a_400_not_a_500(url: str) -> None:
    # Found by schemathesis: PostgreSQL text cannot hold NUL, so filtering on it raised DataError (500).
    tenant = make_tenant()
    user = member(tenant)
    client = Client(raise_request_exception=False)
    client.force_login(user)
    response = client.get(url.format(job=job_submit(tenant=tenant, user=user, document=SPEC).pk))
    assert response.status_code == 400
    assert response.json()["errors"] == {url.split("?")[1].split("=")[0]: ["must not contain NUL characters"]}


@pytest.mark.django_db
@pytest.mark.parametrize("suffix", ["", "logs/", "cancel/"])
def test_nul_in_a_job_id_is_a_404_not_a_500(suffix: str) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(member(make_tenant()))
    send = client.post if suffix == "cancel/" else client.get
    response = send(f"/api/v1/jobs/a%00b/{suffix}")
    assert response.status_code == 404 and response.json() == {"detail": "no such job", "errors": {}}


@pytest.mark.django_db
@pytest.mark.parametrize("body", [{"tenant": "\x00", "spec": SPEC}, {"tenant": ["x"], "spec": SPEC}])
def test_submitting_with_a_nul_or_non_text_tenant_is_a_400(body: dict[str, Any]) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(member(make_tenant()))
    response = client.post("/api/v1/jobs/", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["errors"] == {
        "tenant": ["must be a tenant's slug"]
    }
    response = client.post("/api/v1/jobs/?tenant=%00", "name: x", content_type="text/yaml")
    assert response.status_code == 400 and "tenant" in response.json()["errors"]

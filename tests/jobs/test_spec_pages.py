"""The spec reference where users meet it: the JSON Schema endpoint, the validation endpoint the editor
calls, the /spec/ page (every field, every link answering), its links from the submit page and the API
description, and the error-to-line locator."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from jobs.core.spec.json_schema import json_schema
from jobs.core.spec.locate import error_lines
from jobs.core.spec.reference import rows
from jobs.models import Job
from tests.factories import make_tenant, member

pytestmark = pytest.mark.django_db

GOOD = "name: mnist\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\n"
BAD = """name: mnist
image: pytorch/pytorch:2.3
command: [python, train.py]
resources:
  gpus: lots
  cpuz: 2
volumes:
  - name: d
    kind: data
    type: pvc
    mount_path: /d
"""


def logged_in() -> Client:
    client = Client()
    client.force_login(member(make_tenant()))
    return client


def test_the_json_schema_is_served_without_login() -> None:
    response = Client().get("/api/v1/spec/schema/")
    assert response.status_code == 200
    assert response.json() == json_schema()


def test_validate_reports_each_field_error_with_its_line_and_stores_nothing() -> None:
    response = logged_in().post("/api/v1/spec/validate/", BAD, content_type="application/yaml")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["valid"] is False and body["spec"] is None
    assert "whole number" in body["errors"]["resources.gpus"][0]
    assert "did you mean 'cpu'" in body["errors"]["resources.cpuz"][0]
    assert body["lines"] == {"resources.gpus": 5, "resources.cpuz": 6, "volumes[0].claim": 8}
    assert not Job.objects.exists()


def test_validate_returns_the_normalized_spec_of_a_valid_one_sent_as_json() -> None:
    response = logged_in().post(
        "/api/v1/spec/validate/",
        {"spec": {"name": "a", "image": "b", "command": "c"}},
        content_type="application/json",
    )
    body = response.json()
    assert body["valid"] is True and body["source"] == "trainyard"
    assert body["spec"]["command"] == ["/bin/sh", "-c", "c"] and body["errors"] == {}


def test_validate_points_a_yaml_syntax_error_at_its_line() -> None:
    body = (
        logged_in()
        .post("/api/v1/spec/validate/", "name: x\nimage: [\n", content_type="application/yaml")
        .json()
    )
    assert body["valid"] is False and body["lines"] == {"spec": 3}


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"spec": 5}, "spec"), ({"spec": GOOD, "tenant": "x"}, "tenant"), ([1, 2], "spec")],
)
def test_validate_refuses_a_malformed_request_with_a_field_error(payload: Any, field: str) -> None:
    response = logged_in().post("/api/v1/spec/validate/", payload, content_type="application/json")
    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_validate_needs_a_login() -> None:
    response = Client().post("/api/v1/spec/validate/", GOOD, content_type="application/yaml")
    assert response.status_code in (401, 403)


def test_the_spec_page_lists_every_field_and_every_link_on_it_answers() -> None:
    client = logged_in()
    response = client.get("/spec/")
    assert response.status_code == 200
    html = response.content.decode()
    for row in rows():
        assert f'id="{row.anchor}"' in html, row.display
    assert 'id="ffdl-manifests"' in html and "volumes[].secret" in html
    anchors = set(re.findall(r'id="([^"]+)"', html))
    for href in set(re.findall(r'<a [^>]*href="([^"]+)"', html)):
        if href.startswith("#"):
            assert href[1:] in anchors, href
        elif href.startswith("/"):
            assert client.get(href).status_code in (200, 302), href


def test_the_spec_page_needs_a_login() -> None:
    response = Client().get("/spec/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_submit_page_links_to_the_reference_and_gives_the_editor_its_endpoints() -> None:
    html = logged_in().get("/jobs/new/").content.decode()
    assert 'href="/spec/"' in html
    assert (
        'data-schema-url="/api/v1/spec/schema/"' in html
        and 'data-validate-url="/api/v1/spec/validate/"' in html
    )


def test_the_api_description_links_to_the_reference() -> None:
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert "/spec/" in schema["info"]["description"] and "docs/spec.md" in schema["info"]["description"]
    submit = schema["paths"]["/api/v1/jobs/"]["post"]["description"]
    assert "/spec/" in submit and "docs/spec.md" in submit
    assert "/api/v1/spec/schema/" in schema["paths"] and "/api/v1/spec/validate/" in schema["paths"]


def test_the_ffdl_example_links_to_a_section_that_exists() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    manifest = (root / "examples" / "specs" / "ffdl-manifest.yml").read_text()
    assert "docs/spec.md#ffdl-manifests" in manifest
    assert "\n## FfDL manifests\n" in (root / "docs" / "spec.md").read_text()


def test_error_lines_find_nested_list_and_quoted_paths_and_a_missing_fields_parent() -> None:
    text = "env:\n  '1 BAD': x\nvolumes:\n  - name: a\n  - name: b\n    bucket: [\n"
    assert error_lines(text, ["volumes[1].name"]) == {}  # not YAML: nothing found
    text = "env:\n  '1 BAD': x\nvolumes:\n  - name: a\n  - name: b\n    kind: data\n"
    found = error_lines(
        text, ["env.'1 BAD'", "volumes[1].kind", "volumes[1].claim", "image", "volumes[7].name"]
    )
    assert found == {"env.'1 BAD'": 2, "volumes[1].kind": 6, "volumes[1].claim": 5, "volumes[7].name": 3}


def test_error_lines_do_not_read_a_text_too_long_to_be_a_spec() -> None:
    from jobs.core.spec.locate import MAX_TEXT

    text = "name: x\n" + "#" * MAX_TEXT
    assert error_lines(text, ["name"]) == {}
    assert error_lines(text[:200], ["name"]) == {"name": 1}

"""The response check every API test runs through (tests/api_schema.py, wired in by tests/conftest.py): it
passes what the schema documents and fails, readably, on what it does not."""

from __future__ import annotations

import json

import pytest

from tests.api_schema import SchemaDrift, check_body, schema_path

ERROR = json.dumps({"detail": "no such job", "errors": {}}).encode()


def test_a_documented_error_body_passes() -> None:
    check_body("GET", "/api/v1/jobs/{job_id}/logs/", 404, "application/json", ERROR)


def test_a_body_missing_a_required_key_fails_naming_the_key() -> None:
    body = json.dumps({"lines": []}).encode()
    with pytest.raises(SchemaDrift, match=r"GET /api/v1/jobs/\{job_id\}/logs/ answered 200: .*'last_seq'"):
        check_body("GET", "/api/v1/jobs/{job_id}/logs/", 200, "application/json", body)


def test_a_value_of_the_wrong_type_fails_naming_where() -> None:
    body = json.dumps({"detail": "x", "errors": {"name": "not a list"}}).encode()
    with pytest.raises(SchemaDrift, match=r"at \$\.errors\.name: 'not a list' is not of type 'array'"):
        check_body("GET", "/api/v1/jobs/{job_id}/logs/", 404, "application/json", body)


def test_an_undocumented_status_code_fails() -> None:
    with pytest.raises(SchemaDrift, match="status 409 is not documented"):
        check_body("GET", "/api/v1/jobs/{job_id}/logs/", 409, "application/json", ERROR)


def test_an_undocumented_content_type_fails() -> None:
    with pytest.raises(SchemaDrift, match="content type 'text/html' is not documented"):
        check_body("GET", "/api/v1/jobs/{job_id}/logs/", 404, "text/html", b"<h1>Not Found</h1>")


def test_a_body_where_the_schema_documents_none_fails() -> None:
    with pytest.raises(SchemaDrift, match="documents no body"):
        check_body("DELETE", "/api/v1/jobs/{job_id}/", 204, "application/json", b"{}")


def test_a_null_nested_object_passes_only_where_the_schema_allows_it() -> None:
    # JobDetail.code is nullable (a job without code); JobDetail.resources is not.
    detail: dict[str, object] = {"id": "a", "name": "n", "owner": "u", "tenant": "t", "spec": {}}
    detail |= {"learners": [], "code": None, "duration_seconds": None, "metrics": None}
    body = {**detail, "resources": {"learners": 1, "gpus": 0, "cpu_millis": 1000, "memory_mib": 512}}
    check_body("GET", "/api/v1/jobs/{job_id}/", 200, "application/json", json.dumps(body).encode())
    refused = json.dumps({**detail, "resources": None}).encode()
    with pytest.raises(SchemaDrift, match=r"at \$\.resources"):
        check_body("GET", "/api/v1/jobs/{job_id}/", 200, "application/json", refused)


@pytest.mark.parametrize(
    ("path", "template"),
    [
        ("/api/v1/jobs/abc/results/sub/dir/file.txt", "/api/v1/jobs/{job_id}/results/{path}"),
        ("/api/v1/tokens/7/", "/api/v1/tokens/{token_id}/"),
        ("/api/v1/artifacts/abc/0/code", None),  # what learner pods call: not in the schema
        ("/api/v1/nowhere/", None),
    ],
)
def test_request_paths_map_to_the_schemas_path_templates(path: str, template: str | None) -> None:
    assert schema_path(path) == template

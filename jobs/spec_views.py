"""The job spec's reference, from the one declared schema (jobs/core/spec/schema/): the JSON Schema at
GET /api/v1/spec/schema/, a validation endpoint for editors (POST /api/v1/spec/validate/), and the /spec/
page. Thin: each calls one pure function of jobs.core.spec and renders it."""

from __future__ import annotations

import re
from typing import Any

import yaml
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.utils.html import escape
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, errors
from common.parsers import BoundedJSONParser, TextParser
from jobs.api import SpecField
from jobs.core.ffdl import FRAMEWORK_IMAGES
from jobs.core.spec import SpecError, parse_spec
from jobs.core.spec.json_schema import json_schema
from jobs.core.spec.locate import error_lines
from jobs.core.spec.reference import FFDL_MAPPING, Row, rows
from jobs.core.spec.schema import SPEC
from tenants.models import TokenScope
from tenants.pages import render_page

_CODE = re.compile(r"`([^`]+)`")
REFERENCE = "The spec's fields are described at /spec/ in the portal and in docs/spec.md."


class SpecSchemaView(ApiView):
    """The JSON Schema (draft 2020-12) of a Trainyard job spec; no login needed."""

    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="spec_schema",
        responses={200: OpenApiTypes.OBJECT, **errors(401, 429)},
        description=f"The JSON Schema (draft 2020-12) of a Trainyard job spec, for editors and scripts. {REFERENCE}",
    )
    def get(self, request: Request) -> Response:
        return Response(json_schema())


class SpecValidateRequestSerializer(serializers.Serializer):
    spec = SpecField(help_text="The job spec, as an object or as YAML/JSON text.")


class SpecValidateSerializer(serializers.Serializer):
    """Whether a spec is valid: its normalized form, or every problem by field path with its line."""

    def get_fields(self) -> dict[str, serializers.Field]:
        # Declared here, not as class attributes: fields named `source` and `errors` would hide the
        # serializer's own attributes of those names.
        return {
            "valid": serializers.BooleanField(),
            "source": serializers.CharField(
                allow_null=True, help_text="`trainyard` or `ffdl`; null when invalid."
            ),
            "spec": serializers.JSONField(
                allow_null=True, help_text="The normalized spec; null when invalid."
            ),
            "errors": serializers.DictField(
                child=serializers.ListField(child=serializers.CharField()),
                help_text="Messages by field path.",
            ),
            "lines": serializers.DictField(
                child=serializers.IntegerField(),
                help_text="The line of the text each field path is on, where it could be found.",
            ),
        }


class SpecValidateView(ApiView):
    """Check a spec without submitting it (the editor calls this as the user types)."""

    token_scopes = {"POST": TokenScope.READ}  # checks a spec, stores nothing

    parser_classes = [BoundedJSONParser, TextParser]

    @extend_schema(
        operation_id="spec_validate",
        request={"application/json": SpecValidateRequestSerializer, "application/yaml": OpenApiTypes.STR},
        responses={200: SpecValidateSerializer, **errors(400, 401, 429)},
        description=(
            "Validate a job spec (Trainyard's or an FfDL manifest) as submit would, without storing anything "
            "and without the tenant's policy and cluster checks (a dry run on the submit page does those). "
            f"Send `{{spec}}` as JSON or the bare YAML text. {REFERENCE}"
        ),
        examples=[
            OpenApiExample(
                "YAML", value="name: mnist\nimage: pytorch/pytorch:2.3\ncommand: [python, train.py]\n",
                media_type="application/yaml", request_only=True,
            )
        ],
    )  # fmt: skip
    def post(self, request: Request) -> Response:
        data = request.data
        if isinstance(data, dict) and "spec" in data:
            unknown = set(data) - {"spec"}
            if unknown:
                raise ValidationError({key: ["unknown field; send 'spec'"] for key in unknown})
            data = data["spec"]
        if not isinstance(data, str | dict):
            raise ValidationError({"spec": ["must be a YAML/JSON text or an object"]})
        try:
            parsed = parse_spec(data)
        except SpecError as exc:
            lines: dict[str, int] = (
                error_lines(data, list(exc.errors), exc.errors) if isinstance(data, str) else {}
            )
            result: dict[str, Any] = {
                "valid": False, "source": None, "spec": None, "errors": exc.errors, "lines": lines,
            }  # fmt: skip
        else:
            result = {"valid": True, "source": parsed.source, "spec": parsed.spec, "errors": {}, "lines": {}}
        return Response(SpecValidateSerializer(result).data)


def inline_code(text: str) -> str:
    """Reference text as HTML: escaped, with `code` spans."""
    return mark_safe(_CODE.sub(r"<code>\1</code>", escape(text)))  # noqa: S308 (escaped first)


def _html_row(row: Row) -> dict[str, Any]:
    return {
        "anchor": row.anchor,
        "display": row.display,
        "depth": row.depth,
        "only_for": row.only_for,
        "type_text": row.type_text,
        "default_html": inline_code(row.default_text),
        "limits_html": [inline_code(text) for text in row.facts if not text.startswith("text matches")],
        "pattern": row.field.pattern,
        "example_text": row.example_text,
        "description_html": inline_code(row.field.description),
    }


@require_GET
@login_required
def spec_page(request: HttpRequest) -> HttpResponse:
    """The spec reference: every field with its type, default, limits, example and what the platform
    does with it, and the FfDL mapping."""
    return render_page(
        request,
        "portal/spec.html",
        {
            "rows": [_html_row(row) for row in rows()],
            "ffdl_rows": [{**vars(row), "note_html": inline_code(row.note)} for row in FFDL_MAPPING],
            "framework_images": sorted(FRAMEWORK_IMAGES.items()),
            "example": yaml.safe_dump(SPEC.example, sort_keys=False, default_flow_style=None),
        },
    )

"""The query parameters of the job API and pages, parsed in one way: the jobs list's filters are a
django-filter FilterSet that narrows a queryset `job_list` already scoped (the API and the jobs page share
it), and the per-job reads (logs, metrics, telemetry, results) validate theirs with small serializers.
Every refusal is a field-level message; PostgreSQL text cannot hold NUL, so a NUL is refused before it
reaches a query (where it would be a 500)."""

from __future__ import annotations

import base64
import json
from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from django_filters.utils import translate_validation
from rest_framework import serializers
from rest_framework.request import Request

from jobs.core.compare import DEFAULT_POINTS, MAX_POINTS, MetricChoice, parse_job_ids, parse_metric_choices
from jobs.core.states import JobStatus
from jobs.models import Job
from jobs.selectors import MetricKey

NUL = "must not contain NUL characters"
NO_NUL = {"null_characters_not_allowed": NUL}  # the code of Django's ProhibitNullCharactersValidator


class StatusField(django_filters.fields.ChoiceField):
    """A job status; a NUL is refused as NUL (like every text parameter), before the unknown status."""

    def validate(self, value: Any) -> None:
        if "\x00" in value:
            raise forms.ValidationError(NUL, code="null_characters_not_allowed")
        super().validate(value)


class StatusFilter(django_filters.ChoiceFilter):
    field_class = StatusField


class JobFilter(django_filters.FilterSet):
    """The jobs list's filters in the API: `?tenant=<slug>&status=<status>&owner=<username or me>&search=`.
    Empty values filter nothing; text is matched as sent (not stripped)."""

    tenant = django_filters.CharFilter(field_name="tenant__slug", strip=False, error_messages=NO_NUL)
    status = StatusFilter(
        choices=JobStatus.choices,
        empty_label="Any status",
        error_messages={"invalid_choice": f"unknown status; use one of {', '.join(JobStatus.values)}"},
    )
    owner = django_filters.CharFilter(method="filter_owner", strip=False, error_messages=NO_NUL)
    search = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", strip=False, error_messages=NO_NUL
    )
    experiment = django_filters.CharFilter(field_name="experiment", strip=False, error_messages=NO_NUL)
    tag = django_filters.CharFilter(method="filter_tag", strip=False, error_messages=NO_NUL)

    def filter_tag(self, jobs: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """`tag=a` jobs tagged a; `tag=a,b` jobs tagged both."""
        tags = [part.strip() for part in value.split(",") if part.strip()]
        return jobs.filter(tags__contains=tags) if tags else jobs

    def filter_owner(self, jobs: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """`me` is whoever asks; any other value is a username."""
        username = self.request.user.get_username() if value == "me" else value
        return jobs.filter(owner__username=username)


class JobPageFilter(JobFilter):
    """The jobs page's filters: the same status and owner filters, the name as `q`, and no tenant (the page
    shows the tenant chosen in the session). The page ignores a bad value instead of refusing it."""

    tenant = None
    search = None
    owner = django_filters.ChoiceFilter(choices=[("me", "Me")], empty_label="Anyone", method="filter_owner")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", max_length=100, label="Name")
    experiment = django_filters.CharFilter(field_name="experiment", max_length=100, label="Experiment")
    tag = django_filters.CharFilter(method="filter_tag", max_length=200, label="Tag")


def filtered_jobs(request: Request, jobs: QuerySet[Job]) -> QuerySet[Job]:
    """`jobs` (already scoped) narrowed by the request's JobFilter parameters; a bad one is a 400."""
    filters = JobFilter(request.query_params, queryset=jobs, request=request)
    if not filters.is_valid():
        raise translate_validation(filters.errors)
    return filters.qs


class WholeNumberField(serializers.Field):
    """A whole number (as Python's int() reads it) from `low` to `high`; the message quotes what came."""

    def __init__(self, *, low: int, high: int, **kwargs: Any) -> None:
        self.low, self.high = low, high
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        try:
            value = int(data)
        except ValueError as exc:
            raise serializers.ValidationError(f"must be a whole number, got {data!r}") from exc
        if not self.low <= value <= self.high:
            raise serializers.ValidationError(f"must be between {self.low} and {self.high}")
        return value

    def to_representation(self, value: int) -> int:
        return value


class DigitsField(serializers.Field):
    """A count of at most nine ASCII digits (no sign, no exponent, no other script's digits)."""

    def to_internal_value(self, data: Any) -> int:
        if not (data.isascii() and data.isdigit()) or len(data) > 9:
            raise serializers.ValidationError("must be a whole number")
        return int(data)

    def to_representation(self, value: int) -> int:
        return value


class TextField(serializers.CharField):
    """Text matched as sent (not stripped); a NUL is refused with the same message as in the FilterSet."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if "\x00" in str(data):
            raise serializers.ValidationError(NUL)
        return str(super().to_internal_value(data))


class SubmitQuery(serializers.Serializer):
    """The `?tenant=` of a submission whose body names no tenant (a bare YAML spec, say)."""

    tenant = TextField(required=False)


class LogQuery(serializers.Serializer):
    """job_logs' keyword arguments: a page forward from a sequence number, or the last `tail` lines."""

    learner = WholeNumberField(low=0, high=1024, required=False)
    after = WholeNumberField(low=0, high=2**62, default=0)
    limit = WholeNumberField(low=1, high=10000, default=1000)
    tail = WholeNumberField(low=1, high=10000, required=False)


MAX_BUCKETS = 5000
MAX_METRIC_PAGE = 10000


def metric_cursor(direction: str, key: MetricKey) -> str:
    """The opaque `cursor` of the metrics API: a page after (`a`) or before (`b`) the point `key`."""
    text = json.dumps([direction, key.name, key.x, key.id], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


class MetricCursorField(serializers.Field):
    """A `cursor` the metrics API gave in a `next` or `previous` link: (direction, key)."""

    def to_internal_value(self, data: Any) -> tuple[str, MetricKey]:
        text = str(data)
        try:
            decoded = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            direction, name, x, point = decoded
            if direction not in ("a", "b") or not isinstance(name, str) or "\x00" in name:
                raise ValueError(direction)
            if not all(type(n) is int and -(2**63) <= n < 2**63 for n in (x, point)):
                raise ValueError(x)
        except (ValueError, TypeError) as exc:  # binascii.Error and JSONDecodeError are ValueErrors
            raise serializers.ValidationError(
                "not a cursor of this list; follow its next or previous link"
            ) from exc
        return direction, MetricKey(name, x, point)

    def to_representation(self, value: tuple[str, MetricKey]) -> str:
        return metric_cursor(*value)


class MetricQuery(serializers.Serializer):
    """The metrics API's parameters: one metric's points only (`name`); a page of points (`cursor`,
    `page_size`), or each series cut into at most `buckets` step buckets (not both)."""

    name = TextField(required=False)
    cursor = MetricCursorField(required=False)
    page_size = WholeNumberField(low=1, high=MAX_METRIC_PAGE, default=1000)
    buckets = WholeNumberField(low=1, high=MAX_BUCKETS, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "buckets" in attrs and (self.initial_data.get("cursor") or self.initial_data.get("page_size")):
            raise serializers.ValidationError(
                {"buckets": ["downsampled series come whole: leave out cursor and page_size"]}
            )
        return attrs


class MetricsField(serializers.Field):
    """`loss,accuracy` or `loss:min,bleu:max`: the metrics whose last and best value a list shows."""

    def to_internal_value(self, data: Any) -> list[MetricChoice]:
        if "\x00" in str(data):
            raise serializers.ValidationError(NUL)
        try:
            return parse_metric_choices(str(data))
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def to_representation(self, value: list[MetricChoice]) -> str:
        return ",".join(choice.label for choice in value)


class JobIdsField(serializers.Field):
    """`a,b,c`: the jobs to compare, in order, at most ten."""

    def to_internal_value(self, data: Any) -> list[str]:
        if "\x00" in str(data):
            raise serializers.ValidationError(NUL)
        try:
            return parse_job_ids(str(data))
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from exc

    def to_representation(self, value: list[str]) -> str:
        return ",".join(value)


class ListMetricsQuery(serializers.Serializer):
    """The jobs list's metric columns."""

    metrics = MetricsField(required=False)


class CompareQuery(serializers.Serializer):
    """Which jobs to compare, and how many points each curve keeps at most."""

    ids = JobIdsField()
    points = WholeNumberField(low=10, high=MAX_POINTS, default=DEFAULT_POINTS)


class TelemetryQuery(serializers.Serializer):
    """telemetry_list's keyword arguments: one attempt's samples, the newest `limit`."""

    attempt = WholeNumberField(low=0, high=2**31, required=False)
    limit = WholeNumberField(low=1, high=10000, default=2000)


class ResultQuery(serializers.Serializer):
    """Which attempt's and learner's result files; ASCII digits only (other digits were a 500, issue 14.4)."""

    attempt = DigitsField(required=False)
    learner = DigitsField(default=0)


def query_params(request: Request, query: type[serializers.Serializer]) -> dict[str, Any]:
    """The request's query parameters that `query` declares, validated; empty ones count as absent (their
    default, or left out); a bad one is a 400 naming it."""
    checked = query(data=request.query_params)
    checked.is_valid(raise_exception=True)
    return dict(checked.validated_data)

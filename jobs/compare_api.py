"""`GET /api/v1/jobs/compare/?ids=a,b,c`: several jobs side by side (hyperparameters, final metrics and
downsampled curves), as JSON or, with `?format=csv`, as a CSV table of one row per job."""

from __future__ import annotations

import json
from typing import Any

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, api_user, errors
from jobs.comparison import Comparison, MetricSummary, comparison_csv, duration_seconds, job_compare
from jobs.filters import CompareQuery, query_params
from jobs.models import Job
from jobs.serializers import MetricSummarySerializer, NumberListField


class CSVRenderer(BaseRenderer):
    """Renders the CSV text a view hands over; an error (a dict) stays JSON, in the API's one error shape."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        if isinstance(data, str):
            return data.encode("utf-8")
        response = (renderer_context or {}).get("response")
        if response is not None:
            response["Content-Type"] = "application/json"
        return json.dumps(data).encode("utf-8")


class ComparedJobSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField[Job] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    duration_seconds = serializers.SerializerMethodField()
    hyperparameters = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "tenant",
            "status",
            "experiment",
            "tags",
            "duration_seconds",
            "hyperparameters",
        ]

    def get_duration_seconds(self, job: Job) -> float | None:
        return duration_seconds(job)

    def get_hyperparameters(self, job: Job) -> dict[str, Any]:
        return dict((job.spec or {}).get("hyperparameters") or {})


class HyperparameterRowSerializer(serializers.Serializer):
    name = serializers.CharField()
    values = serializers.ListField(child=serializers.JSONField(), help_text="One per job, null where unset.")
    differs = serializers.BooleanField(help_text="The jobs do not all have the same value.")


class MetricRowSerializer(serializers.Serializer):
    name = serializers.CharField()
    mode = serializers.ChoiceField(choices=["min", "max"], help_text="Whether its best value is the lowest.")
    values = serializers.ListField(
        child=MetricSummarySerializer(), help_text="One per job; last and best are null where it has none."
    )


class SeriesSerializer(serializers.Serializer):
    job = serializers.CharField(source="job_id")
    name = serializers.CharField(help_text="The metric as the job reported it (e.g. val_loss).")
    variant = serializers.CharField(help_text="train, val, test, or '' for a metric without a variant.")
    total = serializers.IntegerField(help_text="Points the job reported, in at most `max_points` buckets.")
    step = NumberListField(
        child=serializers.IntegerField(), help_text="Each step bucket's last step (equal-width buckets)."
    )
    time = NumberListField(
        child=serializers.FloatField(),
        help_text="Each bucket's latest point, seconds since the job's first point.",
    )
    value = NumberListField(child=serializers.FloatField(), help_text="Each bucket's mean.")
    min = NumberListField(child=serializers.FloatField(), help_text="Each bucket's lowest value.")
    max = NumberListField(child=serializers.FloatField(), help_text="Each bucket's highest value.")


class ChartSerializer(serializers.Serializer):
    metric = serializers.CharField(help_text="The metric its series are variants of (loss for val_loss).")
    series = SeriesSerializer(many=True)


class ComparisonSerializer(serializers.Serializer):
    """Jobs side by side."""

    jobs = ComparedJobSerializer(many=True)
    hyperparameters = HyperparameterRowSerializer(many=True)
    metrics = MetricRowSerializer(many=True)
    charts = ChartSerializer(many=True)
    max_points = serializers.IntegerField()


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    """The comparison in ComparisonSerializer's shape (the page embeds the same)."""
    ids = [job.pk for job in comparison.jobs]
    return dict(
        ComparisonSerializer(
            {
                "jobs": comparison.jobs,
                "hyperparameters": [
                    {"name": name, "values": values, "differs": differs}
                    for name, values, differs in comparison.hyperparameters
                ],
                "metrics": [
                    {
                        "name": name,
                        "mode": mode,
                        "values": [
                            comparison.summaries.get(job_id, {}).get(name)
                            or MetricSummary(None, None, None, mode)
                            for job_id in ids
                        ],
                    }
                    for name, mode in comparison.metrics
                ],
                "charts": [{"metric": metric, "series": series} for metric, series in comparison.charts],
                "max_points": comparison.max_points,
            }
        ).data
    )


def compare_or_404(request: Any, user: Any) -> Comparison:
    """The comparison the request's `ids` and `points` ask for; 404 when any id is not a job the user may
    see (the same answer whether it exists in another tenant or nowhere)."""
    query = query_params(request, CompareQuery)
    try:
        return job_compare(user=user, job_ids=query["ids"], max_points=query["points"])
    except Job.DoesNotExist as exc:
        raise Http404(f"no such job: {exc.args[0]}") from exc


class JobCompareView(ApiView):
    """Several jobs side by side: `?ids=a,b,c` (at most 10), `&format=csv` for a table of one row per job."""

    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(
        operation_id="jobs_compare",
        parameters=[
            OpenApiParameter("ids", OpenApiTypes.STR, required=True, description="Job ids, comma-separated."),
            OpenApiParameter(
                "points",
                OpenApiTypes.INT,
                required=False,
                description="Most step buckets per curve (10-5000): each a mean, min and max.",
            ),
        ],
        responses={
            (200, "application/json"): ComparisonSerializer,
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="One row per job."),
            **errors(400, 401, 404, 429),
        },
    )
    def get(self, request: Request) -> Response:
        comparison = compare_or_404(request, api_user(request))
        if request.accepted_renderer.format == "csv":
            response = Response(comparison_csv(comparison), content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = 'attachment; filename="comparison.csv"'
            return response
        return Response(comparison_data(comparison))

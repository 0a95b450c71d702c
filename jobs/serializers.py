"""How jobs, events, logs and metrics look in the REST API (read-only shapes; writes go through services)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.api import ResourcesSerializer
from jobs.comparison import duration_seconds
from jobs.models import CodeArchive, Job, JobEvent, Learner, LogLine, MetricSample


class LearnerSerializer(serializers.ModelSerializer):
    class Meta:
        model = Learner
        fields = ["attempt", "index", "pod_name", "node", "phase", "exit_code", "reason"]


class JobResourcesSerializer(ResourcesSerializer):
    """What each learner of a job holds (GPUs, CPU, memory), and how many learners it runs."""

    learners = serializers.IntegerField(help_text="Learner pods the job runs; the amounts are per learner.")


class MetricSummarySerializer(serializers.Serializer):
    """One metric of one job: its latest value (at `step`) and its best, the lowest or highest (`mode`)."""

    last = serializers.FloatField(allow_null=True)
    step = serializers.IntegerField(allow_null=True)
    best = serializers.FloatField(allow_null=True)
    mode = serializers.ChoiceField(choices=["min", "max"])


class JobSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField[Job] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True, help_text="The tenant's slug."
    )
    owner: serializers.SlugRelatedField[Job] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, help_text="The owner's username."
    )
    resources = serializers.SerializerMethodField()
    duration_seconds = serializers.SerializerMethodField(
        help_text="Seconds it has run (started to finished, or to now); null before it starts."
    )
    metrics = serializers.SerializerMethodField(
        help_text="With `?metrics=loss,accuracy`: each chosen metric's last and best value; else null."
    )

    class Meta:
        model = Job
        fields = [
            "id", "name", "tenant", "owner", "status", "reason", "message", "priority", "attempt",
            "max_retries", "queue_position", "eta", "eta_low", "eta_high", "eta_reason", "resources",
            "borrowed", "source", "created_at", "admitted_at", "started_at", "finished_at",
            "experiment", "tags", "duration_seconds", "metrics",
        ]  # fmt: skip

    def get_duration_seconds(self, job: Job) -> float | None:
        return duration_seconds(job)

    @extend_schema_field(serializers.DictField(child=MetricSummarySerializer(), allow_null=True))
    def get_metrics(self, job: Job) -> dict[str, dict[str, object]] | None:
        chosen = getattr(job, "metric_columns", None)
        if chosen is None:
            return None
        found = getattr(job, "metric_summaries", {})
        return {
            choice.name: dict(MetricSummarySerializer(found[choice.name]).data)
            if choice.name in found
            else {"last": None, "step": None, "best": None, "mode": choice.mode}
            for choice in chosen
        }

    @extend_schema_field(JobResourcesSerializer)
    def get_resources(self, job: Job) -> dict[str, int]:
        return {
            "learners": job.learners,
            "gpus": job.gpus,
            "cpu_millis": job.cpu_millis,
            "memory_mib": job.memory_mib,
        }


class JobCodeSerializer(serializers.ModelSerializer):
    """The code ZIP a job was submitted with (its bytes: GET the job's code/)."""

    class Meta:
        model = CodeArchive
        fields = ["sha256", "size", "entries"]


class JobDetailSerializer(JobSerializer):
    learners = serializers.SerializerMethodField()
    code = JobCodeSerializer(read_only=True, allow_null=True)

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "spec", "placements", "learners", "code", "checkpoint_bytes"]

    @extend_schema_field(LearnerSerializer(many=True))
    def get_learners(self, job: Job) -> list[dict[str, object]]:
        rows = job.learner_set.filter(attempt=job.attempt)
        return list(LearnerSerializer(rows, many=True).data)


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["created_at", "kind", "from_status", "to_status", "reason", "message", "data"]


class LogLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = LogLine
        fields = ["learner", "attempt", "seq", "ts", "text"]


class MetricSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = MetricSample
        fields = ["name", "learner", "attempt", "step", "value", "ts", "log_seq"]


class NumberListField(serializers.ListField):
    """A list of numbers the database already typed: passed through as it is (thousands of points per curve
    would otherwise each go through a child field)."""

    def to_representation(self, data: list[Any]) -> list[Any]:
        return list(data)


class MetricSeriesSerializer(serializers.Serializer):
    """One metric of one learner in step buckets of equal width (parallel lists, one entry per bucket that
    holds points; empty buckets are left out)."""

    name = serializers.CharField()
    learner = serializers.IntegerField()
    points = serializers.IntegerField(help_text="The points the buckets hold: all the series has.")
    first_step = serializers.IntegerField(help_text="The metric's first step (of any learner).")
    last_step = serializers.IntegerField(help_text="The metric's last step (of any learner).")
    first_time = serializers.FloatField(
        allow_null=True, help_text="The series' earliest point's time, Unix seconds (null if none has one)."
    )
    step = NumberListField(
        child=serializers.IntegerField(), help_text="Each bucket's last step (the x to draw it at)."
    )
    time = NumberListField(
        child=serializers.FloatField(allow_null=True),
        help_text="Each bucket's latest point's time, Unix seconds (null for points without one).",
    )
    min = NumberListField(child=serializers.FloatField(), help_text="Each bucket's lowest value.")
    max = NumberListField(child=serializers.FloatField(), help_text="Each bucket's highest value.")
    mean = NumberListField(child=serializers.FloatField(), help_text="Each bucket's mean value.")
    count = NumberListField(child=serializers.IntegerField(), help_text="Each bucket's number of points.")

"""The metrics API on a long run: keyset pages that return every point exactly once in (name, step, id)
order, even while points are added; step buckets (min, max, mean) that cover each metric's whole range,
computed in PostgreSQL; field errors for bad parameters; another tenant's job a 404."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client

from jobs.models import Job, MetricSample
from tests.factories import make_job, make_tenant, member

pytestmark = pytest.mark.django_db

ACC = 60_000  # acc: learner 0, steps 0..59,999
LOSS = 30_000  # loss: learners 0 and 1, steps 0..29,999 each (the same steps: ties broken by id)
SPIKE, DIP = 12_345, 23_456  # loss of learner 1 jumps to 1000 at one step and to -5 at another


def api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def bulk_points(job: Job) -> None:
    """120,000 points in three INSERT ... SELECT statements (a log would take minutes to parse). Not
    analysed: the planner may still hold a near-empty table's statistics, as after a flush between browser
    tests, and the bucket query must take the right index anyway."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_metricsample (job_id, learner, attempt, name, step, value, ts, log_seq)
            SELECT %(job)s, 0, 1, 'acc', i, i / %(acc)s::float8, now(), 2 * i + 1
            FROM generate_series(0, %(acc)s - 1) AS i
            """,
            {"job": job.pk, "acc": ACC},
        )
        for learner in (0, 1):
            cursor.execute(
                """
                INSERT INTO jobs_metricsample (job_id, learner, attempt, name, step, value, ts, log_seq)
                SELECT %(job)s, %(learner)s, 1, 'loss', i,
                       CASE WHEN %(learner)s = 1 AND i = %(spike)s THEN 1000
                            WHEN %(learner)s = 1 AND i = %(dip)s THEN -5
                            ELSE 2.0 / (i + 1) END,
                       now(), 2 * i + 2
                FROM generate_series(0, %(loss)s - 1) AS i
                """,
                {"job": job.pk, "learner": learner, "loss": LOSS, "spike": SPIKE, "dip": DIP},
            )


@pytest.fixture
def big() -> tuple[Client, Job]:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    bulk_points(job)
    return api(user), job


def follow(client: Client, url: str) -> tuple[list[dict[str, Any]], int]:
    """Every point from `url` on, following `next` links; and the number of pages read."""
    rows: list[dict[str, Any]] = []
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        rows += body["results"]
        pages += 1
        url = body["next"]
    return rows, pages


def point(row: dict[str, Any]) -> tuple[str, int, int, int]:
    return row["name"], row["learner"], row["step"], row["log_seq"]


def test_pages_return_every_point_of_a_long_run_exactly_once_in_name_step_order(
    big: tuple[Client, Job],
) -> None:
    client, job = big
    rows, pages = follow(client, f"/api/v1/jobs/{job.pk}/metrics/?page_size=10000")
    assert pages == 12 and len(rows) == ACC + 2 * LOSS
    expected = list(
        MetricSample.objects.filter(job=job)
        .order_by("name", "step", "pk")
        .values_list("name", "learner", "step", "log_seq")
    )
    assert [point(row) for row in rows] == expected
    assert len(set(map(point, rows))) == len(rows)
    assert (rows[ACC - 1]["name"], rows[ACC]["name"]) == ("acc", "loss")
    assert rows[-1]["step"] == LOSS - 1, "the points past the old 10,000 limit are all there"

    loss, _ = follow(client, f"/api/v1/jobs/{job.pk}/metrics/?name=loss&page_size=7000")
    assert [point(row) for row in loss] == [p for p in expected if p[0] == "loss"]


def test_a_previous_link_returns_the_page_before(big: tuple[Client, Job]) -> None:
    client, job = big
    first = client.get(f"/api/v1/jobs/{job.pk}/metrics/?page_size=500").json()
    assert first["previous"] is None
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()
    back = client.get(third["previous"]).json()
    assert back["results"] == second["results"]
    assert client.get(back["previous"]).json()["results"] == first["results"]


def test_points_added_while_paging_never_shift_the_pages() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    MetricSample.objects.bulk_create(
        MetricSample(job=job, learner=0, attempt=1, name="loss", step=step, value=1.0, log_seq=step + 1)
        for step in range(100)
    )
    client = api(user)
    first = client.get(f"/api/v1/jobs/{job.pk}/metrics/?page_size=30").json()
    # Meanwhile: a new metric that sorts first, a point at a step already read, and later steps.
    MetricSample.objects.bulk_create(
        [
            MetricSample(job=job, learner=0, attempt=1, name="acc", step=0, value=0.5, log_seq=200),
            MetricSample(job=job, learner=1, attempt=1, name="loss", step=5, value=2.0, log_seq=201),
            *(
                MetricSample(job=job, learner=0, attempt=1, name="loss", step=s, value=1.0, log_seq=s + 1)
                for s in range(100, 110)
            ),
        ]
    )
    rest, _ = follow(client, first["next"])
    seen = [(row["name"], row["learner"], row["step"]) for row in first["results"] + rest]
    assert seen == [("loss", 0, step) for step in range(110)], "no point twice, none skipped"


def test_a_point_without_a_step_is_placed_at_its_log_line() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    MetricSample.objects.bulk_create(
        MetricSample(job=job, learner=0, attempt=1, name="lr", step=step, value=v, log_seq=seq)
        for step, v, seq in [(None, 0.1, 7), (5, 0.2, 8), (None, 0.3, 3)]
    )
    client = api(user)
    page = client.get(f"/api/v1/jobs/{job.pk}/metrics/?page_size=1").json()
    rows, _ = follow(client, page["next"])
    assert [(r["step"], r["log_seq"]) for r in page["results"] + rows] == [(None, 3), (5, 8), (None, 7)]
    series = client.get(f"/api/v1/jobs/{job.pk}/metrics/?buckets=10").json()["series"]
    assert [(s["first_step"], s["last_step"], s["step"], s["mean"]) for s in series] == [
        (3, 7, [3, 5, 7], [0.3, 0.2, 0.1])
    ]


def test_buckets_cover_each_metrics_whole_range_with_its_true_min_and_max(big: tuple[Client, Job]) -> None:
    client, job = big
    response = client.get(f"/api/v1/jobs/{job.pk}/metrics/?buckets=500")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["buckets"] == 500
    series = {(s["name"], s["learner"]): s for s in body["series"]}
    assert list(series) == [("acc", 0), ("loss", 0), ("loss", 1)]
    for (name, learner), s in series.items():
        steps = ACC if name == "acc" else LOSS
        assert s["points"] == steps == sum(s["count"])
        assert len(s["step"]) == 500 and all(len(s[k]) == 500 for k in ("time", "min", "max", "mean"))
        assert (s["first_step"], s["last_step"], s["step"][-1]) == (0, steps - 1, steps - 1)
        assert s["step"] == sorted(s["step"]) and s["count"] == [steps // 500] * 500
        truth = MetricSample.objects.filter(job=job, name=name, learner=learner)
        values = list(truth.values_list("value", flat=True))
        assert (min(s["min"]), max(s["max"])) == (min(values), max(values))
        assert all(low <= mean <= high for low, mean, high in zip(s["min"], s["mean"], s["max"], strict=True))
    spiky = series[("loss", 1)]
    width = LOSS // 500
    assert spiky["max"][SPIKE // width] == 1000 and spiky["min"][DIP // width] == -5
    assert series[("loss", 0)]["max"][SPIKE // width] < 1, "the spike is learner 1's only"
    # The first bucket's mean is the mean of its points (steps 0..width-1), as PostgreSQL computed it.
    assert spiky["mean"][0] == pytest.approx(sum(2.0 / (i + 1) for i in range(width)) / width)

    only = client.get(f"/api/v1/jobs/{job.pk}/metrics/?name=loss&buckets=7").json()["series"]
    assert [(s["name"], s["learner"], len(s["step"]), s["points"]) for s in only] == [
        ("loss", 0, 7, LOSS),
        ("loss", 1, 7, LOSS),
    ]
    assert client.get(f"/api/v1/jobs/{job.pk}/metrics/?name=nothing&buckets=7").json()["series"] == []


def test_a_short_series_has_one_bucket_per_step() -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    MetricSample.objects.bulk_create(
        MetricSample(job=job, learner=0, attempt=1, name="loss", step=step, value=step, log_seq=step + 1)
        for step in range(10, 20)
    )
    (series,) = api(user).get(f"/api/v1/jobs/{job.pk}/metrics/?buckets=1000").json()["series"]
    assert series["step"] == list(range(10, 20)) and series["count"] == [1] * 10
    assert series["min"] == series["max"] == series["mean"] == [float(s) for s in range(10, 20)]


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        ("buckets=0", {"buckets": ["must be between 1 and 5000"]}),
        ("buckets=abc", {"buckets": ["must be a whole number, got 'abc'"]}),
        ("buckets=99999999999999999999", {"buckets": ["must be between 1 and 5000"]}),
        ("buckets=5001", {"buckets": ["must be between 1 and 5000"]}),
        ("page_size=0", {"page_size": ["must be between 1 and 10000"]}),
        ("page_size=10001", {"page_size": ["must be between 1 and 10000"]}),
        ("cursor=abc", {"cursor": ["not a cursor of this list; follow its next or previous link"]}),
        ("cursor=WyJ4IiwibG9zcyIsMSwxXQ", {"cursor": ["not a cursor of this list; follow its next or previous link"]}),
        ("cursor=%00", {"cursor": ["not a cursor of this list; follow its next or previous link"]}),
        ("buckets=10&page_size=5", {"buckets": ["downsampled series come whole: leave out cursor and page_size"]}),
    ],
)  # fmt: skip
def test_a_bad_metrics_parameter_is_a_field_error(query: str, errors: dict[str, list[str]]) -> None:
    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    response = api(user).get(f"/api/v1/jobs/{job.pk}/metrics/?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["errors"] == errors


def test_cursors_with_out_of_range_numbers_are_field_errors() -> None:
    from jobs.filters import metric_cursor
    from jobs.selectors import MetricKey

    tenant = make_tenant()
    user = member(tenant)
    job = make_job(tenant=tenant, owner=user)
    for key in (MetricKey("loss", 2**63, 1), MetricKey("loss\x00", 1, 1)):
        response = api(user).get(f"/api/v1/jobs/{job.pk}/metrics/?cursor={metric_cursor('a', key)}")
        assert response.status_code == 400 and "cursor" in response.json()["errors"]


@pytest.mark.parametrize("query", ["", "?buckets=100", "?page_size=5", "?name=loss&buckets=3"])
def test_other_tenants_job_metrics_are_404(query: str) -> None:
    job = make_job()
    MetricSample.objects.create(job=job, learner=0, attempt=1, name="loss", step=1, value=1.0, log_seq=1)
    outsider = member(make_tenant())
    response = api(outsider).get(f"/api/v1/jobs/{job.pk}/metrics/{query}")
    assert response.status_code == 404
    assert "loss" not in response.content.decode()


@pytest.mark.parametrize("reltuples", [-1, 0, 1e9])
def test_each_bucket_is_one_range_scan_of_the_keyset_index_whatever_the_statistics(reltuples: float) -> None:
    """The planner's statistics may say the table is new, empty (a database just flushed) or huge; each
    bucket must still be read through metric_job_name_x with its step range as the index condition, never
    through another (job, name) index with the range as a filter (a scan of the whole metric per bucket)."""
    from jobs.selectors import _ALL_NAMES, _BUCKETS_SETTINGS, _BUCKETS_SQL

    job = make_job()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_metricsample (job_id, learner, attempt, name, step, value, ts, log_seq)
            SELECT %s, 0, 1, 'loss', i, 1.0 / (i + 1), now(), i + 1 FROM generate_series(0, 19999) AS i
            """,
            [job.pk],
        )
        # Inside the test's transaction, so rolled back with it: what the planner believes of the table.
        cursor.execute(
            "UPDATE pg_class SET reltuples = %s, relpages = 1 WHERE relname = 'jobs_metricsample'",
            [reltuples],
        )
        cursor.execute("DELETE FROM pg_statistic WHERE starelid = 'jobs_metricsample'::regclass")
        for setting in _BUCKETS_SETTINGS:  # as job_metric_buckets runs it
            cursor.execute(setting)
        cursor.execute(
            "EXPLAIN " + _BUCKETS_SQL.replace("{names}", _ALL_NAMES),
            {"job": job.pk, "buckets": 500, "name": None},
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    conditions = [line for line in plan.splitlines() if "COALESCE(step, log_seq) >=" in line]
    assert conditions and all("Cond:" in line for line in conditions), plan
    assert "metric_job_name_x" in plan and "Seq Scan on jobs_metricsample" not in plan, plan

    # And a page from deep inside the run: one descent of the same index, the keyset as its condition.
    from jobs.selectors import MetricKey, job_metric_page

    queries: list[tuple[str, Any]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        queries.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        page = job_metric_page(job=job, after=MetricKey("loss", 15000, 0), size=100)
    assert [row["step"] for row in page.rows] == list(range(15000, 15100))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + queries[-1][0], queries[-1][1])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert plan.splitlines()[1].strip().startswith("->  Index Scan using metric_job_name_x"), plan
    assert "ROW((name)::text, COALESCE(step, log_seq), id) >" in plan and "Sort" not in plan, plan

"""The browser pages over Django's test client: login, tenant scoping (404), permissions (403), submit."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from clusterio.capacity import NodeInfo, Resources
from clusterio.errors import Unavailable
from jobs.artifacts.code import zip_directory_bytes
from jobs.core.spec import parse_spec
from jobs.forms import TEMPLATES, spec_templates
from jobs.models import Job, JobEvent, Learner, LogLine, ResultFile
from jobs.selectors import tenant_gpu_hours_by_day
from jobs.services import job_cancel, job_retry, job_submit
from tenants.models import Tenant
from tests.conftest import ROOT
from tests.factories import FFDL_S3_HOST, allow, make_job, make_tenant, member

pytestmark = pytest.mark.django_db

GOOD_SPEC = "name: hello\nimage: python:3.11\ncommand: [python, -c, 'print(1)']\n"
BAD_SPEC = "name: hello\ncommand: [python]\nresources:\n  gpus: many\n"
NODES = [
    NodeInfo(
        name="gpu-node-0",
        ready=True,
        gpu_type="A100",
        allocatable=Resources(4, 16000, 65536),
        free=Resources(4, 16000, 65536),
    )
]


@pytest.fixture(autouse=True)
def cluster_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster unless a test provides one: pages must still render."""

    def unreachable() -> list[NodeInfo]:
        raise Unavailable("connection refused")

    monkeypatch.setattr("jobs.cluster.nodes", unreachable)


@pytest.fixture
def cluster_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobs.cluster.nodes", lambda: list(NODES))
    monkeypatch.setattr("jobs.cluster.gpu_products", lambda: [n.gpu_type for n in NODES if n.gpu_type])


def named_job(tenant: Tenant, owner: User, name: str, **fields: Any) -> Job:
    """A queued job with a name of its own (the shared factory names every job "train")."""
    job = make_job(tenant, owner, **fields)
    Job.objects.filter(pk=job.pk).update(name=name)
    job.name = name
    return job


def _html(response: Any) -> str:
    return str(response.content.decode())


def test_every_page_renders_for_a_member(signed_in: Client, team: Tenant, alice: User) -> None:
    job = make_job(team, alice)
    for url in [
        "/",
        "/jobs/",
        "/jobs/new/",
        f"/jobs/{job.pk}/",
        f"/jobs/{job.pk}/log.txt",
        f"/jobs/{job.pk}/parts/",
        "/tenants/alpha/",
    ]:
        assert signed_in.get(url).status_code == 200, url


@pytest.mark.parametrize(
    "url", ["/", "/jobs/", "/jobs/new/", "/jobs/abc/", "/jobs/abc/log.txt", "/jobs/abc/parts/", "/tenants/x/"]
)
def test_pages_require_login(client: Client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith(f"/login/?next={url}")


def test_login_page_logs_in_and_logout_logs_out(client: Client, alice: User) -> None:
    assert client.get("/login/").status_code == 200
    response = client.post("/login/", {"username": "alice", "password": "pw"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/").status_code == 302


def test_other_tenant_gets_404_on_job_pages_and_actions(signed_in: Client) -> None:
    other = make_tenant("beta")
    job = make_job(other, member(other))
    assert signed_in.get(f"/jobs/{job.pk}/").status_code == 404
    assert signed_in.get(f"/jobs/{job.pk}/log.txt").status_code == 404
    assert signed_in.get(f"/jobs/{job.pk}/parts/").status_code == 404
    assert signed_in.get(f"/jobs/new/?clone={job.pk}").status_code == 404
    assert signed_in.post(f"/jobs/{job.pk}/cancel/").status_code == 404
    job.status = "failed"
    job.save()
    assert signed_in.post(f"/jobs/{job.pk}/retry/").status_code == 404
    assert signed_in.get("/tenants/beta/").status_code == 404
    assert Job.objects.count() == 1 and Job.objects.get().status == "failed"


def test_viewer_sees_no_cancel_or_retry_and_gets_403_on_post(
    client: Client, team: Tenant, alice: User
) -> None:
    job = make_job(team, alice)
    client.force_login(member(team, "viewer"))
    page = _html(client.get(f"/jobs/{job.pk}/"))
    assert 'data-action="cancel"' not in page and 'data-action="clone"' not in page
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.status == "queued"
    Job.objects.filter(pk=job.pk).update(status="failed")
    assert client.post(f"/jobs/{job.pk}/retry/").status_code == 403
    assert Job.objects.count() == 1


def test_viewer_gets_a_read_only_notice_instead_of_the_editor(client: Client, team: Tenant) -> None:
    client.force_login(member(team, "viewer"))
    page = _html(client.get("/jobs/new/"))
    assert "read-only access" in page and "<textarea" not in page
    assert client.post("/jobs/new/", {"tenant": "alpha", "spec": GOOD_SPEC}).status_code == 403
    assert not Job.objects.exists()


def test_member_cancels_own_job_but_not_a_colleagues(signed_in: Client, team: Tenant, alice: User) -> None:
    mine, theirs = make_job(team, alice), make_job(team, member(team))
    assert 'data-action="cancel"' in _html(signed_in.get(f"/jobs/{mine.pk}/"))
    assert 'data-action="cancel"' not in _html(signed_in.get(f"/jobs/{theirs.pk}/"))
    response = signed_in.post(f"/jobs/{mine.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/jobs/{mine.pk}/"
    mine.refresh_from_db()
    assert mine.status == "cancelled"
    assert signed_in.post(f"/jobs/{theirs.pk}/cancel/").status_code == 403


def test_member_halts_and_resumes_own_job_from_its_page_and_a_viewer_gets_403(
    signed_in: Client, team: Tenant, alice: User
) -> None:
    job = make_job(team, alice)
    page = _html(signed_in.get(f"/jobs/{job.pk}/"))
    assert 'data-action="halt"' in page and 'data-action="resume"' not in page
    response = signed_in.post(f"/jobs/{job.pk}/halt/", follow=True)
    assert f"Job {job.pk} is halted." in _html(response)
    page = _html(signed_in.get(f"/jobs/{job.pk}/"))
    assert 'data-action="resume"' in page and 'data-action="halt"' not in page
    assert "badge-halted" in page and "HaltedByUser" in page
    viewer = Client()
    viewer.force_login(member(team, "viewer"))
    assert viewer.post(f"/jobs/{job.pk}/resume/").status_code == 403
    signed_in.post(f"/jobs/{job.pk}/resume/")
    job.refresh_from_db()
    assert job.status == "requeued" and job.reason == "Resumed"
    again = _html(signed_in.post(f"/jobs/{job.pk}/resume/", follow=True))
    assert f"only a halted job can be resumed; job {job.pk} is requeued" in again


def test_retry_of_a_finished_job_submits_a_new_one(signed_in: Client, team: Tenant, alice: User) -> None:
    job = make_job(team, alice, status="failed")
    assert 'data-action="retry"' in _html(signed_in.get(f"/jobs/{job.pk}/"))
    response = signed_in.post(f"/jobs/{job.pk}/retry/")
    new = Job.objects.exclude(pk=job.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{new.pk}/"


def test_bad_spec_shows_the_field_error_keeps_the_text_and_stores_nothing(signed_in: Client) -> None:
    response = signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": BAD_SPEC, "submit": "1"})
    page = _html(response)
    assert response.status_code == 400
    assert '<code class="field">image</code>' in page
    assert '<code class="field">resources.gpus</code>' in page
    assert "gpus: many" in page  # the editor keeps the text
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_good_spec_redirects_to_the_new_job(signed_in: Client) -> None:
    response = signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": GOOD_SPEC, "submit": "1"})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.name == "hello" and job.tenant.slug == "alpha"
    assert "submitted" in _html(signed_in.get(response["Location"]))


def test_submit_to_a_tenant_i_am_not_in_is_refused(signed_in: Client) -> None:
    make_tenant("beta")
    response = signed_in.post("/jobs/new/", {"tenant": "beta", "spec": GOOD_SPEC, "submit": "1"})
    assert response.status_code == 400 and not Job.objects.exists()


def test_dry_run_says_where_it_would_start_and_stores_nothing(signed_in: Client, cluster_up: None) -> None:
    response = signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": GOOD_SPEC, "dry_run": "1"})
    assert response.status_code == 200
    assert "Would start now on <strong>gpu-node-0</strong>" in _html(response)
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_dry_run_says_why_it_would_wait(signed_in: Client, cluster_up: None) -> None:
    big = GOOD_SPEC + "resources:\n  gpus: 4\nlearners: 2\n"
    page = _html(signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": big, "dry_run": "1"}))
    assert "Would wait: position 1 — " in page
    assert not Job.objects.exists()


def test_dry_run_with_the_cluster_down_says_so(signed_in: Client) -> None:
    page = _html(signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": GOOD_SPEC, "dry_run": "1"}))
    assert "Cluster unreachable" in page and not Job.objects.exists()


def test_dry_run_of_a_bad_spec_shows_the_field_error(signed_in: Client, cluster_up: None) -> None:
    response = signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": BAD_SPEC, "dry_run": "1"})
    assert response.status_code == 400 and '<code class="field">image</code>' in _html(response)


def test_a_gpu_type_the_cluster_lacks_shows_the_known_types(signed_in: Client, cluster_up: None) -> None:
    spec = GOOD_SPEC + "resources: {gpus: 1, gpu_type: H100}\n"
    response = signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": spec, "submit": "1"})
    page = _html(response)
    assert response.status_code == 400 and '<code class="field">resources.gpu_type</code>' in page
    assert "no node of the cluster has GPU type H100; known types: A100" in page
    assert not Job.objects.exists()


def test_dry_run_of_an_alias_starts_on_the_node_of_that_type(signed_in: Client, cluster_up: None) -> None:
    spec = GOOD_SPEC + "resources: {gpus: 1, gpu_type: nvidia-tesla-a100}\n"
    page = _html(signed_in.post("/jobs/new/", {"tenant": "alpha", "spec": spec, "dry_run": "1"}))
    assert "Would start now on <strong>gpu-node-0</strong>" in page


def test_every_offered_template_is_a_valid_spec(signed_in: Client) -> None:
    templates = spec_templates()
    assert set(templates) == {template.key for template in TEMPLATES}
    assert set(templates) == {"pytorch", "two-learners", "ffdl", "train-cpu"}
    for key, (_, text) in templates.items():
        parse_spec(text)
        assert signed_in.get(f"/jobs/new/?template={key}").status_code == 200
    train_cpu = parse_spec(templates["train-cpu"][1]).spec
    assert train_cpu["tuning"]["cpu_millis"] == [1000, 2000]


def test_the_ffdl_template_ships_with_the_repository_and_has_only_the_demo_s3_credentials() -> None:
    from portal import demo_s3

    ffdl = next(template for template in TEMPLATES if template.key == "ffdl")
    assert ffdl.path.resolve().is_relative_to(ROOT / "examples")  # not ../shared, which may be absent
    parsed = parse_spec(spec_templates()["ffdl"][1])
    assert parsed.source == "ffdl" and parsed.spec["resources"]["gpus"] == 0
    demo = {"access_key_id": demo_s3.ACCESS_KEY_ID, "secret_access_key": demo_s3.SECRET_ACCESS_KEY}
    assert parsed.secrets == {"demo-data": demo}  # the embedded S3's public values (it checks none)
    assert demo_s3.SECRET_ACCESS_KEY not in str(parsed.spec)


def test_clone_prefills_the_editor_with_the_jobs_spec(signed_in: Client, team: Tenant, alice: User) -> None:
    job = make_job(team, alice)
    page = _html(signed_in.get(f"/jobs/new/?clone={job.pk}"))
    assert "pytorch/pytorch:2.3" in page and "Clone train" in page


USER_TEXT = """# my comment stays
name: keep-my-text
image: python:3.11
command: python -c 'print(1)'
resources:
  cpu: 3   # three cores, as I wrote it
  memory: 2Gi
"""


def test_clone_prefills_the_text_its_user_wrote_not_the_normalized_spec(
    signed_in: Client, team: Tenant, alice: User
) -> None:
    job = job_submit(tenant=team, user=alice, document=USER_TEXT)
    page = _html(signed_in.get(f"/jobs/new/?clone={job.pk}"))
    assert "# my comment stays" in page and "cpu: 3   # three cores" in page
    assert "cpu_millis" not in page

    job_cancel(job=job, user=alice)
    retry = job_retry(job=Job.objects.get(pk=job.pk), user=alice)
    assert retry.document == USER_TEXT  # a retry keeps the original's text for its own clone


def test_clone_of_an_api_mapping_keeps_its_key_order(team: Tenant, alice: User) -> None:
    document = {"resources": {"memory": "1Gi", "cpu": 1}, "name": "ordered", "image": "python:3.11",
                "command": ["python", "-c", "pass"]}  # fmt: skip
    job = job_submit(tenant=team, user=alice, document=document)
    assert job.document.splitlines()[:3] == ["resources:", "  memory: 1Gi", "  cpu: 1"]


FFDL_MANIFEST = """# an FfDL manifest with its object store's credentials inline
name: ffdl-clone
version: "1.0"
cpus: 1
memory: 1Gb
learners: 1
data_stores:
  - id: store
    type: mount_cos
    training_data: {container: data}
    training_results: {container: results}
    connection:
      auth_url: http://s3.default.svc.cluster.local
      user_name: AKIAEXAMPLEKEY
      password: s3cr3t-value-of-mine
framework:
  name: pytorch
  version: "2.3.0-cuda12.1-cudnn8-runtime"
  command: python -c 'print(1)'
"""


def test_clone_of_an_ffdl_manifest_never_shows_its_credentials(
    signed_in: Client, team: Tenant, alice: User
) -> None:
    allow(team, datastore_hosts=[FFDL_S3_HOST])
    job = job_submit(tenant=team, user=alice, document=FFDL_MANIFEST)
    assert "s3cr3t-value-of-mine" not in job.document and "AKIAEXAMPLEKEY" not in job.document
    assert "# an FfDL manifest" in job.document
    page = _html(signed_in.get(f"/jobs/new/?clone={job.pk}"))
    assert "s3cr3t-value-of-mine" not in page and "REDACTED" in page
    assert 'data-testid="clone-credentials"' in page


def test_tenant_switcher_offers_only_my_tenants(signed_in: Client, alice: User) -> None:
    from tenants.services import membership_set

    gamma = make_tenant("gamma")
    make_tenant("beta")
    membership_set(tenant=gamma, user=alice, role="member")
    named_job(gamma, alice, "gamma-job")
    page = _html(signed_in.get("/"))
    assert 'value="alpha"' in page and 'value="gamma"' in page and 'value="beta"' not in page
    assert signed_in.post("/tenant/switch/", {"tenant": "beta"}).status_code == 404
    response = signed_in.post("/tenant/switch/", {"tenant": "gamma", "next": "/jobs/"})
    assert response.status_code == 302 and response["Location"] == "/jobs/"
    assert "gamma-job" in _html(signed_in.get("/jobs/"))
    evil = signed_in.post("/tenant/switch/", {"tenant": "gamma", "next": "https://evil.example/"})
    assert evil["Location"] == "/"


def test_jobs_list_filters_and_pages(signed_in: Client, team: Tenant, alice: User) -> None:
    colleague = member(team)
    for i in range(30):
        named_job(team, alice, f"mine-{i}")
    named_job(team, colleague, "theirs", status="failed")
    first = _html(signed_in.get("/jobs/"))
    assert "Page 1 of 2" in first
    assert "theirs" not in _html(signed_in.get("/jobs/?owner=me"))
    failed = _html(signed_in.get("/jobs/?status=failed"))
    assert "theirs" in failed and "mine-1" not in failed
    assert "mine-12" in _html(signed_in.get("/jobs/?q=mine-12"))


def test_dashboard_shows_usage_my_jobs_and_the_cluster(signed_in: Client, team: Tenant, alice: User) -> None:
    named_job(team, alice, "waiting-one")
    down = _html(signed_in.get("/"))
    assert "Cluster unreachable" in down and "waiting-one" in down and "Queued jobs" in down


def test_dashboard_lists_the_nodes_free_capacity(signed_in: Client, cluster_up: None) -> None:
    page = _html(signed_in.get("/"))
    assert "gpu-node-0" in page and "4 / 4" in page


def test_job_page_shows_events_and_a_failures_log_tail(signed_in: Client, team: Tenant, alice: User) -> None:
    job = make_job(team, alice, status="failed")
    JobEvent.objects.create(
        job=job,
        kind="transition",
        from_status="running",
        to_status="failed",
        reason="Error",
        message="exit code 1",
        data={"learner": 0, "log_tail": ["Traceback <boom>", "ValueError: bad"]},
    )
    page = _html(signed_in.get(f"/jobs/{job.pk}/"))
    assert "running → failed" in page and "exit code 1" in page
    assert "Traceback &lt;boom&gt;" in page and "ValueError: bad" in page


def test_job_parts_follow_the_jobs_state_for_the_live_page(
    signed_in: Client, team: Tenant, alice: User
) -> None:
    job = job_submit(tenant=team, user=alice, document=GOOD_SPEC)
    page = _html(signed_in.get(f"/jobs/{job.pk}/"))
    assert '"parts": "/jobs/' in page and "event-cancelled" not in page
    before = signed_in.get(f"/jobs/{job.pk}/parts/").json()
    assert before["status"] == "queued" and "waiting for admission" in before["learners"]
    Learner.objects.create(job=job, attempt=1, index=0, pod_name="hello-0", node="gpu-node-0", phase="Failed")
    job_cancel(job=job, user=alice)
    after = signed_in.get(f"/jobs/{job.pk}/parts/").json()
    assert (
        set(after)
        == {"status", "timeline", "learners", "times", "results", "borrowed", "resources", "info", "reason"}
        | {"tuning", "telemetry", "gpu", "actions"}
        and after["status"] == "cancelled"
    )
    assert "CancelledByUser" in after["reason"] and "CancelledByUser" not in before["reason"]
    assert 'data-action="cancel"' in before["actions"] and 'data-action="retry"' in after["actions"]
    assert after["timeline"].count("<li") == before["timeline"].count("<li") + 1
    assert "event-cancelled" in after["timeline"] and "CancelledByUser" in after["timeline"]
    assert "hello-0" in after["learners"] and "gpu-node-0" in after["learners"]
    assert "<dt>Finished</dt><dd>—</dd>" not in after["times"]


def test_log_txt_streams_every_line_of_every_learner(signed_in: Client, team: Tenant, alice: User) -> None:
    job = make_job(team, alice)
    LogLine.objects.bulk_create(
        [
            LogLine(job=job, learner=learner, attempt=1, seq=s, text=f"l{learner}-{s}")
            for learner in (0, 1)
            for s in (1, 2)
        ]
    )
    response = signed_in.get(f"/jobs/{job.pk}/log.txt")
    body = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert response["Content-Type"].startswith("text/plain")
    assert body.splitlines() == [
        "[learner 0] l0-1",
        "[learner 0] l0-2",
        "[learner 1] l1-1",
        "[learner 1] l1-2",
    ]


def test_tenant_page_shows_members_queue_and_gpu_hours(signed_in: Client, team: Tenant, alice: User) -> None:
    named_job(team, alice, "second", queue_position=2, message="waits for GPUs")
    named_job(team, alice, "first", queue_position=1, message="quota full")
    page = _html(signed_in.get("/tenants/alpha/"))
    assert "alice" in page and "Member" in page
    assert page.index("first") < page.index("second") and "waits for GPUs" in page
    assert "GPU-hours per day" in page


def test_gpu_hours_count_learners_times_gpus_over_the_run(team: Tenant, alice: User) -> None:
    now = timezone.now()
    make_job(
        team,
        alice,
        learners=2,
        gpus=3,
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=1),
    )
    make_job(
        team,
        alice,
        learners=1,
        gpus=1,
        started_at=now - timedelta(days=30),
        finished_at=now - timedelta(days=29),
    )
    days = tenant_gpu_hours_by_day(tenant=team)
    assert len(days) == 14 and days[-1][0] == now.date()
    assert sum(h for _, h in days) == pytest.approx(6.0)


def test_job_page_with_a_nul_byte_in_the_id_is_a_404_not_a_crash(client: Client) -> None:
    tenant = make_tenant()
    client.force_login(member(tenant))
    assert client.get("/jobs/a%00b/").status_code == 404


# -- code upload and results on the pages ---------------------------------------------------------------


@pytest.fixture
def artifact_store(settings: Any, tmp_path: Any) -> Any:
    settings.ARTIFACT_STORAGE = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path / "store")},
    }
    return tmp_path / "store"


def test_submit_page_takes_a_code_zip_and_shows_a_bad_one_as_a_field_error(
    signed_in: Client, team: Tenant, artifact_store: Any
) -> None:
    good = io.BytesIO(zip_directory_bytes({"train.py": b"print(1)\n"}))
    good.name = "model.zip"
    response = signed_in.post(
        "/jobs/new/", {"tenant": team.slug, "spec": GOOD_SPEC, "code": good, "submit": "1"}
    )
    assert response.status_code == 302, _html(response)
    job = Job.objects.get()
    assert job.code is not None and job.code.entries == 1

    bad = io.BytesIO(b"this is not a zip")
    bad.name = "model.zip"
    refused = signed_in.post(
        "/jobs/new/", {"tenant": team.slug, "spec": GOOD_SPEC, "code": bad, "submit": "1"}
    )
    assert refused.status_code == 400
    page = _html(refused)
    assert "not a readable ZIP archive" in page and '<code class="field">code</code>' in page
    assert "name: hello" in page, "the spec text is kept"
    assert Job.objects.count() == 1


def test_job_page_lists_result_files_and_the_code(
    signed_in: Client, team: Tenant, alice: User, artifact_store: Any
) -> None:
    job = job_submit(tenant=team, user=alice, document=GOOD_SPEC, code=zip_directory_bytes({"a.py": b"1"}))
    Job.objects.filter(pk=job.pk).update(checkpoint_bytes=5 * 1024 * 1024)
    ResultFile.objects.create(
        job=job, attempt=1, learner=0, path="model.pt", size=2048, sha256="ab" * 32, storage_name="x"
    )
    page = _html(signed_in.get(f"/jobs/{job.pk}/"))
    assert f"/api/v1/jobs/{job.pk}/results/model.pt?attempt=1&amp;learner=0" in page
    assert f"/api/v1/jobs/{job.pk}/results.zip" in page and f"/api/v1/jobs/{job.pk}/code/" in page
    assert "5.0\xa0MB" in page


def test_job_page_and_jobs_list_show_a_queued_jobs_eta(signed_in: Client, team: Tenant, alice: User) -> None:
    start = timezone.now() + timedelta(minutes=25, seconds=30)
    waiting = named_job(
        team, alice, "waiting", eta=start, eta_low=start - timedelta(minutes=10), eta_high=start
    )
    named_job(team, alice, "behind", eta_reason="unknown: far back in the queue")
    named_job(team, alice, "done", status="succeeded", eta_reason="stale")
    detail = _html(signed_in.get(f"/jobs/{waiting.pk}/"))
    stamp = f"{start:%Y-%m-%d %H:%M} UTC (in ~25\xa0minutes)"
    assert f"starts ~{stamp}, between {start - timedelta(minutes=10):%H:%M} and {start:%H:%M} UTC" in detail
    listing = _html(signed_in.get("/jobs/"))
    assert f"starts ~{stamp}" in listing and "start time unknown: far back in the queue" in listing
    assert "stale" not in listing


def test_job_page_and_list_show_a_borrowed_chip_only_on_borrowed_jobs(
    signed_in: Client, team: Tenant, alice: User
) -> None:
    lent = named_job(team, alice, "lent-one", status="running", borrowed=True)
    named_job(team, alice, "own-one", status="running")
    listing = _html(signed_in.get("/jobs/"))
    assert listing.count("chip-borrowed") == 1
    assert "chip-borrowed" in _html(signed_in.get(f"/jobs/{lent.pk}/"))

"""S3 endpoints are judged by address (jobs.core.addresses): every numeric form a resolver accepts and
every address a name resolves to must be public, unless the tenant's policy lists the host; the refusal is a
field error naming the address at submit, and fails the job with an event naming it at launch (the name may
resolve elsewhere by then). A `pvc` volume may not name a claim the platform made for a job."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest

from clusterio import names
from jobs import tasks
from jobs.core.addresses import host_problem, is_public_address, numeric_address
from jobs.core.claims import OBJECT_PREFIX, platform_claim
from jobs.core.states import JobStatus
from jobs.endpoints import resolve_host
from jobs.models import Job
from jobs.scheduling import job_dry_run
from jobs.services import JobRejected, job_submit
from tests.factories import allow, make_tenant, member

BYPASSES = {
    "127.1": "127.0.0.1",
    "0177.0.0.1": "127.0.0.1",
    "127.000.000.001": "127.0.0.1",
    "0x7f.0.0.1": "127.0.0.1",
    "10.1": "10.0.0.1",
    "2130706433": "127.0.0.1",
    "[::ffff:127.0.0.1]": "::ffff:7f00:1",
}
CLUSTER_DNS = {"kubernetes.default": ["10.96.0.1"], "minio.minio": ["10.96.7.7"]}


def dns(table: dict[str, list[str]]) -> Callable[[str], list[str]]:
    return lambda host: table.get(host, [])


@pytest.mark.parametrize(("host", "address"), BYPASSES.items())
def test_every_numeric_form_is_read_as_a_resolver_reads_it_and_refused_naming_the_address(
    host: str, address: str
) -> None:
    assert numeric_address(host) == address
    problem = host_problem(host, dns({}))
    assert problem is not None and f"({address}) is not a public address" in problem


@pytest.mark.parametrize("host", [h for h in BYPASSES if not h.startswith("[")])
def test_the_numeric_forms_are_what_getaddrinfo_itself_gives(host: str) -> None:
    assert resolve_host(host) == [BYPASSES[host]]


def test_localhost_resolves_to_loopback_and_is_refused_with_a_real_resolver() -> None:
    assert set(resolve_host("localhost")) <= {"127.0.0.1", "::1"}
    assert "localhost" in (host_problem("localhost", resolve_host) or "")
    assert "localhost.localdomain" in (host_problem("localhost.localdomain", resolve_host) or "")


@pytest.mark.parametrize(("host", "address"), [(h, a[0]) for h, a in CLUSTER_DNS.items()])
def test_a_name_that_resolves_to_a_cluster_address_is_refused_naming_it(host: str, address: str) -> None:
    assert (
        host_problem(host, dns(CLUSTER_DNS)) == f"{host} resolves to {address}, which is not a public address"
    )


def test_one_private_address_among_public_ones_is_enough_to_refuse() -> None:
    table = {"s3.example.com": ["52.218.1.1", "10.0.0.5", "2600:1f18::1"]}
    assert host_problem("s3.example.com", dns(table)) == (
        "s3.example.com resolves to 10.0.0.5, which is not a public address"
    )
    assert host_problem("s3.example.com", dns({"s3.example.com": ["52.218.1.1", "2600:1f18::1"]})) is None


def test_a_name_that_does_not_resolve_cannot_be_checked_and_is_refused() -> None:
    assert "does not resolve" in (host_problem("s3.nowhere.example", dns({})) or "")


def test_public_addresses_are_global_unicast_only() -> None:
    assert is_public_address("8.8.8.8") and is_public_address("2606:4700:4700::1111")
    for address in ("100.64.0.1", "169.254.169.254", "224.0.0.1", "::1", "fe80::1%eth0", "0.0.0.0", "x"):  # noqa: S104
        assert not is_public_address(address), address
    # IPv6 addresses that carry an IPv4 one: judged by it (mapped, 6to4, NAT64).
    for address in (
        "::ffff:127.0.0.1",
        "2002:7f00:1::1",
        "2002:a00:1::1",
        "64:ff9b::7f00:1",
        "64:ff9b::a9fe:a9fe",
    ):
        assert not is_public_address(address), address
    for address in ("::ffff:8.8.8.8", "2002:808:808::1", "64:ff9b::808:808"):
        assert is_public_address(address), address


# -- at submit, through the services ------------------------------------------------------------------------


def s3(endpoint: str) -> dict[str, Any]:
    return {
        "name": "in",
        "kind": "data",
        "type": "s3",
        "bucket": "b",
        "endpoint": endpoint,
        "mount_path": "/in",
    }


def document(**fields: Any) -> str:
    return json.dumps({"name": "x", "image": "python:3.11", "command": ["python"], **fields})


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """getaddrinfo answering from a table (and numeric hosts as the real one does), the network unasked."""
    table: dict[str, list[str]] = dict(CLUSTER_DNS)
    real = socket.getaddrinfo

    def lookup(host: str, *args: Any, **kwargs: Any) -> list[Any]:
        if host in table:
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 0)) for a in table[host]]
        if numeric_address(host) is not None:
            return real(host, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr("jobs.endpoints.socket.getaddrinfo", lookup)
    return table


@pytest.mark.django_db
@pytest.mark.parametrize("host", [*(h for h in BYPASSES if not h.startswith("[")), *CLUSTER_DNS])
def test_submit_refuses_each_bypass_with_a_field_error_naming_the_address(
    fake_dns: dict[str, list[str]], host: str
) -> None:
    tenant = make_tenant()
    with pytest.raises(JobRejected) as refused:
        job_submit(tenant=tenant, user=member(tenant), document=document(volumes=[s3(f"http://{host}:9000")]))
    [message] = refused.value.errors["volumes[0].endpoint"]
    address = BYPASSES.get(host) or CLUSTER_DNS[host][0]
    assert address in message and "only public S3 endpoints" in message, message
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_submit_names_the_private_address_a_public_looking_name_resolves_to(
    fake_dns: dict[str, list[str]],
) -> None:
    fake_dns["s3.example.com"] = ["10.0.0.5"]
    tenant = make_tenant()
    with pytest.raises(JobRejected) as refused:
        job_submit(
            tenant=tenant, user=member(tenant), document=document(volumes=[s3("https://s3.example.com")])
        )
    assert refused.value.errors["volumes[0].endpoint"][0].startswith(
        "s3.example.com resolves to 10.0.0.5, which is not a public address"
    )


@pytest.mark.django_db
def test_a_host_the_tenants_policy_lists_is_allowed_whatever_it_resolves_to(
    fake_dns: dict[str, list[str]],
) -> None:
    tenant = allow(make_tenant(), datastore_hosts=["minio.minio", "127.1"])
    user = member(tenant)
    assert job_submit(tenant=tenant, user=user, document=document(volumes=[s3("http://minio.minio:9000")])).pk
    assert job_submit(tenant=tenant, user=user, document=document(volumes=[s3("http://127.1:9000")])).pk


@pytest.mark.django_db(transaction=True)
def test_a_name_that_resolves_elsewhere_by_launch_time_fails_the_job_naming_the_address(
    fake_dns: dict[str, list[str]],
) -> None:
    fake_dns["s3.example.com"] = ["52.218.1.1"]
    tenant = make_tenant()
    job = job_submit(
        tenant=tenant, user=member(tenant), document=document(volumes=[s3("https://s3.example.com")])
    )
    Job.objects.filter(pk=job.pk).update(status=JobStatus.STARTING, attempt=1)
    fake_dns["s3.example.com"] = ["169.254.169.254"]  # DNS rebinding: the cloud's metadata service
    assert tasks.launch.apply(args=(job.pk, 1)).get() == []
    job.refresh_from_db()
    assert (job.status, job.reason) == (JobStatus.FAILED, "EndpointRefused")
    assert "volumes[0].endpoint: s3.example.com resolves to 169.254.169.254" in job.message
    event = job.events.get(to_status=JobStatus.FAILED)
    assert event.reason == "EndpointRefused" and "169.254.169.254" in event.message


# -- claims a member may mount ------------------------------------------------------------------------------


def pvc(claim: str) -> dict[str, Any]:
    return {"name": "ck", "kind": "data", "type": "pvc", "claim": claim, "mount_path": "/ck"}


def test_the_platforms_claim_names_are_recognised_with_the_same_prefix_as_clusterio() -> None:
    assert OBJECT_PREFIX == names.OBJECT_PREFIX
    for name in (names.checkpoint_claim_name("abcdefghij", 0), names.checkpoint_claim_name("x" * 80)):
        assert platform_claim(name), name
    assert not platform_claim("mnist-results") and not platform_claim("tyre-data")


@pytest.mark.django_db
@pytest.mark.parametrize("claim", ["ty-abcdefghij-ckpt-0", "ty-abcdefghij-ckpt", "ty-abcdefghij-a1-ds"])
def test_a_pvc_volume_naming_a_claim_the_platform_made_is_a_field_error_at_submit_and_dry_run(
    claim: str,
) -> None:
    tenant = make_tenant()
    user = member(tenant)
    for attempt in (
        lambda: job_submit(tenant=tenant, user=user, document=document(volumes=[pvc(claim)])),
        lambda: job_dry_run(
            tenant=tenant, user=user, document=document(volumes=[pvc(claim)]), nodes=([], "")
        ),
    ):
        with pytest.raises(JobRejected) as refused:
            attempt()
        [message] = refused.value.errors["volumes[0].claim"]
        assert message.startswith(claim) and "pvc volume" in message, message
    assert not Job.objects.exists()
    assert job_submit(tenant=tenant, user=user, document=document(volumes=[pvc("team-datasets")])).pk


@pytest.mark.django_db
def test_another_members_checkpoint_claim_is_refused_unless_the_policy_shares_the_tenants_claims() -> None:
    tenant = make_tenant()
    mine, theirs = member(tenant), member(tenant)
    their_job = job_submit(tenant=tenant, user=theirs, document=document())
    my_job = job_submit(tenant=tenant, user=mine, document=document())
    claim = names.checkpoint_claim_name(their_job.pk, 0)

    def refusal(user: Any, name: str) -> str | None:
        try:
            job_submit(tenant=tenant, user=user, document=document(volumes=[pvc(name)]))
        except JobRejected as exc:
            return exc.errors["volumes[0].claim"][0]
        return None

    assert refusal(mine, claim) == (
        f"{claim} is the checkpoint claim of another member's job; tenant {tenant.slug}'s policy lets a pvc "
        "volume mount no job checkpoint claim"
    )
    allow(tenant, job_claims="own")
    assert "of another member's job" in (refusal(mine, claim) or "")
    assert refusal(mine, names.checkpoint_claim_name(my_job.pk, 0)) is None
    assert refusal(theirs, claim) is None
    assert "of a job;" in (refusal(mine, names.checkpoint_claim_name("nosuchjob1", 0)) or "")
    allow(tenant, job_claims="tenant")
    assert refusal(mine, claim) is None
    assert "platform keeps for its own objects" in (refusal(mine, "ty-abcdefghij-a1-ds") or "")
    other = make_tenant()
    foreign = job_submit(tenant=other, user=member(other), document=document())
    assert "of a job;" in (refusal(mine, names.checkpoint_claim_name(foreign.pk)) or "")


@pytest.mark.django_db
def test_the_api_answers_both_refusals_as_400_field_errors(
    client: Any, fake_dns: dict[str, list[str]]
) -> None:
    tenant = make_tenant()
    client.force_login(member(tenant))
    for volume, field, words in (
        (
            s3("http://0x7f.0.0.1:9000"),
            "volumes[0].endpoint",
            "0x7f.0.0.1 (127.0.0.1) is not a public address",
        ),
        (s3("http://minio.minio:9000"), "volumes[0].endpoint", "minio.minio resolves to 10.96.7.7"),
        (
            pvc("ty-abcdefghij-ckpt-0"),
            "volumes[0].claim",
            "ty-abcdefghij-ckpt-0 is the checkpoint claim of a job",
        ),
    ):
        spec = json.loads(document(volumes=[volume]))
        response = client.post(
            "/api/v1/jobs/", {"tenant": tenant.slug, "spec": spec}, content_type="application/json"
        )
        assert response.status_code == 400, response.content
        assert words in response.json()["errors"][field][0], response.json()
    assert not Job.objects.exists()

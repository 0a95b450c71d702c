"""The Django side of the public-endpoint check (jobs.core.addresses): the resolver, and the check a launch
runs again on a stored job's S3 endpoints (a name may resolve elsewhere than it did at submit: DNS
rebinding), with the tenant's policy as it is then."""

from __future__ import annotations

import socket

from jobs.cluster import job_credentials
from jobs.core.policy import endpoint_problems, secret_endpoints
from jobs.models import Job
from tenants.policy import policy_of


class EndpointRefused(ValueError):
    """A stored job's S3 endpoint that may not be reached at launch; the message names the address."""


def resolve_host(host: str) -> list[str]:
    """Every address getaddrinfo gives for ``host`` (IPv4 and IPv6, in its order, each once); [] when it does
    not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def job_endpoint_problems(job: Job) -> list[str]:
    """Why the job's S3 endpoints may not be reached now, one line per endpoint naming the field and the
    address; [] when every one may."""
    problems = endpoint_problems(
        job.spec,
        policy_of(job.tenant).datastore_hosts,
        tenant=job.tenant.slug,
        resolve=resolve_host,
        secret_endpoints=secret_endpoints(job_credentials(job)),
    )
    return [f"{field}: {message}" for field, messages in problems.items() for message in messages]

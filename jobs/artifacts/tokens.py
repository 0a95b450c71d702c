"""Per-attempt artifact tokens: what a pod presents to fetch its code and upload its results.

A token is signed (django.core.signing, its own salt) and names one job, one attempt and its scopes. It is
good only while that attempt is the job's current, unfinished one, so a token taken from an old pod is
worthless; `code:read` also expires ARTIFACT_CODE_TOKEN_SECONDS after the launch that minted it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core import signing

from jobs.core.states import ACTIVE
from jobs.models import Job

SALT = "trainyard.artifacts"
CODE_READ = "code:read"
RESULTS_WRITE = "results:write"
HEADER = "X-Trainyard-Artifact-Token"


class TokenRefused(Exception):
    """The token is missing, forged, expired, or for another job, attempt or scope."""


@dataclass(frozen=True)
class Grant:
    """What a valid token allows."""

    job: Job
    attempt: int


def mint_token(*, job_id: str, attempt: int) -> str:
    """A token for both scopes of one attempt (it goes into the attempt's Secret)."""
    return signing.dumps({"j": job_id, "a": attempt, "s": [CODE_READ, RESULTS_WRITE]}, salt=SALT)


def check_token(token: str | None, *, job_id: str, attempt: int, scope: str) -> Grant:
    """The grant of a token for `scope` on this job and attempt; TokenRefused otherwise."""
    if not token:
        raise TokenRefused(f"send the attempt's token in the {HEADER} header")
    max_age = settings.ARTIFACT_CODE_TOKEN_SECONDS if scope == CODE_READ else None
    try:
        claims = signing.loads(token, salt=SALT, max_age=max_age)
    except signing.SignatureExpired:
        raise TokenRefused("the token has expired") from None
    except signing.BadSignature:
        raise TokenRefused("the token is not valid") from None
    if claims.get("j") != job_id or claims.get("a") != attempt or scope not in claims.get("s", ()):
        raise TokenRefused("the token is for another job, attempt or scope")
    job = Job.objects.select_related("tenant", "code").filter(pk=job_id).first()
    if job is None or job.attempt != attempt or job.status not in ACTIVE:
        raise TokenRefused("the attempt is over")
    return Grant(job=job, attempt=attempt)

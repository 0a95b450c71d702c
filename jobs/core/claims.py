"""How many checkpoint claims a job holds and how much storage they request (pure: the layout comes in as
plain values, read from the installation's settings by the caller).

A job's claims are made at its first launch and kept across its attempts, halted or finished, until the job
is deleted; they count against the tenant's storage and claim quota all that time, as they count against
its namespace's ResourceQuota (`requests.storage`, `persistentvolumeclaims`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from jobs.core.spec.values import parse_memory_mib

OBJECT_PREFIX = "ty"
"""The prefix of every object name the platform makes (clusterio.names.OBJECT_PREFIX, which jobs.core may not
import; a test keeps the two equal)."""


@dataclass(frozen=True, slots=True)
class ClaimLayout:
    """The installation's checkpoint claims: none (``gib_each`` 0: a node folder or the pod's scratch), one
    per learner, or one the learners share (``shared``); each requests ``gib_each`` GiB (rounded up)."""

    gib_each: int = 0
    shared: bool = False

    def claims(self, learners: int) -> int:
        """How many claims a job of ``learners`` learners holds."""
        if not self.gib_each:
            return 0
        return 1 if self.shared else max(learners, 0)

    def storage_gib(self, learners: int) -> int:
        """The GiB those claims request together."""
        return self.claims(learners) * self.gib_each


NO_CLAIMS = ClaimLayout()


def claim_layout(*, claim_size: str, access_mode: str, host_root: str = "") -> ClaimLayout:
    """The layout the settings describe (CHECKPOINT_CLAIM_SIZE, CHECKPOINT_ACCESS_MODE, CHECKPOINT_HOST_ROOT):
    a node folder or an empty size means no claims. Raises ValueError for a size that is no quantity."""
    if host_root or not claim_size:
        return NO_CLAIMS
    return ClaimLayout(
        gib_each=max(1, math.ceil(parse_memory_mib(claim_size) / 1024)), shared=access_mode == "ReadWriteMany"
    )


def storage_problems(*, claims: int, gib: int, max_claims: int, storage_gib: int) -> list[str]:
    """Why a job whose checkpoint claims are ``claims`` of ``gib`` GiB in all can never run under a claim
    quota of ``max_claims`` and ``storage_gib`` GiB, even with none of it in use; [] when it can."""
    problems = []
    if claims > max_claims:
        problems.append(f"needs {claims} checkpoint claims, the tenant's claim quota is {max_claims}")
    if gib > storage_gib:
        problems.append(
            f"needs {gib} GiB of checkpoint claims, the tenant's storage quota is {storage_gib} GiB"
        )
    return problems


def claim_wait(
    need: tuple[int, int], *, held: Sequence[int], caps: tuple[int | None, int | None]
) -> tuple[str, bool] | None:
    """Why a job whose launch creates ``need`` (claims, GiB) waits under a tenant's claim quota ``caps``
    (None: no cap) while it holds ``held``, and whether it can never fit; None when it fits now."""
    for wanted, have, cap, what in (
        (need[0], held[0], caps[0], "checkpoint claims"),
        (need[1], held[1], caps[1], "GiB of claim storage"),
    ):
        if cap is None or have + wanted <= cap:
            continue
        if wanted > cap:
            return f"needs {wanted} {what}, more than the tenant's storage quota of {cap}", True
        return (
            f"tenant storage quota: {what} {have}+{wanted} would exceed {cap} "
            "(halted and finished jobs keep their claims until deleted)",
            False,
        )
    return None


_CHECKPOINT_CLAIM = re.compile(rf"{OBJECT_PREFIX}-([a-z0-9]+)-ckpt(?:-[0-9]+)?")


def checkpoint_claim_job(name: str) -> str | None:
    """The job whose checkpoint claim ``name`` is (`ty-<job>-ckpt`, `ty-<job>-ckpt-<i>`), or None."""
    match = _CHECKPOINT_CLAIM.fullmatch(name)
    return match.group(1) if match else None


def platform_claim(name: str) -> bool:
    """Whether a claim name is one the platform makes (every object it names starts `ty-`: a job's
    checkpoint claims `ty-<job>-ckpt`, `ty-<job>-ckpt-<i>`), which no `pvc` volume may mount: it holds
    another job's checkpoints, perhaps another member's."""
    return name.startswith(f"{OBJECT_PREFIX}-")

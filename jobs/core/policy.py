"""A tenant's policy applied to one validated spec (pure: plain values in, field errors out).

What is checked: `type: host` volumes only under the tenant's allowed host folders; the image against the
allowed registry patterns (short names read as Docker Hub's, as the container runtime does); S3 endpoints
public unless the tenant lists the host; the priority within what the submitter's role may use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any, Protocol
from urllib.parse import urlsplit


class SpecPolicy(Protocol):
    """What `policy_problems` reads of a policy (tenants.policy.EffectivePolicy has it)."""

    @property
    def host_path_prefixes(self) -> Sequence[str]: ...
    @property
    def image_registries(self) -> Sequence[str]: ...
    @property
    def datastore_hosts(self) -> Sequence[str]: ...
    @property
    def max_priority(self) -> int: ...


def full_image_name(image: str) -> str:
    """The image reference with its registry spelled out, as a container runtime reads it: `python:3.11`
    is `docker.io/library/python:3.11`, `me/app` is `docker.io/me/app`."""
    first, slash, _ = image.partition("/")
    if not slash:
        return f"docker.io/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"docker.io/{image}"


def is_public_host(host: str) -> bool:
    """Whether `host` (a name or an address) is on the public internet as far as its form tells: not
    loopback, private, link-local or reserved, not a single-label or cluster-internal name. (Names that
    resolve to private addresses are the tenant NetworkPolicy's to stop: TENANT_EGRESS_CIDRS.)"""
    host = host.strip("[]").lower().rstrip(".")
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        pass
    if "." not in host:
        return False  # "localhost", "minio", "kubernetes": resolved inside the cluster or on the node
    internal = (".localhost", ".local", ".localdomain", ".internal", ".svc", ".cluster.local", ".home.arpa")
    return not host.endswith(internal)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def policy_problems(spec: Mapping[str, Any], policy: SpecPolicy, *, tenant: str) -> dict[str, list[str]]:
    """Field errors for everything in `spec` that `policy` does not allow ({} when all is allowed)."""
    errors: dict[str, list[str]] = {}
    for i, volume in enumerate(spec.get("volumes", [])):
        if volume["type"] == "host":
            path = volume.get("path") or ""
            if not policy.host_path_prefixes:
                errors[f"volumes[{i}].path"] = [
                    f"host folders are not allowed for tenant {tenant}; a platform admin can allow some in "
                    "the tenant's policy (or use a pvc or s3 volume)"
                ]
            elif not any(_under(path, prefix) for prefix in policy.host_path_prefixes):
                allowed = ", ".join(policy.host_path_prefixes)
                errors[f"volumes[{i}].path"] = [
                    f"{path} is not under the folders tenant {tenant} may mount: {allowed}"
                ]
        if volume["type"] == "s3" and volume.get("endpoint"):
            problem = _endpoint_problem(volume["endpoint"], policy.datastore_hosts, tenant)
            if problem:
                errors[f"volumes[{i}].endpoint"] = [problem]
    image = spec.get("image") or ""
    if policy.image_registries:
        full = full_image_name(image)
        if not any(fnmatchcase(full, p) or fnmatchcase(image, p) for p in policy.image_registries):
            errors["image"] = [
                f"{full} is not from a registry tenant {tenant} may use: {', '.join(policy.image_registries)}"
            ]
    priority = spec.get("priority", 0)
    if priority > policy.max_priority:
        errors["priority"] = [
            f"at most {policy.max_priority} for you in tenant {tenant} (its policy's ceiling)"
        ]
    return errors


def _endpoint_problem(url: str, allowed: Sequence[str], tenant: str) -> str | None:
    host = (urlsplit(url).hostname or "").lower()
    if allowed:
        if any(fnmatchcase(host, pattern) for pattern in allowed):
            return None
        return f"{host} is not among the S3 hosts tenant {tenant} may use: {', '.join(allowed)}"
    if is_public_host(host):
        return None
    return (
        f"{host} is a private, loopback, link-local or cluster-internal address; only public S3 endpoints "
        f"are allowed unless a platform admin lists the host in tenant {tenant}'s policy"
    )

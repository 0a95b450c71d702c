"""Builders for a learner pod's volumes and the container mounts that go with them.

The platform's own (scratch, shared memory, checkpoint, the code folder), the user's (host path, PVC
or an emptyDir the fetch container fills from S3), and a writable RESULT_DIR when nothing else is
mounted there. Volume names and mount paths are checked for duplicates, so a user volume can never
shadow a platform one.
"""

from __future__ import annotations

from kubernetes import client

from clusterio import names
from clusterio.builders.artifacts import model_mount, model_volume
from clusterio.builders.specs import JobPodsSpec, VolumeSpec

SHM_MIN_MIB = 64

Volumes = tuple[list[client.V1Volume], list[client.V1VolumeMount]]


def learner_volumes(spec: JobPodsSpec, index: int) -> Volumes:
    """Build learner `index`'s volumes and its container's mounts, in matching order.

    Platform volumes come first, then the user's in spec order, then the RESULT_DIR fallback.
    Raises ValueError when two volumes share a name or two mounts share a path.
    """
    volumes, mounts = _platform_volumes(spec, index)
    for volume in spec.volumes:
        volumes.append(_user_volume(volume))
        mounts.append(
            client.V1VolumeMount(
                name=_user_volume_name(volume), mount_path=volume.mount_path, read_only=volume.read_only
            )
        )
    if not any(m.mount_path.rstrip("/") == spec.result_dir.rstrip("/") for m in mounts):
        # RESULT_DIR must be writable by the job's non-root user even when no volume is mounted there (an
        # image's root filesystem is not); the launcher uploads what the learner leaves in it.
        volumes.append(client.V1Volume(name="results", empty_dir=client.V1EmptyDirVolumeSource()))
        mounts.append(client.V1VolumeMount(name="results", mount_path=spec.result_dir))
    _check_unique([v.name for v in volumes], "volume name")
    _check_unique([m.mount_path.rstrip("/") for m in mounts], "mount path")
    return volumes, mounts


def fetch_mounts(spec: JobPodsSpec, mounts: list[client.V1VolumeMount]) -> list[client.V1VolumeMount]:
    """The learner's mounts as the fetch init container needs them: the S3 volumes writable.

    The fetch container fills the S3 volumes the learner then reads read-only.
    """
    s3_paths = {v.mount_path for v in spec.volumes if v.kind == "s3"}
    return [
        client.V1VolumeMount(name=m.name, mount_path=m.mount_path, read_only=False)
        if m.mount_path in s3_paths
        else m
        for m in mounts
    ]


def _platform_volumes(spec: JobPodsSpec, index: int) -> Volumes:
    """Scratch, shared memory (half the memory, at least SHM_MIN_MIB), checkpoint and, with artifacts, the code."""
    shm_mib = max(SHM_MIN_MIB, spec.memory_mib // 2)
    volumes = [
        client.V1Volume(name="scratch", empty_dir=client.V1EmptyDirVolumeSource()),
        client.V1Volume(
            name="dshm", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory", size_limit=f"{shm_mib}Mi")
        ),
        _checkpoint_volume(spec, index),
    ]
    mounts = [
        client.V1VolumeMount(name="scratch", mount_path=spec.scratch_dir),
        client.V1VolumeMount(name="dshm", mount_path="/dev/shm"),  # noqa: S108 - the container's own shm
        client.V1VolumeMount(
            name="checkpoint", mount_path=spec.checkpoint_dir, sub_path=spec.checkpoint_sub_path
        ),
    ]
    if spec.artifacts is not None:
        volumes.append(model_volume())
        mounts.append(model_mount(spec.artifacts))
    return volumes, mounts


def _checkpoint_volume(spec: JobPodsSpec, index: int) -> client.V1Volume:
    """The learner's checkpoint claim, else the node folder `checkpoint_host_path`, else an emptyDir."""
    claim = spec.checkpoint_claim_of(index)
    if claim:
        return client.V1Volume(
            name="checkpoint",
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim),
        )
    if spec.checkpoint_host_path:
        return client.V1Volume(
            name="checkpoint",
            host_path=client.V1HostPathVolumeSource(path=spec.checkpoint_host_path, type="DirectoryOrCreate"),
        )
    return client.V1Volume(name="checkpoint", empty_dir=client.V1EmptyDirVolumeSource())


def _user_volume_name(volume: VolumeSpec) -> str:
    """The pod's name for a user volume: prefixed, so it cannot collide with a platform volume."""
    return names.dns_label(f"vol-{volume.name}")


def _user_volume(volume: VolumeSpec) -> client.V1Volume:
    """A user volume's source: the node's folder, a claim, or an emptyDir (S3, filled by fetch)."""
    volume_name = _user_volume_name(volume)
    if volume.kind == "host":
        return client.V1Volume(
            name=volume_name,
            host_path=client.V1HostPathVolumeSource(path=volume.host_path or "", type="Directory"),
        )
    if volume.kind == "pvc":
        return client.V1Volume(
            name=volume_name,
            persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(
                claim_name=volume.claim_name or "", read_only=volume.read_only
            ),
        )
    return client.V1Volume(name=volume_name, empty_dir=client.V1EmptyDirVolumeSource())


def _check_unique(values: list[str], what: str) -> None:
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate {what}: {value}")
        seen.add(value)

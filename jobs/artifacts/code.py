"""Model-definition uploads: a ZIP is checked before anything is stored, then stored once per tenant.

Refused, each with a message for the `code` field: more than CODE_MAX_BYTES, not a ZIP (or a damaged
one), more than CODE_MAX_ENTRIES entries, an entry whose name is absolute, holds `..` or a drive, a
symbolic link, or files that would unpack to more than CODE_MAX_UNPACKED_BYTES. The fetch init container
checks the same again in the pod (clusterio/podkit/fetch.py), where it unpacks.
"""

from __future__ import annotations

import hashlib
import io
import stat
import zipfile
from dataclasses import dataclass
from typing import IO

from django.conf import settings
from django.core.files.base import File
from django.db import IntegrityError, transaction

from jobs.artifacts.storage import artifact_storage, code_name
from jobs.models import CodeArchive
from tenants.models import Tenant


class CodeRejected(Exception):
    """The upload is not an acceptable model definition; the message says why, for the `code` field."""


@dataclass(frozen=True)
class CodeInfo:
    """What a checked ZIP holds."""

    sha256: str
    size: int
    unpacked_size: int
    entries: int


CodeSource = bytes | IO[bytes]


def _as_file(data: CodeSource) -> IO[bytes]:
    return io.BytesIO(data) if isinstance(data, bytes) else data


def inspect_code_zip(data: CodeSource) -> CodeInfo:
    """Check an uploaded ZIP (its bytes, or a seekable file such as Django's uploaded file, read a piece at a
    time and never whole into memory) against the limits and rules above; CodeRejected if it fails one."""
    source = _as_file(data)
    limit = settings.CODE_MAX_BYTES
    size = source.seek(0, io.SEEK_END)
    if size > limit:
        raise CodeRejected(f"is {size} bytes; at most {limit} bytes are accepted")
    if not size:
        raise CodeRejected("is empty; upload a ZIP of your code")
    source.seek(0)
    try:
        archive = zipfile.ZipFile(source)
        members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CodeRejected(f"is not a readable ZIP archive ({exc})") from None
    if len(members) > settings.CODE_MAX_ENTRIES:
        raise CodeRejected(f"has {len(members)} entries; at most {settings.CODE_MAX_ENTRIES}")
    unpacked = 0
    for member in members:
        _check_name(member)
        unpacked += member.file_size
        if unpacked > settings.CODE_MAX_UNPACKED_BYTES:
            raise CodeRejected(
                f"would unpack to more than {settings.CODE_MAX_UNPACKED_BYTES} bytes; make it smaller"
            )
    source.seek(0)
    digest = hashlib.sha256()
    while piece := source.read(1 << 20):
        digest.update(piece)
    source.seek(0)
    return CodeInfo(digest.hexdigest(), size, unpacked, len(members))


def _check_name(member: zipfile.ZipInfo) -> None:
    name = member.filename
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise CodeRejected(f"entry {name!r} has an absolute path; entries must be relative")
    if ".." in parts:
        raise CodeRejected(f"entry {name!r} would land outside the code folder ('..')")
    if stat.S_ISLNK(member.external_attr >> 16):
        raise CodeRejected(f"entry {name!r} is a symbolic link; links are not accepted")
    if any(ord(c) < 32 for c in name):
        raise CodeRejected(f"entry {name!r} has control characters in its name")


def code_archive_store(*, tenant: Tenant, data: CodeSource) -> CodeArchive:
    """Check `data` and keep it for `tenant`: the stored archive of identical content, or a new one.

    The file is written before the row, under its content's name: a transaction that fails afterwards
    leaves at most an unreferenced file that the next identical upload reuses, never a row without a file.
    """
    info = inspect_code_zip(data)
    existing = CodeArchive.objects.filter(tenant=tenant, sha256=info.sha256).first()
    if existing is not None:
        return existing
    name = code_name(tenant.slug, info.sha256)
    storage = artifact_storage()
    if not storage.exists(name):
        saved = storage.save(name, File(_as_file(data), name=name))
        if saved != name:  # a local store that renamed it: keep what it chose
            name = saved
    try:
        with transaction.atomic():
            return CodeArchive.objects.create(
                tenant=tenant,
                sha256=info.sha256,
                size=info.size,
                unpacked_size=info.unpacked_size,
                entries=info.entries,
                storage_name=name,
            )
    except IntegrityError:  # the same content stored by a concurrent upload
        return CodeArchive.objects.get(tenant=tenant, sha256=info.sha256)


def zip_directory_bytes(files: dict[str, bytes]) -> bytes:
    """A ZIP of `files` (relative name → content); for tests and the CLI's `--code DIR` alike."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in sorted(files.items()):
            archive.writestr(name, content)
    return buffer.getvalue()

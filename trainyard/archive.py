"""ZIPs on the client side: a code folder packed for `submit --code`, and downloads unpacked safely."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

# Never shipped with the code: caches, VCS folders and virtual environments are big and not the model.
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", ".mypy_cache", ".pytest_cache", ".venv", "venv"}
)


def pack_code(path: Path) -> bytes:
    """The code at `path` as ZIP bytes: a .zip file as it is, or a folder packed (links are skipped)."""
    if path.is_file():
        data = path.read_bytes()
        if not zipfile.is_zipfile(io.BytesIO(data)):
            raise ValueError(f"{path} is neither a folder nor a ZIP archive")
        return data
    if not path.is_dir():
        raise ValueError(f"{path} does not exist")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not Path(folder, d).is_symlink())
            for name in sorted(files):
                file = Path(folder, name)
                if file.is_symlink() or not file.is_file():
                    continue
                archive.write(file, file.relative_to(path).as_posix())
    return buffer.getvalue()


def unpack(data: bytes, target: Path) -> list[Path]:
    """Unpack a downloaded ZIP into `target`, refusing any entry that would land outside it."""
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    written = []
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.infolist():
            destination = (root / member.filename).resolve()
            if root not in destination.parents and destination != root:
                raise ValueError(f"refusing {member.filename!r}: it would land outside {target}")
            if member.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, destination.open("wb") as sink:
                while chunk := source.read(1 << 20):
                    sink.write(chunk)
            written.append(destination)
    return written

"""requirements.lock, which `make install` installs with uv, is in step with requirements.txt.

Pure: reads the two files (and the torch wheel on this machine kind's disk, where it lies). `make` regenerates
the lock when requirements.txt changes (deploy/local/venv.sh); a requirements.txt committed without it fails here.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements.txt"
LOCK = ROOT / "requirements.lock"
MARK = "# requirements.txt sha256: "
TORCH_WHEELS = Path("/opt/wheels")


def lock_entries() -> dict[str, tuple[Version, list[str]]]:
    """Each package of the lock: its pinned version and its hashes (an entry is a line and its continuations)."""
    entries: dict[str, tuple[Version, list[str]]] = {}
    text = LOCK.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if not line or line[0].isspace() or line.startswith("#"):
            continue
        pin, *options = line.split()
        name, _, version = pin.partition("==")
        assert version, f"the lock pins every package with ==: {line!r}"
        hashes = [option.removeprefix("--hash=") for option in options if option.startswith("--hash=")]
        entries[canonicalize_name(name.split("[")[0])] = (Version(version), hashes)
    return entries


def requirements() -> list[Requirement]:
    lines = (line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def test_the_lock_was_made_from_this_requirements_txt() -> None:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    marks = [line for line in LOCK.read_text().splitlines() if line.startswith(MARK)]
    assert marks == [MARK + digest], "requirements.txt changed since the lock: run `make requirements.lock`"


def test_every_requirement_is_locked_at_a_version_it_allows() -> None:
    entries = lock_entries()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{requirement} is not in requirements.lock"
        version, _ = entries[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{requirement}: the lock has {version}"
        )


def test_every_locked_package_carries_its_hashes() -> None:
    entries = lock_entries()
    assert len(entries) > len(requirements())  # the dependencies are locked too, not only what we name
    for name, (_, hashes) in entries.items():
        assert hashes, f"{name} has no --hash in requirements.lock"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", digest) for digest in hashes), name


def test_torch_is_the_cpu_build_and_its_hash_is_the_local_wheels() -> None:
    version, hashes = lock_entries()["torch"]
    assert version.local == "cpu", (
        "PyPI's torch is a CUDA build of several GB: the lock takes /opt/wheels' CPU one"
    )
    wheels = sorted(TORCH_WHEELS.glob(f"torch-{version}-*.whl"))
    if not wheels:
        pytest.skip(f"no torch {version} wheel in {TORCH_WHEELS} on this machine")
    assert "sha256:" + hashlib.sha256(wheels[0].read_bytes()).hexdigest() in hashes

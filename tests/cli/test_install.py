"""The CLI installs as users install CLIs: `pip install .` from the repository into a fresh virtual
environment gives a `trainyard` command (its own small distribution: the `trainyard` package and the API
client's dependencies, nothing of the server). Needs the package index `make install` uses."""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import trainyard

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pip_install_gives_a_trainyard_command_in_a_fresh_venv(tmp_path: Path) -> None:
    # A copy of what the distribution is built from, so the build leaves nothing in the checkout.
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copytree(ROOT / "trainyard", source / "trainyard", ignore=shutil.ignore_patterns("__pycache__"))
    (source / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "cli.md", source / "docs")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / ("Scripts" if sys.platform == "win32" else "bin")
    subprocess.run([bin_dir / "pip", "install", "-q", str(source)], check=True, timeout=540)

    version = subprocess.run([bin_dir / "trainyard", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"trainyard {trainyard.__version__}"
    listed = subprocess.run([bin_dir / "pip", "list", "--format=freeze"], capture_output=True, text=True)
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"trainyard", "httpx", "typer", "rich", "pyyaml", "websockets"} <= installed
    assert not {"django", "celery", "kubernetes", "psycopg"} & installed, "nothing of the server"
    helped = subprocess.run([bin_dir / "trainyard", "jobs", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "List, inspect, cancel" in helped.stdout

"""The CLI installs as users install CLIs: `pip install .` from the repository into a fresh virtual
environment gives a `trainyard` command (its own small distribution: the `trainyard` package and the API
client's dependencies, nothing of the server). The install is the session's `installed_cli` fixture
(tests/conftest.py), which the end-to-end day-one test (tests/e2e/test_day_one_live.py) uses too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import trainyard


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pip_install_gives_a_trainyard_command_in_a_fresh_venv(installed_cli: Path) -> None:
    bin_dir = installed_cli
    version = subprocess.run([bin_dir / "trainyard", "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.strip() == f"trainyard {trainyard.__version__}"
    listed = subprocess.run([bin_dir / "pip", "list", "--format=freeze"], capture_output=True, text=True)
    installed = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert {"trainyard", "httpx", "typer", "rich", "pyyaml", "websockets"} <= installed
    assert not {"django", "celery", "kubernetes", "psycopg"} & installed, "nothing of the server"
    helped = subprocess.run([bin_dir / "trainyard", "jobs", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "List, inspect, cancel" in helped.stdout

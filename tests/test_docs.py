"""The docs name only what exists: docs/architecture.md is the reference for the layout, so every path and
module it names must be in the repository, and every package of the project must appear on it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# A repository path in backticks: at least one folder and a file name (`jobs/tasks.py`, `deploy/k8s/base`).
_PATH = re.compile(
    r"`((?:portal|tenants|jobs|common|clusterio|kubesim|trainyard|deploy|tests|bench|docs)"
    r"/[A-Za-z0-9_./-]*[A-Za-z0-9_])`"
)
# Backticked text that looks like a path and is not one of the repository's.
NOT_PATHS = {
    "deploy/.env",  # the operator's own secrets file, which compose reads; never committed
    "trainyard/trainyard",  # the ServiceAccount trainyard in the namespace trainyard
}
# A dotted module in backticks (`jobs.core.admission`, `jobs.services.submit.job_submit`).
_MODULE = re.compile(r"`((?:portal|tenants|jobs|common|clusterio|kubesim)(?:\.[a-z_]+)+)`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_repository_path_a_doc_names_exists(doc: Path) -> None:
    missing = sorted(
        {
            p
            for p in _PATH.findall(doc.read_text())
            if "*" not in p and p not in NOT_PATHS and not (ROOT / p).exists()
        }
    )
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def _module_exists(dotted: str) -> bool:
    """Whether a dotted name is a module or package, or a name inside one (a function, a class)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            return True
    return False


def test_every_module_the_architecture_page_names_exists() -> None:
    text = ARCHITECTURE.read_text()
    missing = sorted({m for m in _MODULE.findall(text) if not _module_exists(m)})
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_architecture_page_names_every_package_of_jobs_and_the_top_level() -> None:
    text = ARCHITECTURE.read_text()
    top = ["portal", "tenants", "jobs", "common", "clusterio", "kubesim", "trainyard"]
    jobs_packages = sorted(
        p.parent.name for p in (ROOT / "jobs").glob("*/__init__.py") if p.parent.name != "migrations"
    )
    unnamed = [f"{name}/" for name in top if f"{name}/" not in text]
    unnamed += [f"jobs/{name}/" for name in jobs_packages if f"{name}/" not in text]
    assert not unnamed, f"docs/architecture.md does not place: {unnamed}"

"""Shared fixtures and paths for the whole suite."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("TRAINYARD_SHARED_DATA", ROOT.parent / "shared" / "data"))
FFDL_MANIFESTS = sorted((SHARED_DATA / "ffdl-manifests").glob("*.yml"))

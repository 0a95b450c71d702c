"""The two programs Trainyard runs inside learner pods, as source text for `python -c`.

`fetch` is the init container that brings the job's code (and S3 data) into the pod; `launcher` wraps
the user's command to upload results when it ends. Both are stdlib-only so they run in any image with
a Python 3.9+, and they are shipped as text in the pod's command so no image has to contain them.
They must not import anything from the project nor read `__file__`.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent

FETCH_SOURCE: str = (_HERE / "fetch.py").read_text(encoding="utf-8")
LAUNCHER_SOURCE: str = (_HERE / "launcher.py").read_text(encoding="utf-8")

__all__ = ["FETCH_SOURCE", "LAUNCHER_SOURCE"]

"""Load the example spec for a local cluster (kubesim), which ignores images.

In an image the repository sits at ``/opt/trainyard``. kubesim runs each pod's command in a sandbox with
kubesim's python and the pod's volumes only, not this checkout, so the script cannot be read from disk
there: this ships it in the command instead (``python -u -c <train.py's text> ARGS...``; the file is
self-contained and well under the spec's command size limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGE_ROOT = "/opt/trainyard"
SPEC = ROOT / "examples" / "specs" / "train-cpu.yaml"


def example_spec(
    *,
    name: str | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    cpu: str | int | None = None,
    tuning: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The example spec as a dict, its script inlined in the command, with optional overrides.

    `args` are appended to the command (argparse: a later flag wins), `env` merged into the spec's.
    """
    spec: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    spec["command"] = [*_inline_scripts(spec["command"]), *(args or [])]
    if name is not None:
        spec["name"] = name
    if env:
        spec["env"] = {**spec.get("env", {}), **env}
    if cpu is not None:
        spec["resources"] = {**spec["resources"], "cpu": cpu}
    if tuning is not None:
        spec["tuning"] = tuning
    return spec


def _inline_scripts(command: list[Any]) -> list[str]:
    """Replace each script path in the image (``/opt/trainyard/...py``) by ``-c`` and its text."""
    inlined: list[str] = []
    for arg in map(str, command):
        if arg.startswith(f"{IMAGE_ROOT}/") and arg.endswith(".py"):
            inlined += ["-c", (ROOT / arg.removeprefix(f"{IMAGE_ROOT}/")).read_text()]
        else:
            inlined.append(arg)
    return inlined

"""Load the example spec for a local cluster (kubesim), where the script lives in this checkout.

In an image the repository sits at ``/opt/trainyard``; kubesim runs a pod's command as a local process
in the pod's own folder with the venv's python, so a relative path would not resolve there. This swaps
the image prefix for the checkout's absolute path, which works from any working directory.
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
    """The example spec as a dict, script path pointed at this checkout, with optional overrides.

    `args` are appended to the command (argparse: a later flag wins), `env` merged into the spec's.
    """
    spec: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    spec["command"] = [str(a).replace(IMAGE_ROOT, str(ROOT)) for a in spec["command"]] + list(args or [])
    if name is not None:
        spec["name"] = name
    if env:
        spec["env"] = {**spec.get("env", {}), **env}
    if cpu is not None:
        spec["resources"] = {**spec["resources"], "cpu": cpu}
    if tuning is not None:
        spec["tuning"] = tuning
    return spec

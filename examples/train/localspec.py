"""Load the example spec with its script inlined, for tests and benchmarks that submit it without code.

The spec runs ``python -u train.py ...`` in MODEL_DIR, where the job's code (``--code examples/train``, or
the submit page's template) is unpacked. Tests and benchmarks that submit through the services, with no
code archive, ship the script in the command instead (``python -u -c <train.py's text> ARGS...``; the file
is self-contained and well under the spec's command size limit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT / "examples" / "train"
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
    """Replace each script of the code folder (``train.py``, relative to MODEL_DIR) by ``-c`` and its text."""
    inlined: list[str] = []
    for arg in map(str, command):
        if arg.endswith(".py") and "/" not in arg and (CODE / arg).is_file():
            inlined += ["-c", (CODE / arg).read_text()]
        else:
            inlined.append(arg)
    return inlined

"""The TensorBoard example (examples/specs/tensorboard.yaml, examples/tensorboard/): its spec asks for
TensorBoard metrics under RESULT_DIR, and its script, run as a learner would run it, writes event files whose
scalars the platform's reader (TensorBoard's own record reader, checksums included) turns into the metrics
train/loss, train/lr and eval/loss: with torch's SummaryWriter and with the standard-library writer alike."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobs.core.eventfiles import read_scalars, run_of
from jobs.core.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
CODE = ROOT / "examples" / "tensorboard"
STEPS = 30


def _metrics(result_dir: Path) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for path in sorted((result_dir / "tb").rglob("*tfevents*")):
        read = read_scalars(path.read_bytes(), run=run_of(str(path.relative_to(result_dir / "tb"))))
        assert read.error == "" and read.consumed == path.stat().st_size
        for point in read.points:
            found.setdefault(point.name, []).append((point.step, point.value))
    return found


def test_the_examples_spec_asks_for_tensorboard_metrics_under_result_dir() -> None:
    spec = parse_spec((ROOT / "examples" / "specs" / "tensorboard.yaml").read_text()).spec
    assert spec["evaluation_metrics"]["type"] == "tensorboard"
    assert spec["evaluation_metrics"]["in"] == "$RESULT_DIR/tb"
    assert spec["command"][:3] == ["python", "-u", "train.py"]


@pytest.mark.parametrize("writer", ["builtin", "torch"])
def test_the_example_writes_scalars_the_platform_reads(writer: str, tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "train.py", f"--steps={STEPS}", "--eval-every=10", f"--writer={writer}"],
        cwd=CODE,
        env={"RESULT_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        timeout=120,
    )
    metrics = _metrics(tmp_path)
    assert sorted(metrics) == ["eval/loss", "train/loss", "train/lr"]
    assert [step for step, _ in metrics["train/loss"]] == list(range(STEPS))
    assert [step for step, _ in metrics["eval/loss"]] == [9, 19, 29]
    assert metrics["train/lr"][0][1] == pytest.approx(0.05)
    assert metrics["train/loss"][-1][1] < metrics["train/loss"][0][1]  # it learns

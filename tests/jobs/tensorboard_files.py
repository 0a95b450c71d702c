"""Real TensorBoard event files for the tests, written by torch's SummaryWriter (what training scripts use)."""

from __future__ import annotations

from pathlib import Path

from torch.utils.tensorboard import SummaryWriter


def write_scalars(folder: Path, tag: str, values: list[float], start: int = 0) -> bytes:
    """Write `values` of `tag` at steps start, start+1, ... into a new event file under `folder`; its bytes."""
    writer = SummaryWriter(str(folder))
    for step, value in enumerate(values, start):
        writer.add_scalar(tag, value, step)
    writer.close()
    (path,) = sorted(folder.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)[-1:]
    return path.read_bytes()

"""Linear regression on synthetic data, in plain Python, that reports its progress as TensorBoard scalars:
`loss` and `lr` under `$RESULT_DIR/tb/train`, `loss` under `$RESULT_DIR/tb/eval` (Trainyard names them
`train/loss`, `train/lr` and `eval/loss`; docs/jobs.md, *TensorBoard*).

It writes with torch's `SummaryWriter` where `torch.utils.tensorboard` is importable, else with the
standard-library writer beside it (`events.py`), so it runs in any image with Python. `--writer builtin`
forces the latter.

    trainyard submit examples/specs/tensorboard.yaml --code examples/tensorboard --follow
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from typing import Any


def open_writer(log_dir: str, kind: str) -> Any:
    """A SummaryWriter-like writer for `log_dir`: torch's unless `kind` is `builtin` or torch's is missing."""
    if kind != "builtin":
        try:
            from torch.utils.tensorboard import SummaryWriter

            return SummaryWriter(log_dir)
        except ImportError:
            if kind == "torch":
                raise
    from events import EventWriter

    return EventWriter(log_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description="Linear regression that writes TensorBoard scalars.")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--writer", choices=("auto", "torch", "builtin"), default="auto")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to wait after each step")
    args = parser.parse_args()

    root = os.path.join(os.environ.get("RESULT_DIR", "."), "tb")
    train = open_writer(os.path.join(root, "train"), args.writer)
    evaluate = open_writer(os.path.join(root, "eval"), args.writer)
    rng = random.Random(0)
    points = [(x, 3.0 * x + 0.5 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(256))]
    held_out, points = points[:64], points[64:]
    w = b = 0.0
    for step in range(args.steps):
        lr = args.lr * 0.5 * (1 + math.cos(math.pi * step / args.steps))
        batch = rng.sample(points, 32)
        grad_w = sum(2 * (w * x + b - y) * x for x, y in batch) / len(batch)
        grad_b = sum(2 * (w * x + b - y) for x, y in batch) / len(batch)
        w, b = w - lr * grad_w, b - lr * grad_b
        loss = sum((w * x + b - y) ** 2 for x, y in batch) / len(batch)
        train.add_scalar("loss", loss, step)
        train.add_scalar("lr", lr, step)
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            held = sum((w * x + b - y) ** 2 for x, y in held_out) / len(held_out)
            evaluate.add_scalar("loss", held, step)
            evaluate.flush()
            print(f"step {step}: train loss {loss:.4f}, eval loss {held:.4f}", flush=True)
        train.flush()
        if args.pause:
            time.sleep(args.pause)
    train.close()
    evaluate.close()
    print(f"fitted w={w:.3f} b={b:.3f}", flush=True)
    print("training done", flush=True)


if __name__ == "__main__":
    main()

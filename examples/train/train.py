"""Example Trainyard workload: a small PyTorch MLP trained on synthetic data, on CPU (or a GPU if present).

It is what the example spec (`examples/specs/train-cpu.yaml`) runs and what the tuning benchmarks
measure, so it does the three things every Trainyard job should (docs/jobs.md):

* prints metric lines the engine parses: ``{"step": N, "metrics": {"loss": ..., "samples_per_sec": ...}}``
  every ``--log-every`` steps (the rate is measured over those steps);
* checkpoints every ``--checkpoint-every`` steps into ``$CHECKPOINT_DIR`` atomically (a temporary file,
  then ``os.replace``), so a requeued or tuned attempt never reads half a file;
* resumes from the newest checkpoint at start and says so (``resumed from step N``), so the step counter,
  the loss curve and the metrics continue across a restart.

``--input-cost K`` (or ``TRAIN_INPUT_COST``) adds K passes of a CPU-heavy "augmentation" (matrix products
over the batch) to the input pipeline, so a benchmark can make the job CPU-bound on purpose; it runs in
PyTorch's intra-op pool, so it speeds up with more CPU *and* the right thread count. ``--workers auto``
reads the platform's DataLoader hint ``TRAINYARD_DATALOADER_WORKERS``.

``--sync-threads`` (or ``TRAIN_SYNC_THREADS=1``) is the opposite case, a job that gets *slower* with more
CPU: the augmentation of each batch is split over as many Python threads as PyTorch's intra-op pool has
(``OMP_NUM_THREADS``, which the platform sets from the CPU limit), and they meet at every step. On tiny
batches the hand-offs cost more than the split gives, so a second CPU (and thread) slows the job down:
bench/tuner_bench.py's revert scenario.

Thread pools are left to the environment (``OMP_NUM_THREADS`` etc., set by the platform when
``tuning.threads`` is ``auto``); ``TRAINYARD_TORCH_INTEROP_THREADS``, when set, sizes the inter-op pool,
which PyTorch only lets code set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")  # the image may lack numpy

import torch  # noqa: E402
from torch import nn  # noqa: E402

CHECKPOINT_NAME = "train.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; every flag has an environment fallback so a spec can set it either way."""
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=int(env.get("TRAIN_STEPS", "600")))
    parser.add_argument("--batch-size", type=int, default=int(env.get("TRAIN_BATCH_SIZE", "128")))
    parser.add_argument("--features", type=int, default=int(env.get("TRAIN_FEATURES", "256")))
    parser.add_argument("--hidden", type=int, default=int(env.get("TRAIN_HIDDEN", "512")))
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--input-cost", type=int, default=int(env.get("TRAIN_INPUT_COST", "0")))
    parser.add_argument("--workers", default=env.get("TRAIN_WORKERS", "0"), help="a number, or 'auto'")
    parser.add_argument("--log-every", type=int, default=int(env.get("TRAIN_LOG_EVERY", "10")))
    parser.add_argument("--checkpoint-every", type=int, default=int(env.get("TRAIN_CHECKPOINT_EVERY", "50")))
    parser.add_argument("--checkpoint-dir", default=env.get("CHECKPOINT_DIR", "./checkpoints"))
    parser.add_argument("--step-sleep", type=float, default=float(env.get("TRAIN_STEP_SLEEP", "0")))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sync-threads",
        action="store_true",
        default=env.get("TRAIN_SYNC_THREADS", "") not in ("", "0"),
        help="lock-step input: split each batch over the intra-op thread count, threads meet every step",
    )
    return parser.parse_args(argv)


class SyntheticBatches(torch.utils.data.IterableDataset[tuple[torch.Tensor, torch.Tensor]]):
    """An endless stream of (x, y) batches from a fixed random teacher, with an optional CPU cost.

    Seeded by the global step, so a resumed run sees the batches it would have seen without the restart.
    """

    def __init__(self, args: argparse.Namespace, start_step: int) -> None:
        self.args = args
        self.start_step = start_step
        generator = torch.Generator().manual_seed(args.seed)
        self.teacher = torch.randn(args.features, args.classes, generator=generator)
        self.mix = torch.randn(args.features, args.features, generator=generator) / args.features**0.5

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        stride, offset = (info.num_workers, info.id) if info else (1, 0)
        step = self.start_step + offset
        while True:
            yield self.batch(step)
            step += stride

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.args.seed * 1_000_003 + step)
        x = torch.randn(self.args.batch_size, self.args.features, generator=generator)
        threads = torch.get_num_threads() if self.args.sync_threads else 1
        x = (
            self.augment(x)
            if threads <= 1
            else torch.cat(list(self.pool(threads).map(self.augment, x.chunk(threads))))
        )
        y = (x @ self.teacher).argmax(dim=1)
        return x, y

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        """The "augmentation": CPU work that needs no gradient."""
        for _ in range(self.args.input_cost):
            x = torch.tanh(x @ self.mix) * 2.0
        return x

    def pool(self, threads: int) -> ThreadPoolExecutor:
        """The lock-step threads of ``--sync-threads`` (started once, one per intra-op thread)."""
        if getattr(self, "_pool", None) is None:
            self._pool = ThreadPoolExecutor(max_workers=threads)
        return self._pool


def build(args: argparse.Namespace, device: torch.device) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model (a three-layer MLP) and its optimizer."""
    torch.manual_seed(args.seed)
    model = nn.Sequential(
        nn.Linear(args.features, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.classes),
    ).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)


def save_checkpoint(folder: Path, state: dict[str, Any]) -> None:
    """Write the checkpoint atomically: a reader sees the old file or the new one, never half of one."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{CHECKPOINT_NAME}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, folder / CHECKPOINT_NAME)


def load_checkpoint(folder: Path) -> dict[str, Any] | None:
    """The newest checkpoint, or None when there is none yet (a first attempt)."""
    path = folder / CHECKPOINT_NAME
    if not path.exists():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def configure_threads() -> dict[str, int]:
    """Apply the inter-op hint (intra-op follows OMP_NUM_THREADS by itself) and report the pools."""
    interop = os.environ.get("TRAINYARD_TORCH_INTEROP_THREADS")
    if interop:  # a bad value, or a pool already started, leaves PyTorch's default
        with contextlib.suppress(RuntimeError, ValueError):
            torch.set_num_interop_threads(max(1, int(interop)))
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


def workers(value: str) -> int:
    """DataLoader workers: a number, or 'auto' for the platform's hint (0 when it gives none)."""
    if value == "auto":
        return max(0, int(os.environ.get("TRAINYARD_DATALOADER_WORKERS", "0") or 0))
    return max(0, int(value))


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    folder = Path(args.checkpoint_dir)
    model, optimizer = build(args, device)
    start = 0
    state = load_checkpoint(folder)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = int(state["step"])
        print(f"resumed from step {start}", flush=True)
    pools = configure_threads()
    n_workers = workers(args.workers)
    print(
        f"training on {device}: steps {start}->{args.steps}, batch {args.batch_size}, input cost "
        f"{args.input_cost}{' (lock-step threads)' if args.sync_threads else ''}, threads {pools}, loader "
        f"workers {n_workers}, attempt "
        f"{os.environ.get('TRAINYARD_ATTEMPT', '-')}",
        flush=True,
    )
    data = SyntheticBatches(args, start)
    batches: Any = (
        iter(torch.utils.data.DataLoader(data, batch_size=None, num_workers=n_workers))
        if n_workers
        else iter(data)
    )
    loss_fn = nn.CrossEntropyLoss()
    window_started, window_steps = time.perf_counter(), 0
    for step in range(start + 1, args.steps + 1):
        x, y = next(batches)
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_sleep:
            time.sleep(args.step_sleep)
        window_steps += 1
        if step % args.log_every == 0 or step == args.steps:
            elapsed = max(time.perf_counter() - window_started, 1e-9)
            rate = window_steps * args.batch_size / elapsed
            emit(
                {"step": step, "metrics": {"loss": round(loss.item(), 5), "samples_per_sec": round(rate, 1)}}
            )
            window_started, window_steps = time.perf_counter(), 0
        if step % args.checkpoint_every == 0 or step == args.steps:
            save_checkpoint(
                folder, {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            )
    print("training done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

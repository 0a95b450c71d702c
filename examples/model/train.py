"""A model definition that lives only on your disk: `trainyard submit examples/specs/with-code.yaml
--code examples/model --follow` carries it into the learner's MODEL_DIR, where the command runs.

It trains a small PyTorch MLP on synthetic data (the `net` module beside it defines the network), prints
metric lines the platform charts, checkpoints to CHECKPOINT_DIR every 10 steps and when told to stop
(SIGTERM: a halt, a preemption, a drained node), reports each checkpoint with a `{"checkpoint": step}` line
(docs/jobs.md), resumes from it after a requeue, and
leaves the trained weights and a summary in RESULT_DIR, which the launcher uploads when it exits:
`trainyard download JOB --results -o out/` brings them back.
"""

import json
import os
import pathlib
import signal
import sys
import time

import torch
from net import make_model

STEPS = int(os.environ.get("STEPS", "60"))
checkpoint = pathlib.Path(os.environ.get("CHECKPOINT_DIR", "checkpoints")) / "state.pt"
results = pathlib.Path(os.environ.get("RESULT_DIR", "results"))
checkpoint.parent.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if checkpoint.exists():
    state = torch.load(checkpoint)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
    print(f"resumed from step {start}", flush=True)
stop_asked: list[bool] = []
signal.signal(signal.SIGTERM, lambda *_: stop_asked.append(True))


def save(step: int) -> None:
    """Write the checkpoint atomically and say so (the scheduler counts work lost from the last one)."""
    partial = checkpoint.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, partial)
    os.replace(partial, checkpoint)
    print(json.dumps({"checkpoint": step}), flush=True)


weights = torch.randn(32, 1)
for step in range(start, STEPS):
    if stop_asked:
        save(step)
        print(f"stopping at step {step}", flush=True)
        sys.exit(0)
    began = time.perf_counter()
    x = torch.randn(256, 32)
    loss = torch.nn.functional.mse_loss(model(x), x @ weights)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    rate = 256 / (time.perf_counter() - began)
    print(
        json.dumps({"step": step, "metrics": {"loss": loss.item(), "samples_per_sec": round(rate, 1)}}),
        flush=True,
    )
    if (step + 1) % 10 == 0:
        save(step + 1)
results.mkdir(parents=True, exist_ok=True)
torch.save(model.state_dict(), results / "model.pt")
(results / "summary.json").write_text(json.dumps({"steps": STEPS, "final_loss": loss.item()}))
print("training done; model in RESULT_DIR", flush=True)

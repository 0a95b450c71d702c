"""A real (tiny) PyTorch CPU training loop as a pod: logs stream while it runs, then it succeeds."""

from __future__ import annotations

import importlib.util

import pytest
from kubernetes import client

from tests.kubesim.conftest import follow_log, make_pod, wait_phase

TRAIN = """
import torch
torch.manual_seed(0)
x = torch.randn(256, 8)
y = x @ torch.randn(8, 1)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(60):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        import time; time.sleep(0.1)
print("done", flush=True)
"""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_torch_training_pod_streams_logs_and_succeeds(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, make_pod("train", ["python", "-c", TRAIN]))
    wait_phase(core, ns, "train", ("Running", "Succeeded"), timeout=30)
    response = follow_log(core, "train", ns)
    seen_running = False
    lines = []
    for chunk in response.stream():
        lines += [ln for ln in chunk.decode().splitlines() if ln.startswith(("step", "done"))]
        if lines and lines[0].startswith("step 0"):
            seen_running = seen_running or core.read_namespaced_pod("train", ns).status.phase == "Running"
    assert lines[0].startswith("step 0") and lines[-1] == "done"
    assert seen_running, "log lines should arrive while the pod still runs"
    pod = wait_phase(core, ns, "train", ("Succeeded", "Failed"), timeout=30)
    assert pod.status.phase == "Succeeded"
    first, last = float(lines[0].split()[-1]), float(lines[-2].split()[-1])
    assert last < first

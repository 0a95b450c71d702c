"""The network of the example model definition (a module of its own, to show the code arrives whole)."""

import torch


def make_model() -> torch.nn.Module:
    """A two-layer MLP from 32 inputs to one output."""
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

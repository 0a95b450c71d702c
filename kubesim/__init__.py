"""kubesim: a small Kubernetes API server emulator with a scheduler and a process-running kubelet.

It lets Trainyard launch and watch real pods through the official ``kubernetes`` client on machines
that have no container engine. See ``docs/kubesim.md``.
"""

__version__ = "0.1.0"

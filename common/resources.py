"""The one value type for an amount of GPUs, CPU and memory, shared by quotas, usage, demands and nodes.

Pure (no Django) so that the admission core (jobs.core), the tenants app and the API serializers speak of
the same thing: a tenant's quota, what its jobs hold, what one learner asks for and what a node has free
are all a ``Resources``, added, subtracted, scaled by a learner count and compared the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

Shape = tuple[int, int, int]
"""A ``Resources`` as a plain ``(gpus, cpu_millis, memory_mib)`` tuple, for admission's inner loops (tuples
are several times cheaper there than dataclass arithmetic)."""


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of GPUs (whole), CPU (millicores) and memory (MiB)."""

    gpus: int = 0
    cpu_millis: int = 0
    memory_mib: int = 0

    ZERO: ClassVar[Resources]

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus + other.gpus, self.cpu_millis + other.cpu_millis, self.memory_mib + other.memory_mib
        )

    def __neg__(self) -> Resources:
        return Resources(-self.gpus, -self.cpu_millis, -self.memory_mib)

    def __mul__(self, times: int) -> Resources:
        """``times`` of this amount: a per-learner demand scaled by the learner count."""
        return Resources(self.gpus * times, self.cpu_millis * times, self.memory_mib * times)

    def as_shape(self) -> Shape:
        return (self.gpus, self.cpu_millis, self.memory_mib)

    @classmethod
    def total(cls, amounts: Iterable[Resources]) -> Resources:
        """The sum of ``amounts`` (``ZERO`` for none)."""
        gpus = cpu = memory = 0
        for r in amounts:
            gpus, cpu, memory = gpus + r.gpus, cpu + r.cpu_millis, memory + r.memory_mib
        return cls(gpus, cpu, memory)


Resources.ZERO = Resources()

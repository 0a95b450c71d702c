"""The nodes' free resources as admission sees them during one cycle: per node, indexed by free GPU count
for each kind of job (its GPU type and the taints it tolerates), so that best-fit placement of a learner
looks at few nodes. Pure; used by jobs.core.admission (two pools per cycle: now, and at the head's start).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from itertools import islice

from common.resources import Shape

ANY = "\x00any"
# Which nodes a job may use: its gpu type (``ANY`` for none) and the node taints it tolerates (only those
# present on some node, so jobs that may use the same nodes share one key and one index).
Key = tuple[str, frozenset[str]]


def slots_in(free: Shape, need: Shape, cap: int) -> int:
    """How many learners of ``need`` fit in ``free`` (at most ``cap``)."""
    n = cap
    gpus, cpu, memory = need
    # Unrolled (admission calls it in its inner loops); a resource the learner does not need is no limit.
    if gpus > 0 and free[0] // gpus < n:
        n = free[0] // gpus
    if cpu > 0 and free[1] // cpu < n:
        n = free[1] // cpu
    if memory > 0 and free[2] // memory < n:
        n = free[2] // memory
    return n if n > 0 else 0


class NodePool:
    """Free resources per node, indexed by free GPU count per key (built on demand) for best-fit.

    Each bucket (the nodes of one key with the same free GPU count) is a list of ``(free CPU, node index)``
    kept sorted, so that best-fit (least free CPU, then name) starts at the first node with enough CPU
    instead of scanning the bucket; ``set_free`` moves a node's entries whenever its free GPUs or CPU change.
    """

    __slots__ = ("buckets", "free", "member", "taints", "types")

    def __init__(self, free: list[Shape], types: list[str | None], taints: list[frozenset[str]]) -> None:
        self.types, self.free, self.taints = types, free, taints
        self.buckets: dict[Key, dict[int, list[tuple[int, int]]]] = {}
        self.member: list[list[Key]] = [[] for _ in free]

    def copy(self) -> NodePool:
        new = object.__new__(NodePool)
        new.types, new.free, new.taints = self.types, list(self.free), self.taints
        new.buckets = {k: {g: list(s) for g, s in b.items()} for k, b in self.buckets.items()}
        new.member = [list(m) for m in self.member]
        return new

    def _by_gpus(self, key: Key) -> dict[int, list[tuple[int, int]]]:
        by_gpus = self.buckets.get(key)
        if by_gpus is None:
            by_gpus = {}
            gpu_type, tolerated = key
            for i, t in enumerate(self.types):
                if (gpu_type == ANY or t == gpu_type) and self.taints[i] <= tolerated:
                    by_gpus.setdefault(self.free[i][0], []).append((self.free[i][1], i))
                    self.member[i].append(key)
            for bucket in by_gpus.values():
                bucket.sort()
            self.buckets[key] = by_gpus
        return by_gpus

    def set_free(self, i: int, free: Shape, cap: Sequence[int] | None = None) -> None:
        if cap is not None:
            free = (min(free[0], cap[0]), min(free[1], cap[1]), min(free[2], cap[2]))
        old = self.free[i]
        self.free[i] = free
        if free[0] == old[0] and free[1] == old[1]:
            return
        old_entry, new_entry = (old[1], i), (free[1], i)
        for key in self.member[i]:
            by_gpus = self.buckets[key]
            bucket = by_gpus[old[0]]
            del bucket[bisect_left(bucket, old_entry)]
            if not bucket:
                del by_gpus[old[0]]
            insort(by_gpus.setdefault(free[0], []), new_entry)

    def shift(self, i: int, need: Shape, sign: int) -> None:
        f = self.free[i]
        self.set_free(i, (f[0] + sign * need[0], f[1] + sign * need[1], f[2] + sign * need[2]))

    def max_free_gpus(self, key: Key) -> int:
        return max(self._by_gpus(key) or (0,))

    def find(self, key: Key, need: Shape) -> int:
        """Best-fit node for one learner: fewest free GPUs, then least free CPU, then name; -1 if none."""
        by_gpus = self._by_gpus(key)
        g, c, m = need
        free = self.free
        for fg in sorted(k for k in by_gpus if k >= g):
            bucket = by_gpus[fg]
            for _, i in islice(bucket, bisect_left(bucket, (c, -1)), None):
                if free[i][2] >= m:
                    return i
        return -1

    def place_gang(self, key: Key, need: Shape, learners: int) -> list[int] | None:
        """Place every learner (taking the resources) or none; returns node indices or None."""
        placed: list[int] = []
        for _ in range(learners):
            i = self.find(key, need)
            if i < 0:
                for j in placed:
                    self.shift(j, need, +1)
                return None
            self.shift(i, need, -1)
            placed.append(i)
        return placed

    def slots(self, key: Key, need: Shape, cap: int) -> int:
        """Learners of ``need`` that fit at once (stops counting at ``cap``)."""
        total = 0
        for fg, bucket in self._by_gpus(key).items():
            if fg < need[0]:
                continue
            # Nodes with less free CPU than one learner needs hold none (CPU is not checked when it needs none).
            start = bisect_left(bucket, (need[1], -1)) if need[1] > 0 else 0
            for _, i in islice(bucket, start, None):
                total += slots_in(self.free[i], need, cap - total)
                if total >= cap:
                    return total
        return total

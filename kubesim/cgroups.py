"""Per-container resource limits: cgroups (v1 or v2) when writable, else polling fallbacks in the kubelet."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("kubesim.cgroups")
V1_ROOT = Path("/sys/fs/cgroup")
_PERIOD_US = 100_000


@dataclass
class Cgroup:
    """The cgroup directories of one container; ``procs_files`` get the process id before exec."""

    dirs: list[Path] = field(default_factory=list)
    memory_dir: Path | None = None
    cpu_limited: bool = False

    @property
    def procs_files(self) -> list[str]:
        """Files the container's first process writes its pid to (joining the cgroups)."""
        return [str(d / "cgroup.procs") for d in self.dirs]


class CgroupManager:
    """Creates a cgroup per container under a kubesim-owned parent, if this machine lets us."""

    def __init__(self, instance: str, enabled: bool = True):
        self.instance = instance
        self.version = 0
        self.memory_parent: Path | None = None
        self.cpu_parent: Path | None = None
        if enabled:
            self._detect()

    def _detect(self) -> None:
        if (V1_ROOT / "cgroup.controllers").exists():
            parent = V1_ROOT / self.instance
            if _try_mkdir(parent):
                self.version = 2
                self.memory_parent = self.cpu_parent = parent
                with contextlib.suppress(OSError):
                    (V1_ROOT / "cgroup.subtree_control").write_text("+memory +cpu")
            return
        self.version = 1
        memory = V1_ROOT / "memory" / self.instance
        cpu = V1_ROOT / "cpu" / self.instance
        self.memory_parent = memory if _try_mkdir(memory) else None
        self.cpu_parent = cpu if _try_mkdir(cpu) else None

    @property
    def memory_enforced(self) -> bool:
        """Whether memory limits are enforced by the kernel (else the kubelet polls RSS)."""
        return self.memory_parent is not None

    @property
    def cpu_enforced(self) -> bool:
        """Whether CPU limits are enforced by CFS quota (else SIGSTOP/SIGCONT duty cycling)."""
        return self.cpu_parent is not None

    def describe(self) -> str:
        """One line naming how each limit is enforced, for the start-up log and the benchmark."""
        mem = f"cgroup v{self.version} memory" if self.memory_enforced else "RSS polling + SIGKILL"
        cpu = f"cgroup v{self.version} CFS quota" if self.cpu_enforced else "SIGSTOP/SIGCONT duty cycling"
        return f"memory limits: {mem}; cpu limits: {cpu}"

    def create(self, name: str, memory_bytes: int | None, cpu_cores: float | None) -> Cgroup:
        """Make the cgroups for one container with the given limits (None: unlimited)."""
        group = Cgroup()
        if memory_bytes is not None and self.memory_parent is not None:
            path = self.memory_parent / name
            if _try_mkdir(path):
                limit_file = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
                if self.version == 1:
                    _write(path / "memory.swappiness", "0")
                if _write(path / limit_file, str(memory_bytes)):
                    group.dirs.append(path)
                    group.memory_dir = path
        if cpu_cores is not None and self.cpu_parent is not None:
            quota = max(int(cpu_cores * _PERIOD_US), 1000)
            if self.version == 2:
                target = group.memory_dir or self.cpu_parent / name
                if _try_mkdir(target) and _write(target / "cpu.max", f"{quota} {_PERIOD_US}"):
                    group.cpu_limited = True
                    if target not in group.dirs:
                        group.dirs.append(target)
            else:
                path = self.cpu_parent / name
                period_ok = _try_mkdir(path) and _write(path / "cpu.cfs_period_us", str(_PERIOD_US))
                if period_ok and _write(path / "cpu.cfs_quota_us", str(quota)):
                    group.dirs.append(path)
                    group.cpu_limited = True
        return group

    def oom_killed(self, group: Cgroup) -> bool:
        """Whether the kernel OOM killer fired inside this container's memory cgroup."""
        if group.memory_dir is None:
            return False
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (group.memory_dir / name).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit() and int(value) > 0:
                return True
        return False

    def pids(self, group: Cgroup) -> list[int]:
        """Processes still inside the container's cgroups (to kill ones that left the process group)."""
        found: set[int] = set()
        for path in group.procs_files:
            try:
                found.update(int(p) for p in Path(path).read_text().split())
            except (OSError, ValueError):
                continue
        return sorted(found)

    def remove(self, group: Cgroup) -> None:
        """Delete a container's cgroups (they must be empty)."""
        for path in group.dirs:
            try:
                path.rmdir()
            except OSError:
                log.debug("could not remove %s", path)

    def cleanup(self) -> None:
        """Remove kubesim's parent cgroups at shutdown."""
        for parent in {self.memory_parent, self.cpu_parent}:
            if parent is None:
                continue
            for child in parent.iterdir() if parent.exists() else []:
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()


def _try_mkdir(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
        return os.access(path / "cgroup.procs", os.W_OK)
    except OSError:
        return False


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False

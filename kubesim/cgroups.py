"""Per-container resource limits: cgroups (v1 or v2) when writable, else polling fallbacks in the kubelet."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("kubesim.cgroups")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_V2_CONTROLLERS = ("cpu", "memory")
_PERIOD_US = 100_000


@dataclass
class Cgroup:
    """The cgroup directories of one container; ``procs_files`` get the process id before exec."""

    dirs: list[Path] = field(default_factory=list)
    memory_dir: Path | None = None
    memory_limited: bool = False
    cpu_limited: bool = False
    cpuacct_dir: Path | None = None  # where CPU usage is counted (v2: the container's cgroup; v1: cpuacct)

    @property
    def procs_files(self) -> list[str]:
        """Files the container's first process writes its pid to (joining the cgroups)."""
        return [str(d / "cgroup.procs") for d in self.dirs]


class CgroupManager:
    """Creates a cgroup per container under a kubesim-owned parent, if this machine lets us.

    ``root`` is the cgroup mount (a fake tree in tests). ``problems`` says why a limit is not enforced by
    the kernel, so that start-up can say so instead of claiming enforcement it does not have.
    """

    def __init__(self, instance: str, enabled: bool = True, root: Path = CGROUP_ROOT):
        self.instance = instance
        self.root = Path(root)
        self.version = 0
        self.memory_parent: Path | None = None
        self.cpu_parent: Path | None = None
        self.cpuacct_parent: Path | None = None
        self.problems: list[str] = []
        if enabled:
            self._detect()

    def _detect(self) -> None:
        if (self.root / "cgroup.controllers").exists():
            self._detect_v2()
            return
        self.version = 1
        memory = self.root / "memory" / self.instance
        cpu = self.root / "cpu" / self.instance
        self.memory_parent = memory if _try_mkdir(memory) else None
        self.cpu_parent = cpu if _try_mkdir(cpu) else None
        # cpuacct counts CPU time: its own hierarchy, or co-mounted with cpu ("cpu,cpuacct").
        if self.cpu_parent is not None and (self.cpu_parent / "cpuacct.usage").exists():
            self.cpuacct_parent = self.cpu_parent
        else:
            cpuacct = self.root / "cpuacct" / self.instance
            self.cpuacct_parent = cpuacct if _try_mkdir(cpuacct) else None

    def _detect_v2(self) -> None:
        """On v2 a child only gets ``cpu.max``/``memory.max`` when every cgroup from the root down to its
        parent lists the controller in ``cgroup.subtree_control``: enable it at each level, then check."""
        self.version = 2
        parent = self.root / self.instance
        if not _try_mkdir(parent):
            self.problems.append(f"cannot create a writable cgroup {parent}")
            return
        enabled = set(_V2_CONTROLLERS)
        below_root = [self.root / p for p in reversed(parent.relative_to(self.root).parents[:-1])]
        for level in [self.root, *below_root, parent]:
            enabled &= self._enable_v2(level, enabled)
        if "memory" in enabled:
            self.memory_parent = parent
        if "cpu" in enabled:
            self.cpu_parent = parent

    def _enable_v2(self, path: Path, wanted: set[str]) -> set[str]:
        available = set(_read(path / "cgroup.controllers").split())
        for name in sorted(wanted - available):
            self.problems.append(f"cgroup v2 controller {name} is not available in {path}")
        todo = sorted(wanted & available)
        control = path / "cgroup.subtree_control"
        if todo and not _write(control, " ".join(f"+{c}" for c in todo)):
            for name in todo:  # one refused controller makes the combined write fail: try each alone
                _write(control, f"+{name}")
        active = {c.lstrip("+") for c in _read(control).split()}
        for name in sorted(set(todo) - active):
            self.problems.append(f"cannot enable the cgroup v2 {name} controller in {control}")
        return set(todo) & active

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
        why = f" ({'; '.join(self.problems)})" if self.problems else ""
        return f"memory limits: {mem}; cpu limits: {cpu}{why}"

    def create(self, name: str, memory_bytes: int | None, cpu_cores: float | None) -> Cgroup:
        """Make the cgroups for one container with the given limits (None: unlimited). Every container
        gets a memory cgroup and a CPU-accounting one where the machine allows, limits or not: its usage
        is read from them (`usage`), as the kubelet's cAdvisor reads it."""
        group = Cgroup()
        if self.memory_parent is not None:
            path = self.memory_parent / name
            if _try_mkdir(path):
                limit_file = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
                if self.version == 1:
                    _write(path / "memory.swappiness", "0")
                if memory_bytes is None or _write(path / limit_file, str(memory_bytes)):
                    group.dirs.append(path)
                    group.memory_dir = path
                    group.memory_limited = memory_bytes is not None
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
        if self.version == 2:
            group.cpuacct_dir = group.memory_dir or next(iter(group.dirs), None)
        elif self.cpuacct_parent is not None:
            path = self.cpuacct_parent / name
            if path in group.dirs or _try_mkdir(path):
                if path not in group.dirs:
                    group.dirs.append(path)
                group.cpuacct_dir = path
        return group

    def usage(self, group: Cgroup) -> tuple[float | None, int | None]:
        """CPU seconds used so far and the working set in bytes (usage less inactive file cache, as
        cAdvisor counts it) of a container's cgroups; None for what they do not count."""
        cpu: float | None = None
        if group.cpuacct_dir is not None:
            if self.version == 2:
                stat = _fields(_read(group.cpuacct_dir / "cpu.stat"))
                cpu = stat["usage_usec"] / 1e6 if "usage_usec" in stat else None
            else:
                text = _read(group.cpuacct_dir / "cpuacct.usage").strip()
                cpu = int(text) / 1e9 if text.isdigit() else None
        memory: int | None = None
        if group.memory_dir is not None:
            current = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
            text = _read(group.memory_dir / current).strip()
            if text.isdigit():
                stat = _fields(_read(group.memory_dir / "memory.stat"))
                inactive = stat.get("inactive_file" if self.version == 2 else "total_inactive_file", 0)
                memory = max(int(text) - inactive, 0)
        return cpu, memory

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
        for parent in {self.memory_parent, self.cpu_parent, self.cpuacct_parent}:
            if parent is None:
                continue
            for child in parent.iterdir() if parent.exists() else []:
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()


def _fields(text: str) -> dict[str, int]:
    """A flat-keyed cgroup file (`cpu.stat`, `memory.stat`) as numbers."""
    found = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            found[key] = int(value)
    return found


def _try_mkdir(path: Path) -> bool:
    try:
        path.mkdir(exist_ok=True)
        return os.access(path / "cgroup.procs", os.W_OK)
    except OSError:
        return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False

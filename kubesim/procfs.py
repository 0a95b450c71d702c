"""Reading CPU time and resident memory of a process group from /proc."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class GroupUsage:
    """CPU seconds consumed so far and current RSS bytes of the processes in a group."""

    cpu_seconds: float
    rss_bytes: int
    pids: tuple[int, ...]


def _live_processes() -> dict[int, list[str]]:
    """Every live (not zombie) process's /proc/<pid>/stat fields after the command name, by pid."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    found = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 22 and fields[0] != "Z":
            found[int(entry)] = fields
    return found


def _usage(stats: dict[int, list[str]], pids: set[int]) -> GroupUsage:
    """CPU time (user and system) and resident memory summed over `pids`."""
    cpu_ticks = sum(int(stats[p][11]) + int(stats[p][12]) for p in pids)
    rss_pages = sum(int(stats[p][21]) for p in pids)
    return GroupUsage(cpu_ticks / _TICKS, rss_pages * _PAGE, tuple(sorted(pids)))


def group_usage(pgid: int, extra_pids: tuple[int, ...] = ()) -> GroupUsage:
    """Sum CPU and RSS over every live process whose process group is ``pgid`` (plus ``extra_pids``)."""
    stats = _live_processes()
    return _usage(
        stats, {pid for pid, fields in stats.items() if int(fields[2]) == pgid or pid in extra_pids}
    )


def tree_usage(root: int) -> GroupUsage:
    """Sum CPU and RSS over a process, every process descended from it and every member of its process
    group (a child that started its own session stays a descendant)."""
    stats = _live_processes()
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    members = {pid for pid, fields in stats.items() if int(fields[2]) == root} | ({root} & set(stats))
    frontier = list(members)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in members:
                members.add(child)
                frontier.append(child)
    return _usage(stats, members)


def process_identity(pid: int) -> str | None:
    """``BOOTID:STARTTIME`` of a live process: unlike its pid, never reused by another process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return f"{boot}:{fields[19]}"

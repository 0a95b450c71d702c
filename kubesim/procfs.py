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


def group_usage(pgid: int, extra_pids: tuple[int, ...] = ()) -> GroupUsage:
    """Sum CPU and RSS over every live process whose process group is ``pgid`` (plus ``extra_pids``)."""
    cpu_ticks = 0
    rss_pages = 0
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return GroupUsage(0.0, 0, ())
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 22 or fields[0] == "Z":
            continue
        if int(fields[2]) != pgid and int(entry) not in extra_pids:
            continue
        pids.append(int(entry))
        cpu_ticks += int(fields[11]) + int(fields[12])
        rss_pages += int(fields[21])
    return GroupUsage(cpu_ticks / _TICKS, rss_pages * _PAGE, tuple(pids))


def tree_usage(root: int) -> GroupUsage:
    """Sum CPU and RSS over a process, every process descended from it and every member of its process
    group (a child that started its own session stays a descendant)."""
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return GroupUsage(0.0, 0, ())
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 22 or fields[0] == "Z":
            continue
        pid = int(entry)
        parents[pid], groups[pid], stats[pid] = int(fields[1]), int(fields[2]), fields
    members = {pid for pid, group in groups.items() if group == root} | ({root} & set(stats))
    frontier = list(members)
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in members:
                members.add(child)
                frontier.append(child)
    cpu_ticks = sum(int(stats[p][11]) + int(stats[p][12]) for p in members)
    rss_pages = sum(int(stats[p][21]) for p in members)
    return GroupUsage(cpu_ticks / _TICKS, rss_pages * _PAGE, tuple(sorted(members)))


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

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

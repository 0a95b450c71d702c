"""Caps on what one learner's log may store: lines and bytes per second, and in total per attempt.

A line longer than MAX_LINE characters is stored cut, ending with a marker that says so and how long the
line was (`cut_line`), so a reader sees that something is missing.

A job that prints without pause (1.8 GB in 20 s was seen) would otherwise fill the database and keep the
log ingest busy for every tenant. Lines over a cap are dropped, never stored; the first drop of a learner's
attempt adds one marker line (`MARKER_PREFIX ...`) to its stored log and one `LogsTruncated` JobEvent
(jobs/services/logs.py); the job keeps running.

The rate is judged on the kubelet's own timestamps (the second a line was printed), not on when the ingest
read it, so a follower catching up after an outage stores what a live one would have (a line without a
timestamp, which the kubelet never sends, meets the totals only). The totals count
what was stored in this attempt (Learner.log_lines/log_bytes), so a follower that restarts keeps them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MARKER_PREFIX = "[trainyard] log truncated:"
MAX_LINE = 8192
"""The most characters of one line that are stored: a longer line is cut, and ends with `cut_marker`."""


@dataclass(frozen=True)
class LogCaps:
    """The caps one learner's attempt works under (settings' defaults, or its tenant's policy)."""

    lines_per_second: int
    bytes_per_second: int
    lines: int
    bytes: int

    def describe(self) -> str:
        """The caps in words, for the marker line and the event."""
        return (
            f"{self.lines_per_second} lines/s, {self.bytes_per_second} bytes/s, "
            f"{self.lines} lines and {self.bytes} bytes per learner and attempt"
        )


@dataclass
class LogMeter:
    """What a learner's attempt has stored so far and the current second's window: decides, line by line,
    whether a line may be stored. Not thread-safe: one per log follower."""

    caps: LogCaps
    lines: int = 0
    bytes: int = 0
    dropped: int = 0
    truncated: bool = False
    second: int | None = None
    second_lines: int = 0
    second_bytes: int = 0

    def exceeded(self, *, second: int | None, size: int) -> str | None:
        """None when a line of `size` bytes printed in `second` (None: unknown) may be stored (it is
        counted); otherwise which cap it is over (it is counted as dropped)."""
        if second is not None and second != self.second:
            self.second, self.second_lines, self.second_bytes = second, 0, 0
        over = None
        if self.lines + 1 > self.caps.lines:
            over = f"more than {self.caps.lines} lines in this attempt"
        elif self.bytes + size > self.caps.bytes:
            over = f"more than {self.caps.bytes} bytes in this attempt"
        elif second is None:
            pass
        elif self.second_lines + 1 > self.caps.lines_per_second:
            over = f"more than {self.caps.lines_per_second} lines in one second"
        elif self.second_bytes + size > self.caps.bytes_per_second:
            over = f"more than {self.caps.bytes_per_second} bytes in one second"
        if over is not None:
            self.dropped += 1
            return over
        self.lines += 1
        self.bytes += size
        self.second_lines += 1
        self.second_bytes += size
        return None

    def copy(self) -> LogMeter:
        """A copy to work on, kept only if what it counted is stored."""
        return dataclasses.replace(self)


def marker(over: str, caps: LogCaps) -> str:
    """The line stored in place of the first dropped one."""
    return (
        f"{MARKER_PREFIX} {over}; lines over the caps ({caps.describe()}) are dropped from here on, "
        "the job keeps running"
    )


def cut_marker(length: int) -> str:
    """What ends a line cut to MAX_LINE characters: that it was cut, and from how many."""
    return f" [trainyard] line cut here: it was {length} characters long, over the {MAX_LINE} stored"


def cut_line(text: str) -> str:
    """`text` as stored: unchanged up to MAX_LINE characters; longer, cut so that with `cut_marker` at its end
    it is MAX_LINE characters long."""
    if len(text) <= MAX_LINE:
        return text
    marker = cut_marker(len(text))
    return text[: MAX_LINE - len(marker)] + marker

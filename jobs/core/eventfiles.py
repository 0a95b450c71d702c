"""TensorBoard event files → metric points, read with TensorBoard's own record reader and compat layer.

An event file is a sequence of length-prefixed, checksummed records (TFRecord), each an `Event` proto. A
learner's file arrives in pieces while it is written, so `read_scalars` reads the complete records at the
start of a byte range and says how many bytes they took: the next read starts there, never twice over a
record. A record cut off at the end waits for the rest; a record whose checksum or contents are wrong is
damage, reported as `EventsRead.error` (reading that file stops there).

Only scalars become points: values whose summary metadata names the `scalars` plugin (TensorBoard writes
that metadata with a tag's first value only, hence the `tags` memory carried from one read to the next),
of one finite number each. A tag becomes a metric name (`jobs.core.metricparse.NAME`): a run's folder is
prefixed (`eval/loss`), other characters become `_`, and it is cut to 64 characters.
"""

from __future__ import annotations

import math
import os
import re
import struct
import tempfile
from dataclasses import dataclass, field

from jobs.core.metricparse import NAME

SCALARS_PLUGIN = "scalars"
HEADER_BYTES = 12  # length (8) + the length's masked crc32c (4)
FOOTER_BYTES = 4  # the data's masked crc32c
_BAD = re.compile(r"[^A-Za-z0-9_./-]")


@dataclass(frozen=True)
class ScalarPoint:
    """One scalar value of an event file: its metric name, step, value and wall time (Unix seconds)."""

    name: str
    step: int
    value: float
    wall_time: float


@dataclass
class EventsRead:
    """What one read found: the points, the bytes of whole records read, the scalar tags known after it,
    and what is wrong with the data when it is damaged (empty otherwise)."""

    points: list[ScalarPoint] = field(default_factory=list)
    consumed: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    error: str = ""


def metric_name(tag: str, run: str = "") -> str:
    """The metric name of a tag written in the run folder `run` ("" for the event folder itself)."""
    name = _BAD.sub("_", f"{run}/{tag}" if run and run != "." else tag).strip("/") or "_"
    if not name[0].isalpha() and name[0] != "_":
        name = f"_{name}"
    name = name[:64]
    return name if NAME.match(name) else "_"


def read_scalars(data: bytes, *, run: str = "", tags: dict[str, str] | None = None) -> EventsRead:
    """Read the whole records at the start of `data` (which starts at a record boundary) and their scalars."""
    from tensorboard import data_compat
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    found = EventsRead(tags=dict(tags or {}))
    if not data:
        return found
    with tempfile.NamedTemporaryFile(prefix="trainyard-events-", suffix=".tfevents") as spool:
        spool.write(data)
        spool.flush()
        for record in RawEventFileLoader(spool.name).Load():
            try:
                event = data_compat.migrate_event(event_pb2.Event.FromString(record))
            except Exception as exc:  # a record whose checksum holds but whose proto does not parse
                found.error = f"record at byte {found.consumed} is not a TensorBoard event ({exc})"
                return found
            found.consumed += HEADER_BYTES + len(record) + FOOTER_BYTES
            if event.WhichOneof("what") != "summary":
                continue
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name:
                    if value.metadata.plugin_data.plugin_name == SCALARS_PLUGIN:
                        found.tags[value.tag] = SCALARS_PLUGIN
                    else:
                        found.tags.pop(value.tag, None)
                if found.tags.get(value.tag) != SCALARS_PLUGIN or value.WhichOneof("value") != "tensor":
                    continue
                try:
                    array = tensor_util.make_ndarray(value.tensor)
                except (ValueError, TypeError):
                    continue
                if array.size != 1 or not math.isfinite(number := float(array.reshape(-1)[0])):
                    continue
                found.points.append(
                    ScalarPoint(metric_name(value.tag, run), max(int(event.step), 0), number, event.wall_time)
                )
    found.error = _damage(data, found.consumed)
    return found


def record_length(header: bytes) -> int | None:
    """The whole length of the record a 12-byte header starts (header, data and footer), or None when the
    header fails its checksum."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    (length,) = struct.unpack("<Q", header[:8])
    (crc,) = struct.unpack("<I", header[8:HEADER_BYTES])
    return HEADER_BYTES + int(length) + FOOTER_BYTES if masked_crc32c(header[:8]) == crc else None


def _damage(data: bytes, at: int) -> str:
    """Why the bytes after the last whole record are not the start of a record still being written ("" when
    they may be: too short to tell, or a record whose end has not arrived)."""
    rest = data[at:]
    if len(rest) < HEADER_BYTES:
        return ""
    length = record_length(rest[:HEADER_BYTES])
    if length is None:
        return f"the record at byte {at} has a damaged header (checksum mismatch)"
    if len(rest) >= length:
        return f"the record at byte {at} is damaged (its data fails the checksum)"
    return ""


def run_of(path: str) -> str:
    """The run an event file belongs to: its folder relative to the event folder ("" at the top)."""
    folder = os.path.dirname(path)
    return "" if folder in ("", ".") else folder

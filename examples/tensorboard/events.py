"""A TensorBoard event-file writer in the standard library only, for images without `tensorboard`.

It writes what torch's `SummaryWriter.add_scalar` writes, in the same format (TFRecord records, each an
`Event` proto: a version record first, then one `simple_value` scalar per record), so TensorBoard and
Trainyard read the two alike. Where `torch.utils.tensorboard` (or tensorboardX) is installed, use that
instead: `train.py` does.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import BinaryIO

_CRC_TABLE: list[int] = []
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ 0x82F63B78 if _crc & 1 else _crc >> 1
    _CRC_TABLE.append(_crc)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def _event(wall_time: float, step: int = 0, *, version: str = "", tag: str = "", value: float = 0.0) -> bytes:
    """An `Event` proto: wall_time (1, double), step (2, int64), file_version (3) or summary (5) holding one
    `Summary.Value`: tag (1) and simple_value (2, float)."""
    out = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(step))
    if version:
        return out + _field(3, 2, version.encode())
    scalar = _field(1, 2, tag.encode()) + _field(2, 5, struct.pack("<f", value))
    return out + _field(5, 2, _field(1, 2, scalar))


class EventWriter:
    """`add_scalar`, `flush` and `close` like `SummaryWriter`, into a new `events.out.tfevents.*` file in
    `log_dir` (made if missing)."""

    def __init__(self, log_dir: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.0"
        self._file: BinaryIO = open(os.path.join(log_dir, name), "ab")  # noqa: SIM115 (closed in close)
        self._write(_event(time.time(), version="brain.Event:2"))

    def _write(self, record: bytes) -> None:
        header = struct.pack("<Q", len(record))
        self._file.write(header + _masked(header) + record + _masked(record))

    def add_scalar(self, tag: str, value: float, global_step: int = 0) -> None:
        self._write(_event(time.time(), max(int(global_step), 0), tag=tag, value=float(value)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

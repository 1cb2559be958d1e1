"""The producer snapshot file `<offset>.snapshot`: a partition's producer state as of `<offset>` (Kafka's
`ProducerStateManager.writeSnapshot`/`readSnapshot`, the generated `ProducerSnapshot` schema, version 1).

Big-endian, no padding::

    version   int16   1 (Kafka reads versions 1..1)
    crc       uint32  CRC-32C of every byte after this field
    count     int32   number of entries
    count x   producer_id               int64
              epoch                     int16
              last_sequence             int32   -1 for a producer with no data batch left (only markers)
              last_offset               int64   last offset of its last data batch, -1 without one
              offset_delta              int32   last_offset - first offset of that batch, 0 without one
              timestamp                 int64   the producer's last timestamp (data batch or marker)
              coordinator_epoch         int32   epoch of the transaction coordinator that wrote its last marker, -1
              current_txn_first_offset  int64   first offset of its open transaction, -1 when none is open

Entries are in the iteration order of the Java `HashMap<Long, ProducerStateEntry>` Kafka writes from
(`java_hash_map_order`): by bucket, `(id ^ id >>> 32) ^ (... >>> 16)` masked to the table size (16, doubled each
time the map holds more than three quarters of it), and in insertion order within a bucket, so a snapshot rebuilt
from a log Kafka wrote has Kafka's bytes, and a snapshot Kafka wrote is rewritten as it was.

Only each producer's last batch is kept (Kafka's choice: sequence checks need the last one, and duplicates of
older batches are rare after a restart). A file whose version, CRC or framing does not check raises
`CorruptCheckpointError`; the caller deletes it and rebuilds the state from the log (never fatal).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage.errors import CorruptCheckpointError

SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(
    ">"
    "h"  # version
    "I"  # crc
    "i"  # entry count
)
_ENTRY = struct.Struct(
    ">"
    "q"  # producer_id
    "h"  # epoch
    "i"  # last_sequence
    "q"  # last_offset
    "i"  # offset_delta
    "q"  # timestamp
    "i"  # coordinator_epoch
    "q"  # current_txn_first_offset
)
_CRC_START = struct.calcsize(">hI")
_VERSION_AND_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer as a snapshot stores it (see the module docstring for the sentinels)."""

    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


# java.util.HashMap's first table size and load factor.
_JAVA_HASH_MAP_CAPACITY = 16
_JAVA_HASH_MAP_LOAD = 0.75


def java_hash_map_order(producer_ids: Iterable[int]) -> list[int]:
    """`producer_ids` (in insertion order) as a `java.util.HashMap<Long, ...>` that held them iterates them: by
    bucket of `Long.hashCode` spread by `HashMap.hash`, insertion order within a bucket (a map that never shrank)."""
    ids = list(producer_ids)
    capacity = _JAVA_HASH_MAP_CAPACITY
    while len(ids) > capacity * _JAVA_HASH_MAP_LOAD:
        capacity *= 2

    def bucket(producer_id: int) -> int:
        unsigned = producer_id & 0xFFFF_FFFF_FFFF_FFFF
        hash_code = (unsigned ^ (unsigned >> 32)) & 0xFFFF_FFFF
        return (hash_code ^ (hash_code >> 16)) & (capacity - 1)

    return sorted(ids, key=bucket)


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    """The bytes of a snapshot holding `entries`, in the order given."""
    packed = [
        _ENTRY.pack(
            entry.producer_id,
            entry.epoch,
            entry.last_sequence,
            entry.last_offset,
            entry.offset_delta,
            entry.timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
        for entry in entries
    ]
    body = _COUNT.pack(len(packed)) + b"".join(packed)
    return _VERSION_AND_CRC.pack(SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def decode_snapshot(data: bytes, path: Path | None = None) -> list[SnapshotEntry]:
    """Parses a snapshot strictly; `CorruptCheckpointError` on a bad version, CRC or length."""
    if len(data) < _HEADER.size:
        raise CorruptCheckpointError(f"producer snapshot of {len(data)} bytes is too short", path=path)
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptCheckpointError(f"unknown producer snapshot version {version}", path=path)
    if crc32c.crc32c(data[_CRC_START:]) != crc:
        raise CorruptCheckpointError("producer snapshot CRC mismatch", path=path)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptCheckpointError(f"producer snapshot count {count} does not match its size", path=path)
    return [SnapshotEntry(*_ENTRY.unpack_from(data, _HEADER.size + index * _ENTRY.size)) for index in range(count)]


def read_snapshot_file(path: Path) -> list[SnapshotEntry]:
    """The entries of the snapshot file at `path`; `CorruptCheckpointError` when it cannot be read or parsed."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise CorruptCheckpointError(f"cannot read producer snapshot: {exc}", path=path) from exc
    return decode_snapshot(data, path)

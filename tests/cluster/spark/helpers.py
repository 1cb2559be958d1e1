"""Writing test records straight into partition actors, and the oracle of what was written."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actors.calls import call
from storage.records.compression import CompressionType
from storage.records.record_batch import RecordBatchBuilder

_names = itertools.count()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


@dataclass(frozen=True, slots=True)
class Produced:
    """One record as written, with the offset the partition gave it (the oracle)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def append(
    broker: Any,
    topic: str,
    partition: int,
    records: Sequence[Mapping[str, Any]],
    *,
    compression: CompressionType = CompressionType.NONE,
) -> list[Produced]:
    """Appends `records` (dicts with key, value, timestamp, headers) as one batch; returns them with offsets."""
    builder = RecordBatchBuilder(compression=compression)
    for record in records:
        builder.append(
            record.get("key"), record.get("value"), timestamp=record["timestamp"], headers=record.get("headers", ())
        )
    info = call(broker.partition(topic, partition).append.remote(builder.build()))
    return [
        Produced(
            topic,
            partition,
            info.first_offset + index,
            record["timestamp"],
            record.get("key"),
            record.get("value"),
            tuple(record.get("headers", ())),
        )
        for index, record in enumerate(records)
    ]

"""A decoded v2 record: what `RecordBatch.records()` and the consumer hand out."""

from __future__ import annotations

from dataclasses import dataclass

# A record header: a UTF-8 key and a value (None = null).
Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record: absolute offset and timestamp, key/value (None = null), headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

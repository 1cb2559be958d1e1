"""Kafka's consumer isolation levels, and the one place that decides where a read of each level ends.

| level              | reads up to                | records of aborted transactions | control batches |
|--------------------|----------------------------|---------------------------------|-----------------|
| `read_uncommitted` | the high watermark         | read                            | never rows      |
| `read_committed`   | the last stable offset     | dropped                         | never rows      |

The last stable offset (LSO) is the first offset of the oldest transaction still open, or the high watermark when
none is; a read_committed read stops there (`readable_end`), fetches at the partition's `txn_committed` isolation
(`log_isolation`), and of the records below the LSO drops those of aborted transactions: each fetch answers its
aborted-transaction list, which the Arrow decoder applies batch by batch (`cluster.records.arrow_records`, with
`storage.partition.aborted_batches`). Control batches (COMMIT/ABORT markers) are skipped by the decoder at every level.

The bulk readers (the Spark bridge, Ray Data) read read_committed by default: a pipeline must not compute on
records that their producer aborted, nor on those of a transaction that may still abort.
"""

from __future__ import annotations

from storage.errors import InvalidRequestError

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)


def check_isolation(isolation: str) -> str:
    """`isolation` if it is one of Kafka's two levels, else `InvalidRequestError`."""
    if isolation not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolation must be {READ_COMMITTED} or {READ_UNCOMMITTED}, got {isolation!r}")
    return isolation


def readable_end(isolation: str, high_watermark: int, last_stable_offset: int) -> int:
    """The offset a read at `isolation` ends at ("latest"), for a partition with these offsets: the high watermark
    for `read_uncommitted`, the last stable offset for `read_committed` (see the module docstring)."""
    check_isolation(isolation)
    return last_stable_offset if isolation == READ_COMMITTED else high_watermark


def log_isolation(isolation: str) -> str:
    """The partition read (`storage.partition.log_read.ISOLATIONS`) a fetch at Kafka's `isolation` is."""
    check_isolation(isolation)
    return "txn_committed" if isolation == READ_COMMITTED else "high_watermark"

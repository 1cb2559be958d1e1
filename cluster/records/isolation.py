"""Kafka's consumer isolation levels, and the one place that decides where a read of each level ends.

| level              | reads up to                | records of aborted transactions | control batches |
|--------------------|----------------------------|---------------------------------|-----------------|
| `read_uncommitted` | the high watermark         | read                            | never rows      |
| `read_committed`   | the last stable offset     | dropped                         | never rows      |

The last stable offset (LSO) is the first offset of the oldest transaction still open, or the high watermark when
none is; a read_committed consumer stops there, and of the records below it drops those of aborted transactions
(the fetch's aborted-transaction list: each aborted producer id with its first offset, dropped up to its ABORT
marker). Control batches (COMMIT/ABORT markers) are skipped by the Arrow decoder at every level
(`cluster.records.arrow_records`).

Transactions do not exist in raybroker yet: no partition has an open or an aborted transaction, so the LSO is the
high watermark and the aborted list is empty, and `readable_end` says so. When the partition log keeps an LSO and
aborted transactions, `readable_end` is where the LSO comes in, and the aborted list is applied where
`decode_fetches` walks each batch (it sees the batch's producer id and transactional flag).
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


def readable_end(isolation: str, high_watermark: int) -> int:
    """The offset a read at `isolation` ends at ("latest"), for a partition whose high watermark is
    `high_watermark`: the high watermark for `read_uncommitted`, the last stable offset for `read_committed`,
    which equals the high watermark while no transaction exists (see the module docstring)."""
    check_isolation(isolation)
    return high_watermark

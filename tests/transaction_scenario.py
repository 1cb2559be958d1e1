"""Transactional data written straight into partition logs, and the model of what each isolation level reads of it.

`write_scenario(append, mark)` writes one fixed script over `PARTITIONS` partitions: plain records, transactions
that commit, transactions that abort, transactions interleaved with other producers' on the same partition, one
transaction spanning two partitions, and transactions left open (which hold their partition's last stable offset
back). `append(partition, batch)` appends a client batch and answers its `LogAppendInfo`; `mark(partition,
producer_id, epoch, commit)` writes a COMMIT or ABORT marker as a transaction coordinator would. Callers pass the
in-process broker's logs, or the partition actors over Ray, so one script serves every reader's test.

The answer, a `Scenario`, is the oracle: every data record with its partition, offset, value and fate (plain,
committed, aborted, open), each partition's high watermark and last stable offset, and what a read_committed and a
read_uncommitted consumer read from offset 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from storage.partition.log import LogAppendInfo
from storage.records.record_batch import ControlRecordType, RecordBatchBuilder

PARTITIONS = 3
TIMESTAMP_MS = 1_700_000_000_000
PLAIN, COMMITTED, ABORTED, OPEN = "plain", "committed", "aborted", "open"
# Producer ids of the script's transactional producers (all in epoch 0).
A, B, C, D, E = 4001, 4002, 4003, 4004, 4005
EPOCH = 0

Append = Callable[[int, bytes], LogAppendInfo]
Mark = Callable[[int, int, int, bool], LogAppendInfo]


@dataclass(frozen=True, slots=True)
class Written:
    """One data record of the script."""

    partition: int
    offset: int
    value: bytes
    fate: str
    timestamp: int


@dataclass
class Scenario:
    """What the script wrote (see the module docstring)."""

    records: list[Written] = field(default_factory=list)
    # Each partition's log end offset (its high watermark: one replica).
    ends: dict[int, int] = field(default_factory=dict)
    # The first offset of each partition's oldest open transaction.
    open_starts: dict[int, int] = field(default_factory=dict)
    # Every aborted transaction: (partition, producer id, first offset, ABORT marker offset).
    aborted: list[tuple[int, int, int, int]] = field(default_factory=list)

    def last_stable_offset(self, partition: int) -> int:
        return self.open_starts.get(partition, self.ends[partition])

    def read_committed(self) -> list[tuple[int, int, bytes]]:
        """(partition, offset, value) of what a read_committed consumer reads from offset 0, in order."""
        return [
            (r.partition, r.offset, r.value)
            for r in self.records
            if r.fate in (PLAIN, COMMITTED) and r.offset < self.last_stable_offset(r.partition)
        ]

    def read_uncommitted(self) -> list[tuple[int, int, bytes]]:
        """(partition, offset, value) of what a read_uncommitted consumer reads from offset 0, in order."""
        return [(r.partition, r.offset, r.value) for r in self.records]

    def read(self, isolation: str) -> list[tuple[int, int, bytes]]:
        """What a consumer at `isolation` (Kafka's name) reads from offset 0."""
        return self.read_committed() if isolation == "read_committed" else self.read_uncommitted()

    def end(self, partition: int, isolation: str) -> int:
        """Where a consumer at `isolation` (Kafka's name) finds the partition's end: its LSO or its high watermark."""
        return self.last_stable_offset(partition) if isolation == "read_committed" else self.ends[partition]

    def aborted_from(self, partition: int, offset: int) -> set[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read_committed fetch of `partition` from
        `offset` lists: those whose marker is at or past `offset` and that start below the last stable offset."""
        return {
            (producer, first)
            for p, producer, first, marker in self.aborted
            if p == partition and marker >= offset and first < self.last_stable_offset(partition)
        }


class _Writer:
    def __init__(self, append: Append, mark: Mark, base_timestamp_ms: int) -> None:
        self._append, self._mark = append, mark
        self._base_timestamp_ms = base_timestamp_ms
        self.scenario = Scenario()
        self._sequences: dict[tuple[int, int], int] = {}
        # The records of each (partition, producer)'s transaction in progress.
        self._open: dict[tuple[int, int], list[Written]] = {}

    def _batch(self, partition: int, count: int, producer_id: int) -> None:
        transactional = producer_id >= 0
        sequence = self._sequences.get((partition, producer_id), 0)
        builder = RecordBatchBuilder(
            producer_id=producer_id,
            producer_epoch=EPOCH if transactional else -1,
            base_sequence=sequence if transactional else -1,
            is_transactional=transactional,
        )
        first = sum(1 for r in self.scenario.records if r.partition == partition)
        values = [b"p%d-r%d" % (partition, first + index) for index in range(count)]
        # Timestamps rise through the script, so a lookup by time names one record.
        timestamps = [self._base_timestamp_ms + len(self.scenario.records) + index for index in range(count)]
        for value, timestamp in zip(values, timestamps, strict=True):
            builder.append(b"key", value, timestamp=timestamp)
        info = self._append(partition, builder.build())
        self.scenario.ends[partition] = info.last_offset + 1
        if transactional:
            self._sequences[(partition, producer_id)] = sequence + count
        fate = OPEN if transactional else PLAIN
        written = [
            Written(partition, info.first_offset + index, value, fate, timestamp)
            for index, (value, timestamp) in enumerate(zip(values, timestamps, strict=True))
        ]
        self.scenario.records.extend(written)
        if transactional:
            self._open.setdefault((partition, producer_id), []).extend(written)
            self.scenario.open_starts.setdefault(partition, written[0].offset)

    def plain(self, partition: int, count: int) -> None:
        self._batch(partition, count, -1)

    def txn(self, partition: int, producer_id: int, count: int) -> None:
        self._batch(partition, count, producer_id)

    def end(self, partition: int, producer_id: int, commit: bool) -> None:
        marker = self._mark(partition, producer_id, EPOCH, commit).last_offset
        self.scenario.ends[partition] = marker + 1
        closing = self._open.pop((partition, producer_id))
        if not commit:
            self.scenario.aborted.append((partition, producer_id, closing[0].offset, marker))
        closed = {(r.partition, r.offset) for r in closing}
        fate = COMMITTED if commit else ABORTED
        self.scenario.records = [
            replace(r, fate=fate) if (r.partition, r.offset) in closed else r for r in self.scenario.records
        ]
        still_open = [r.offset for (p, _), rs in self._open.items() if p == partition for r in rs]
        if still_open:
            self.scenario.open_starts[partition] = min(still_open)
        else:
            self.scenario.open_starts.pop(partition, None)


def write_scenario(
    append: Append, mark: Mark, *, leave_open: bool = True, base_timestamp_ms: int = TIMESTAMP_MS
) -> Scenario:
    """Writes the script (see the module docstring), its records' timestamps rising from `base_timestamp_ms`; with
    `leave_open` False the open transactions are committed at the end, so every partition's last stable offset is
    its high watermark."""
    w = _Writer(append, mark, base_timestamp_ms)
    # Partition 0: A and B interleaved; B aborts, A commits (A spans partitions 0 and 1); then C stays open.
    w.plain(0, 2)
    w.txn(0, A, 3)
    w.txn(0, B, 2)
    w.txn(0, A, 1)
    w.plain(0, 1)
    w.end(0, B, commit=False)
    w.txn(1, D, 2)
    w.txn(1, A, 2)
    w.end(0, A, commit=True)
    w.end(1, D, commit=False)
    w.end(1, A, commit=True)
    w.plain(0, 2)
    w.txn(0, C, 2)
    w.plain(0, 2)
    # Partition 1: D's second transaction commits; plain records after.
    w.txn(1, D, 1)
    w.end(1, D, commit=True)
    w.plain(1, 1)
    # Partition 2: B aborts again, then E stays open with plain records behind it.
    w.plain(2, 1)
    w.txn(2, B, 2)
    w.end(2, B, commit=False)
    w.txn(2, E, 2)
    w.plain(2, 3)
    if not leave_open:
        w.end(0, C, commit=True)
        w.end(2, E, commit=True)
    return w.scenario


def write_through_actors(topic: str) -> Scenario:
    """The script written into `topic`'s partition actors over Ray (a broker must be running), with recent
    timestamps, which the broker's retention (7 days) leaves alone."""
    from actors.calls import call
    from actors.server.partition_lookup import partition_actor

    def append(partition: int, batch: bytes) -> LogAppendInfo:
        info: LogAppendInfo = call(partition_actor(topic, partition).append.remote(batch))
        return info

    def mark(partition: int, producer_id: int, epoch: int, commit: bool) -> LogAppendInfo:
        actor = partition_actor(topic, partition)
        result = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        info: LogAppendInfo = call(actor.append_transaction_marker.remote(producer_id, epoch, 0, result))
        return info

    return write_scenario(append, mark, base_timestamp_ms=time.time_ns() // 1_000_000 - 60_000)


__all__ = [
    "ABORTED",
    "COMMITTED",
    "OPEN",
    "PARTITIONS",
    "PLAIN",
    "Scenario",
    "Written",
    "write_scenario",
    "write_through_actors",
]

"""Coordinator epochs: how a coordinator left running beside its successor is kept from writing after it.

Kafka's coordinators are their internal partition's leader, so a broker that lost the partition cannot write to it.
Here a coordinator (of transactions, of groups) is a process of its own, and one that a pause or a network cut left
running beside its successor still reaches the partition's leader. So every coordinator takes an epoch from the
controller (`allocate_epoch(at_least)`: never handed out before, and at least the partition's leader epoch, the
coordinator epoch Kafka would name) and writes every record of its internal partitions as an idempotent batch of
`COORDINATOR_PRODUCER_ID` in that epoch. It claims a partition before reading it, by writing a record that changes
no state (`claim`'s `fencing_key`, a tombstone). From then on the partition's producer state refuses a batch of an
older epoch (`InvalidProducerEpochError`), so a predecessor's late record can never land after what its successor
read or wrote. A coordinator whose write failed releases the partition (`release`), and takes a new epoch for the
next claim, as Kafka's coordinator resigns and a new one loads.

A partition's producer state forgets a producer silent for `producer.id.expiration.ms` (a day by default), so a
coordinator paused that long is not fenced by its epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from storage.errors import BrokerError
from storage.partition.log import LogAppendInfo
from storage.records.record_batch import RecordBatchBuilder

# The producer id of coordinators' own batches, never handed to a client (the controller's ids count up from 0), and
# the largest epoch they write in (a producer epoch is an int16).
COORDINATOR_PRODUCER_ID = 2**63 - 2
MAX_COORDINATOR_EPOCH = 32766


class ClaimedPartition(Protocol):
    """The leader replica of an internal partition, as a coordinator claims it and writes to it."""

    def leader_epoch(self) -> int:
        """The partition's leader epoch as the controller elected this leader."""
        ...

    def append_replicated(self, batch: bytes) -> LogAppendInfo:
        """Appends one batch with acks=all; answers once every in-sync replica has it."""
        ...


@dataclass(slots=True)
class _Claim:
    handle: ClaimedPartition
    epoch: int
    next_sequence: int = 0


class CoordinatorClaims:
    """One coordinator's epoch and the partitions it claimed; see the module docstring. Not thread-safe: the
    coordinator calls it under its own lock."""

    def __init__(self, allocate_epoch: Callable[[int], int]) -> None:
        self._allocate_epoch = allocate_epoch
        self._claims: dict[int, _Claim] = {}
        # The epoch of this coordinator while none of its writes was refused (-1: none taken yet).
        self._epoch = -1

    def claim(self, partition: int, handle: ClaimedPartition, fencing_key: bytes, now_ms: int) -> None:
        """Takes `partition` (its leader `handle`) by writing the tombstone of `fencing_key` in this coordinator's
        epoch: a new one from the controller when it holds none, or one below the partition's leader epoch."""
        leader_epoch = handle.leader_epoch()
        if self._epoch < leader_epoch:
            self._epoch = self._allocate_epoch(leader_epoch)
        if self._epoch > MAX_COORDINATOR_EPOCH:
            raise BrokerError(
                f"the controller handed out coordinator epoch {self._epoch}, above the largest a producer epoch holds "
                f"({MAX_COORDINATOR_EPOCH})"
            )
        claim = _Claim(handle, self._epoch)
        self._append(claim, [(fencing_key, None)], now_ms)
        self._claims[partition] = claim

    def append(self, partition: int, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> LogAppendInfo:
        """Writes `records` (key, value) to the claimed `partition` as one batch in its claim's epoch, answered once
        every in-sync replica has it; `KeyError` if the partition is not claimed."""
        return self._append(self._claims[partition], records, now_ms)

    @staticmethod
    def _append(claim: _Claim, records: Iterable[tuple[bytes, bytes | None]], now_ms: int) -> LogAppendInfo:
        builder = RecordBatchBuilder(
            producer_id=COORDINATOR_PRODUCER_ID, producer_epoch=claim.epoch, base_sequence=claim.next_sequence
        )
        for key, value in records:
            builder.append(key, value, timestamp=now_ms)
        info = claim.handle.append_replicated(builder.build())
        claim.next_sequence += info.record_count
        return info

    def epoch(self, partition: int) -> int | None:
        """The epoch `partition` was claimed in (the coordinator epoch its markers carry); None if not claimed."""
        claim = self._claims.get(partition)
        return None if claim is None else claim.epoch

    def release(self, partition: int) -> None:
        """Forgets the claim of `partition`; the next claim takes a new epoch."""
        if self._claims.pop(partition, None) is not None:
            self._epoch = -1

    def release_all(self) -> None:
        """Forgets every claim (the partitions' topic was deleted); the next claim takes a new epoch."""
        self._claims.clear()
        self._epoch = -1

"""What the transaction handlers need of the transaction coordinator, as one small asynchronous interface.

InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions reach the cluster's one transaction coordinator (`actors.core.transactions.coordinator`); Produce
asks it whether a transactional batch's partition is in its producer's transaction; WriteTxnMarkers writes a marker
on a partition's leader (and, on `__consumer_offsets`, completes the producer's transactional offsets in the group
coordinator). `TransactionView` is the seam, beside `BrokerView` and `GroupView`: `LocalTransactionView`
(`cluster.protocol.local_transaction_view`) implements it over the in-process broker, `RayTransactionView`
(`cluster.protocol.ray_transaction_view`) over the coordinator actor. Methods raise the broker's typed errors
(`storage.errors`, e.g. `BrokerNotAvailableError` while the coordinator restarts), never Ray's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Protocol

from actors.core.transactions.coordinator import InitProducerIdResult, TransactionDescription
from actors.core.transactions.transaction_metadata import TxnError
from storage.records.layout import ControlRecordType
from storage.topic_partition import TopicPartition


class TransactionView(Protocol):
    """The transaction coordinator as the protocol handlers see it (see the module docstring)."""

    async def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult: ...

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError: ...

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        """Per partition: NONE if it is in the producer's transaction, TRANSACTION_ABORTABLE if not, or the id's
        error (`TransactionCoordinator.verify_partitions`)."""
        ...

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError: ...

    async def describe(self, transactional_id: str) -> TransactionDescription | None: ...

    async def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> list[TransactionDescription]: ...

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
    ) -> None:
        """A WriteTxnMarkers marker on the partition's leader; the partition's typed errors."""
        ...

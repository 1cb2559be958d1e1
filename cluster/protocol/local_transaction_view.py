"""`TransactionView` over the in-process broker's transaction coordinator, without Ray: what `RayTransactionView`
does over the coordinator actor, for tests and development. Every call appends to `__transaction_state` or writes
markers, so it runs on a worker thread, leaving the event loop to the other connections."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable

from actors.core.broker import InProcessBroker
from actors.core.transactions.coordinator import InitProducerIdResult, TransactionDescription
from actors.core.transactions.markers import write_marker
from actors.core.transactions.transaction_metadata import TxnError
from storage.records.layout import ControlRecordType
from storage.topic_partition import TopicPartition


class LocalTransactionView:
    """The in-process broker's transaction coordinator as the transaction handlers see it."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker
        self._markers = broker.markers

    async def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        coordinator = self.broker.transaction_coordinator
        return await asyncio.to_thread(
            coordinator.init_producer_id, transactional_id, transaction_timeout_ms, producer_id, producer_epoch
        )

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        coordinator = self.broker.transaction_coordinator
        return await asyncio.to_thread(
            coordinator.add_partitions, transactional_id, producer_id, producer_epoch, list(partitions)
        )

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        coordinator = self.broker.transaction_coordinator
        return await asyncio.to_thread(
            coordinator.verify_partitions, transactional_id, producer_id, producer_epoch, list(partitions)
        )

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError:
        coordinator = self.broker.transaction_coordinator
        return await asyncio.to_thread(
            coordinator.end_transaction, transactional_id, producer_id, producer_epoch, commit
        )

    async def describe(self, transactional_id: str) -> TransactionDescription | None:
        return await asyncio.to_thread(self.broker.transaction_coordinator.describe, transactional_id)

    async def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> list[TransactionDescription]:
        coordinator = self.broker.transaction_coordinator
        return await asyncio.to_thread(coordinator.list_transactions, list(states), list(producer_ids), duration_ms)

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
    ) -> None:
        await asyncio.to_thread(
            write_marker, self._markers, topic, partition, producer_id, producer_epoch, coordinator_epoch, result
        )

"""`TransactionView` over the cluster's transaction coordinator actor (`actors.server.transaction_coordinator`).

The actor is started by the first transactional request any listener receives (`actors.clients.broker.
transaction_coordinator`, on a worker thread: the lookup blocks) with this listener's transaction settings, and
found by name afterwards; its handle is forgotten when a call finds the actor gone, so the next request reaches a
restarted coordinator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from typing import Any

from actors.calls import answer
from actors.clients.broker import transaction_coordinator
from actors.core.transactions.coordinator import InitProducerIdResult, TransactionDescription
from actors.core.transactions.transaction_metadata import TxnError
from storage.config.transaction_config import TransactionConfig
from storage.errors import RaybrokerError
from storage.records.layout import ControlRecordType
from storage.topic_partition import TopicPartition


class RayTransactionView:
    """The transaction coordinator of the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self, config: TransactionConfig) -> None:
        self._config = config
        self._handle: Any = None

    async def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        result: InitProducerIdResult = await self._call(
            "init_producer_id", transactional_id, transaction_timeout_ms, producer_id, producer_epoch
        )
        return result

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        error: TxnError = await self._call(
            "add_partitions", transactional_id, producer_id, producer_epoch, list(partitions)
        )
        return error

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        errors: dict[TopicPartition, TxnError] = await self._call(
            "verify_partitions", transactional_id, producer_id, producer_epoch, list(partitions)
        )
        return errors

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError:
        error: TxnError = await self._call("end_transaction", transactional_id, producer_id, producer_epoch, commit)
        return error

    async def describe(self, transactional_id: str) -> TransactionDescription | None:
        found: TransactionDescription | None = await self._call("describe", transactional_id)
        return found

    async def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> list[TransactionDescription]:
        listed: list[TransactionDescription] = await self._call(
            "list_transactions", list(states), list(producer_ids), duration_ms
        )
        return listed

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        result: ControlRecordType,
    ) -> None:
        await self._call("write_marker", topic, partition, producer_id, producer_epoch, coordinator_epoch, result)

    async def _call(self, method: str, *args: Any) -> Any:
        if self._handle is None:
            self._handle = await asyncio.to_thread(transaction_coordinator, self._config)
        try:
            return await answer(getattr(self._handle, method).remote(*args))
        except RaybrokerError as exc:
            if exc.retriable:
                self._handle = None
            raise

"""`TransactionView` over the cluster's transaction coordinator actor (`actors.server.transaction_coordinator`).

The actor is started by the first transactional request any listener receives (`actors.clients.broker.
transaction_coordinator`, on a worker thread: the lookup blocks) with this listener's transaction settings, and
found by name afterwards. When it runs on this listener's node, the calls of a transaction's steady state
(AddPartitionsToTxn, Produce's verification, EndTxn) go over its transaction channel
(`actors.channels.transaction_connection`) instead of Ray. Its handle and channel are forgotten when a call fails
retriably (the actor gone or restarting, a channel connection broken), so the next request reaches a restarted or
moved coordinator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection, Iterable
from typing import Any, TypeVar

from actors.calls import answer, call, this_node_id
from actors.channels.transaction_connection import TransactionConnections
from actors.clients.broker import transaction_coordinator
from actors.core.transactions.coordinator import InitProducerIdResult, TransactionDescription
from actors.core.transactions.transaction_metadata import TxnError
from storage.config.transaction_config import TransactionConfig
from storage.errors import CoordinatorLoadInProgressError, RaybrokerError
from storage.records.layout import ControlRecordType
from storage.topic_partition import TopicPartition

T = TypeVar("T")


class RayTransactionView:
    """The transaction coordinator of the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self, config: TransactionConfig) -> None:
        self._config = config
        self._handle: Any = None
        self._channel: TransactionConnections | None = None
        self._looking_up = asyncio.Lock()

    @property
    def channel_address(self) -> str | None:
        """Where the steady-state calls go now: the coordinator's transaction channel, or None for Ray calls (or
        no coordinator found yet)."""
        return None if self._channel is None else self._channel.address

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
        channel = await self._channel_here()
        if channel is not None:
            return await self._over(channel.add_partitions(transactional_id, producer_id, producer_epoch, partitions))
        error: TxnError = await self._call(
            "add_partitions", transactional_id, producer_id, producer_epoch, list(partitions)
        )
        return error

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        channel = await self._channel_here()
        if channel is not None:
            return await self._over(
                channel.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
            )
        errors: dict[TopicPartition, TxnError] = await self._call(
            "verify_partitions", transactional_id, producer_id, producer_epoch, list(partitions)
        )
        return errors

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError:
        channel = await self._channel_here()
        if channel is not None:
            return await self._over(channel.end_transaction(transactional_id, producer_id, producer_epoch, commit))
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

    async def _coordinator(self) -> Any:
        """The coordinator's handle, looked up (and its channel with it) if it was forgotten."""
        async with self._looking_up:
            if self._handle is None:
                self._handle, self._channel = await asyncio.to_thread(self._look_up)
            return self._handle

    def _look_up(self) -> tuple[Any, TransactionConnections | None]:
        """The coordinator actor (started if need be) and, when it runs on this node, its channel."""
        handle = transaction_coordinator(self._config)
        node, address = call(handle.transaction_channel.remote())
        return handle, TransactionConnections(address) if node and node == this_node_id() else None

    async def _channel_here(self) -> TransactionConnections | None:
        await self._coordinator()
        return self._channel

    async def _over(self, pending: Awaitable[T]) -> T:
        """A call over the channel; a retriable failure forgets the coordinator, as `_call` does."""
        try:
            return await pending
        except RaybrokerError as exc:
            if exc.retriable and not isinstance(exc, CoordinatorLoadInProgressError):
                self._forget()
            raise

    def _forget(self) -> None:
        self._handle = None
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    async def _call(self, method: str, *args: Any) -> Any:
        handle = await self._coordinator()
        try:
            return await answer(getattr(handle, method).remote(*args))
        except RaybrokerError as exc:
            if exc.retriable and not isinstance(exc, CoordinatorLoadInProgressError):
                self._forget()
            raise

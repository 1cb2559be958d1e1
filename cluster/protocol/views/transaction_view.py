"""What the transaction handlers need of the transaction coordinator, written once over a transport.

InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions reach the cluster's one transaction coordinator (`actors.core.transactions.transaction_coordinator`);
Produce
asks it whether a transactional batch's partition is in its producer's transaction; WriteTxnMarkers writes a marker
on a partition's leader (and, on `__consumer_offsets`, completes the producer's transactional offsets in the group
coordinator). `TransactionView` is the seam, beside `BrokerView` and `GroupView`, over a `Transport`
(`cluster.protocol.views.transport`): the coordinator actor with its same-node channel (`TransactionView.on_ray`,
`cluster.protocol.views.transaction_transport`), or the in-process broker's coordinator (`TransactionView.in_process`),
each call on a worker thread since it appends to `__transaction_state` or writes markers. Methods raise the broker's
typed errors (`storage.errors`, e.g. `BrokerNotAvailableError` while the coordinator restarts), never Ray's.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Self

from actors.core.in_process_broker import InProcessBroker
from actors.core.transactions.markers import TransactionMarker, write_marker
from actors.core.transactions.transaction_coordinator import (
    EndTxnResult,
    InitProducerIdResult,
    TransactionCoordinator,
    TransactionDescription,
)
from actors.core.transactions.transaction_metadata import TxnError
from cluster.protocol.views.transaction_transport import RayTransactionTransport
from cluster.protocol.views.transport import InProcessTransport, Transport
from storage.config.transaction_config import TransactionConfig
from storage.topic_partition import TopicPartition


class TransactionView:
    """The transaction coordinator as the protocol handlers see it (see the module docstring)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @classmethod
    def in_process(cls, broker: InProcessBroker) -> Self:
        """The in-process broker's transaction coordinator."""
        coordinator = InProcessTransactionCoordinator(broker)
        return cls(InProcessTransport(lambda: coordinator))

    @classmethod
    def on_ray(cls, config: TransactionConfig) -> Self:
        """The transaction coordinator actor of the Ray cluster this process is connected to, started with `config`
        by the first call if none runs."""
        return cls(RayTransactionTransport(config))

    async def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        return await self._transport.call(
            "init_producer_id", transactional_id, transaction_timeout_ms, producer_id, producer_epoch
        )

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        return await self._transport.call(
            "add_partitions", transactional_id, producer_id, producer_epoch, list(partitions)
        )

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        """Per partition: NONE if it is in the producer's transaction, TRANSACTION_ABORTABLE if not, or the id's
        error (`TransactionCoordinator.verify_partitions`)."""
        return await self._transport.call(
            "verify_partitions", transactional_id, producer_id, producer_epoch, list(partitions)
        )

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError:
        return await self._transport.call("end_transaction", transactional_id, producer_id, producer_epoch, commit)

    async def add_partitions_implicitly(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        """A transactions-v2 producer's partitions, added by the broker that took its batches or offsets
        (`TransactionCoordinator.add_partitions_implicitly`)."""
        return await self._transport.call(
            "add_partitions_implicitly", transactional_id, producer_id, producer_epoch, list(partitions)
        )

    async def end_transaction_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        """EndTxn v5+: the transaction ends with the producer's epoch bumped (`TransactionCoordinator.
        end_transaction_v2`)."""
        return await self._transport.call("end_transaction_v2", transactional_id, producer_id, producer_epoch, commit)

    async def describe(self, transactional_id: str) -> TransactionDescription | None:
        return await self._transport.call("describe", transactional_id)

    async def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> list[TransactionDescription]:
        return await self._transport.call("list_transactions", list(states), list(producer_ids), duration_ms)

    async def write_marker(self, topic: str, partition: int, marker: TransactionMarker) -> None:
        """A WriteTxnMarkers marker on the partition's leader; the partition's typed errors."""
        await self._transport.call("write_marker", topic, partition, marker)


class InProcessTransactionCoordinator:
    """The in-process broker's transaction coordinator as its actor answers: the plain coordinator's methods (the
    broker's current one, which it makes again after `forget_transaction_coordinator`), and a WriteTxnMarkers marker
    written through the broker's markers, as the actor writes it through its own."""

    def __init__(self, broker: InProcessBroker) -> None:
        self._broker = broker
        self._markers = broker.markers

    def __getattr__(self, method: str) -> object:
        coordinator: TransactionCoordinator = self._broker.transaction_coordinator
        return getattr(coordinator, method)

    def write_marker(self, topic: str, partition: int, marker: TransactionMarker) -> None:
        """A WriteTxnMarkers marker, through the broker's markers."""
        write_marker(self._markers, topic, partition, marker)

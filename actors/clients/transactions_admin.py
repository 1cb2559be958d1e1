"""The transactions admin facade: Kafka's Admin `listTransactions` / `describeTransactions` over the transaction
coordinator actor, and `describeProducers` / `abortTransaction` over a partition's leader (what kafka-transactions.sh
uses to end a hanging transaction: one the coordinator no longer knows, whose open records hold the partition's last
stable offset back).

Every method blocks until the coordinator answered and raises the broker's typed errors, never Ray's. A cluster
whose clients never used transactions runs no coordinator actor (it starts with the first transactional request):
it has no transactions to list, and every id is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.calls import call, get_actor
from actors.clients.broker import Broker
from actors.core.transactions.markers import TransactionMarker, write_marker
from actors.core.transactions.transaction_coordinator import TransactionDescription
from actors.options import transaction_coordinator_name
from actors.server.append_route import AppendRoute
from actors.server.transaction_coordinator_actor import marker_writer
from storage.errors import BrokerNotAvailableError, InvalidTxnStateError
from storage.partition.producer_state import NO_TXN, ActiveProducer
from storage.records.layout import ControlRecordType


class Transactions:
    """The transactional ids of the running broker (see the module docstring)."""

    def __init__(self) -> None:
        try:
            self._coordinator: Any = get_actor(transaction_coordinator_name())
        except BrokerNotAvailableError:
            self._coordinator = None

    def list_transactions(
        self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1
    ) -> list[TransactionDescription]:
        """Every transactional id, filtered by state name, producer id and minimum running time (-1: any)."""
        if self._coordinator is None:
            return []
        listed: list[TransactionDescription] = call(
            self._coordinator.list_transactions.remote(list(states), list(producer_ids), duration_ms)
        )
        return listed

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        """The id's producer, state and partitions; None if the coordinator has no such id."""
        if self._coordinator is None:
            return None
        found: TransactionDescription | None = call(self._coordinator.describe.remote(transactional_id))
        return found

    def describe_producers(self, topic: str, partition: int) -> list[ActiveProducer]:
        """The producers the partition's leader remembers, with the start offset of each one's open transaction."""
        producers: list[ActiveProducer] = call(Broker.connect().partition(topic, partition).describe_producers.remote())
        return producers

    def open_transaction_at(self, topic: str, partition: int, start_offset: int) -> ActiveProducer:
        """The producer whose open transaction on the partition starts at `start_offset` (`InvalidTxnStateError` if
        none), as kafka-transactions.sh finds it with DescribeProducers."""
        for producer in self.describe_producers(topic, partition):
            if producer.current_txn_start_offset == start_offset:
                return producer
        opened = sorted(
            producer.current_txn_start_offset
            for producer in self.describe_producers(topic, partition)
            if producer.current_txn_start_offset != NO_TXN
        )
        raise InvalidTxnStateError(
            f"no open transaction of {topic}-{partition} starts at offset {start_offset}; open ones start at "
            f"{', '.join(map(str, opened)) or 'none'}"
        )

    def abort_transaction(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Writes an ABORT marker for the producer on the partition's leader (Kafka's Admin `abortTransaction`, a
        WriteTxnMarkers of one marker): its open transaction there ends, and the last stable offset moves on. The
        partition refuses an epoch or coordinator epoch older than the producer's (`InvalidProducerEpochError`,
        `TransactionCoordinatorFencedError`)."""
        # The partition checked first: a topic or partition that does not exist raises UnknownTopicOrPartitionError.
        Broker.connect().partition(topic, partition)
        route = AppendRoute()
        try:
            marker = TransactionMarker(producer_id, producer_epoch, coordinator_epoch, ControlRecordType.ABORT)
            write_marker(marker_writer(route), topic, partition, marker)
        finally:
            route.close()

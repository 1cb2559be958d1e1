"""`TransactionCoordinatorClient` over Ray: the transactional Python producer's calls to the cluster's transaction
coordinator actor (`actors.server.transaction_coordinator_actor`) and group coordinator actor
(`actors.server.group_coordinator_actor`), the same actors the Kafka listener's transaction handlers call.

The transaction coordinator starts with the first transactional request (Kafka creates `__transaction_state` on
the first lookup of a transactional id): if no listener started it yet, the producer does, with the controller's
broker settings (`transaction.*`). Its handle is looked up again after a retriable failure (the actor restarted).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from actors.calls import call, get_actor
from actors.clients.broker import Broker, transaction_coordinator
from actors.clients.transaction_manager import ConsumerGroupMetadata
from actors.core.groups.group_membership import GroupError
from actors.core.transactions.transaction_coordinator import InitProducerIdResult
from actors.core.transactions.transaction_metadata import TxnError
from actors.options import group_coordinator_name, transaction_coordinator_name
from storage.errors import BrokerNotAvailableError, CoordinatorLoadInProgressError, RaybrokerError
from storage.records.consumer_offsets import OffsetAndMetadata
from storage.topic_partition import TopicPartition


class RayTransactionCoordinatorClient:
    """The coordinators of the Ray cluster `broker` runs on (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._handle: Any = None

    def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        result: InitProducerIdResult = self._call(
            "init_producer_id", transactional_id, transaction_timeout_ms, producer_id, producer_epoch
        )
        return result

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        answer: TxnError = self._call("add_partitions", transactional_id, producer_id, producer_epoch, list(partitions))
        return answer

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnError:
        answer: TxnError = self._call("end_transaction", transactional_id, producer_id, producer_epoch, commit)
        return answer

    def offsets_partition(self, group_id: str) -> int:
        partition: int = call(get_actor(group_coordinator_name()).partition_for.remote(group_id))
        return partition

    def commit_offsets(
        self,
        group: ConsumerGroupMetadata,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[TopicPartition, int],
    ) -> GroupError:
        verdict: GroupError = call(
            get_actor(group_coordinator_name()).commit_transactional.remote(
                group.group_id,
                producer_id,
                producer_epoch,
                group.member_id,
                group.generation_id,
                {tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()},
            )
        )
        return verdict

    def _call(self, method: str, *args: Any) -> Any:
        if self._handle is None:
            self._handle = self._coordinator()
        try:
            return call(getattr(self._handle, method).remote(*args))
        except RaybrokerError as exc:
            if exc.retriable and not isinstance(exc, CoordinatorLoadInProgressError):
                self._handle = None
            raise

    def _coordinator(self) -> Any:
        try:
            return get_actor(transaction_coordinator_name())
        except BrokerNotAvailableError:
            config = call(self._broker.controller.transaction_config.remote())
            return transaction_coordinator(config)

"""The transaction channel: Kafka listeners on the transaction coordinator's node call it over a local socket,
without a Ray call.

A transaction of a Kafka producer costs its listener three calls to the coordinator (AddPartitionsToTxn, the KIP-890
verification of its first Produce, EndTxn). Each was a Ray call of 1-2 ms with every core of the node busy, where the
coordinator's own work is a few tenths of a ms, and submitting and answering them was most of the coordinator's CPU. The
coordinator actor therefore listens, once asked (`TransactionCoordinatorActor.transaction_channel`), on a same-node
socket (`actors.channels.local_sockets`) and runs each frame (`actors.channels.transaction_frames`) as the same actor
method a Ray call runs; the plain coordinator's lock orders them with the calls arriving through Ray. Only those three
calls come this way: InitProducerId, DescribeTransactions, ListTransactions and WriteTxnMarkers stay Ray calls.

Its sockets, threads and limits are the shared `actors.channels.local_channel`'s (same user only, one thread per
connection, `socket.request.max.bytes`); a call that waits (for an id's markers, at most the coordinator's
`COMPLETION_WAIT_S`) holds only its own connection. At most `MAX_CONNECTIONS` are served at once; one over that is
closed unanswered, and its client calls through Ray. A frame that does not parse is answered `InvalidRequestError`
and ends its connection.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from actors.channels.local_channel import LocalChannel
from actors.channels.transaction_frames import (
    RequestKind,
    TransactionRequest,
    decode_request,
    encode_end_txn,
    encode_partition_errors,
    encode_txn_error,
)
from actors.core.transactions.transaction_coordinator import EndTxnResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.topic_partition import TopicPartition

# Connections served at once, each by a thread of its own: a listener opens one per call in flight
# (`actors.channels.transaction_connection.MAX_CONNECTIONS` at most), and a node runs a few listeners.
MAX_CONNECTIONS = 64


class TransactionCalls(Protocol):
    """The coordinator's calls the channel runs (`TransactionCoordinatorActor`'s, as Ray runs them)."""

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError: ...

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]: ...

    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError: ...

    def add_partitions_implicitly(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]: ...

    def end_transaction_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult: ...


class TransactionChannel(LocalChannel[TransactionRequest]):
    """One coordinator's listener for same-node calls; see the module docstring."""

    def __init__(self, calls: TransactionCalls) -> None:
        self._calls = calls
        super().__init__("transactions", max_connections=MAX_CONNECTIONS)

    def _decode(self, body: bytes) -> TransactionRequest:
        return decode_request(body)

    def _run(self, request: TransactionRequest) -> bytes:
        calls = self._calls
        who = (request.transactional_id, request.producer_id, request.producer_epoch)
        if request.kind == RequestKind.ADD_PARTITIONS:
            return encode_txn_error(calls.add_partitions(*who, request.partitions))
        if request.kind == RequestKind.VERIFY_PARTITIONS:
            return encode_partition_errors(calls.verify_partitions(*who, request.partitions))
        if request.kind == RequestKind.ADD_PARTITIONS_IMPLICITLY:
            return encode_partition_errors(calls.add_partitions_implicitly(*who, request.partitions))
        if request.kind == RequestKind.END_TRANSACTION_V2:
            return encode_end_txn(calls.end_transaction_v2(*who, request.commit))
        return encode_txn_error(calls.end_transaction(*who, request.commit))


__all__ = ["MAX_CONNECTIONS", "TransactionCalls", "TransactionChannel"]

"""The transaction channel: Kafka listeners on the transaction coordinator's node call it over a local socket,
without a Ray call.

A transaction of a Kafka producer costs its listener three calls to the coordinator (AddPartitionsToTxn, the KIP-890
verification of its first Produce, EndTxn). Each was a Ray call of 1-2 ms with every core of the node busy, where the
coordinator's own work is a few tenths of a ms, and submitting and answering them was most of the coordinator's CPU. The
coordinator actor therefore listens, once asked (`TransactionCoordinatorActor.transaction_channel`), on a same-node
socket (`actors.channels.local_sockets`) and runs each frame (`actors.channels.transaction_frames`) as the same actor
method a Ray call runs; the plain coordinator's lock orders them with the calls arriving through Ray. Only those three
calls come this way: InitProducerId, DescribeTransactions, ListTransactions and WriteTxnMarkers stay Ray calls.

- Who may connect: processes of this process's own user (`local_sockets.same_user`); others are closed unanswered.
- One thread per connection reads a frame, runs its call and sends its answer, so a call that waits (for an id's
  markers, at most the coordinator's `COMPLETION_WAIT_S`) holds only its own connection; a client keeps one call
  in flight per connection and opens more for more (`actors.channels.transaction_connection`). At most
  `MAX_CONNECTIONS` are served at once; one over that is closed unanswered, and its client calls through Ray.
- A frame larger than Kafka's `socket.request.max.bytes` (100 MiB) ends its connection unanswered; one that does
  not parse is answered `InvalidRequestError` and ends its connection. A bad client never stops the coordinator or
  another connection. A call's unexpected error is answered as a plain `RaybrokerError`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Collection
from typing import Protocol

from actors.channels.append_frames import SIZE, encode_error, over_request_limit
from actors.channels.local_sockets import listening_socket, peer_uid, same_user
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
from storage.errors import InvalidRequestError, RaybrokerError
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# Connections served at once, each by a thread of its own: a listener opens one per call in flight
# (`actors.channels.transaction_connection.MAX_CONNECTIONS` at most), and a node runs a few listeners.
MAX_CONNECTIONS = 64
# How long the channel waits after a failed accept before the next one.
ACCEPT_RETRY_S = 0.1


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


class TransactionChannel:
    """One coordinator's listener for same-node calls; see the module docstring."""

    def __init__(self, calls: TransactionCalls) -> None:
        self._calls = calls
        self._socket, self.address = listening_socket("transactions")
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept_connections, name="raybroker-transaction-channel", daemon=True).start()

    def close(self) -> None:
        """Stops listening and ends every connection (their clients call through Ray from then on)."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def _accept_connections(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError as exc:
                with self._lock:
                    if self._closed:
                        return
                logger.warning("transaction channel %r: accept failed: %s", self.address, exc)
                # A failure that lasts (out of file descriptors) is retried at this pace, not in a busy loop.
                time.sleep(ACCEPT_RETRY_S)
                continue
            if not same_user(connection):
                logger.warning("transaction channel: refused a connection of user %s", peer_uid(connection))
                connection.close()
                continue
            with self._lock:
                admitted = not self._closed and len(self._connections) < MAX_CONNECTIONS
                if admitted:
                    self._connections.add(connection)
            if not admitted:
                connection.close()
                continue
            threading.Thread(
                target=self._serve, args=(connection,), name="raybroker-transaction-connection", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        """A connection's thread: its frames, one at a time, until it ends or sends one that cannot be served."""
        reader = connection.makefile("rb")
        try:
            while True:
                head = reader.read(SIZE.size)
                if len(head) < SIZE.size:
                    return
                (size,) = SIZE.unpack(head)
                if over_request_limit(size, "transaction channel", logger):
                    return
                body = reader.read(size)
                if len(body) < size:
                    return
                answer, keep_open = self._answer(body)
                connection.sendall(answer)
                if not keep_open:
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(connection)
            reader.close()
            connection.close()

    def _answer(self, body: bytes) -> tuple[bytes, bool]:
        """The answer frame for one request, and whether the connection may go on."""
        try:
            request = decode_request(body)
        except InvalidRequestError as exc:
            return encode_error(exc), False
        try:
            return self._run(request), True
        except RaybrokerError as exc:
            return encode_error(exc), True
        except Exception as exc:
            logger.exception("transaction channel: %s of %r failed", request.kind.name, request.transactional_id)
            return encode_error(RaybrokerError(f"the call failed unexpectedly: {type(exc).__name__}")), True

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

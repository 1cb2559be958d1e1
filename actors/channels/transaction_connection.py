"""A Kafka listener's connections to the transaction coordinator's channel (`actors.channels.transaction_channel`),
when the coordinator runs on the listener's node.

`TransactionConnections(address)` is used from one event loop. Each call takes an idle connection, or opens one while
fewer than `MAX_CONNECTIONS` are open (else it waits for one to be free), sends one frame
(`actors.channels.transaction_frames`), awaits its answer and keeps the connection for the next call: the channel serves
a connection's calls one at a time, so concurrent calls (several producers' AddPartitionsToTxn, EndTxn, Produce
verifications) each have a connection of their own, as concurrent Ray calls each have a thread of the actor.

A connection that cannot be opened, breaks, or answers bytes that do not parse (the coordinator's process died or
restarted) fails its call with `BrokerNotAvailableError`, retriable, and is closed: the listener forgets the
coordinator, looks it up again and the client retries, as after a failed Ray call. The coordinator's own typed
errors come back as they would through Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection

from actors.channels.append_frames import SIZE
from actors.channels.transaction_frames import RequestKind, TransactionRequest, decode_answer, encode_request
from actors.core.transactions.transaction_coordinator import EndTxnResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError
from storage.topic_partition import TopicPartition

# Calls in flight at once over one listener's connections; more wait for a free one. The coordinator runs its
# calls one at a time under its lock, so more connections would only wait there instead.
MAX_CONNECTIONS = 8

_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class TransactionConnections:
    """See the module docstring. Not thread-safe: one event loop uses it."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._idle: list[_Stream] = []
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._closed = False

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        request = TransactionRequest(
            RequestKind.ADD_PARTITIONS, transactional_id, producer_id, producer_epoch, tuple(partitions)
        )
        return _txn_error(await self._call(request))

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        request = TransactionRequest(
            RequestKind.VERIFY_PARTITIONS, transactional_id, producer_id, producer_epoch, tuple(partitions)
        )
        answer = await self._call(request)
        if not isinstance(answer, dict):
            raise BrokerNotAvailableError(f"the transaction channel answered a verification with {answer!r}")
        return answer

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> TxnError:
        request = TransactionRequest(
            RequestKind.END_TRANSACTION, transactional_id, producer_id, producer_epoch, commit=commit
        )
        return _txn_error(await self._call(request))

    async def add_partitions_implicitly(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        request = TransactionRequest(
            RequestKind.ADD_PARTITIONS_IMPLICITLY, transactional_id, producer_id, producer_epoch, tuple(partitions)
        )
        answer = await self._call(request)
        if not isinstance(answer, dict):
            raise BrokerNotAvailableError(f"the transaction channel answered an implicit add with {answer!r}")
        return answer

    async def end_transaction_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        request = TransactionRequest(
            RequestKind.END_TRANSACTION_V2, transactional_id, producer_id, producer_epoch, commit=commit
        )
        answer = await self._call(request)
        if not isinstance(answer, EndTxnResult):
            raise BrokerNotAvailableError(f"the transaction channel answered an EndTxn v5 with {answer!r}")
        return answer

    def close(self) -> None:
        """Closes the idle connections; a call in flight closes its own when it ends, and a later call fails with
        `BrokerNotAvailableError`."""
        self._closed = True
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    async def _call(self, request: TransactionRequest) -> TxnError | dict[TopicPartition, TxnError] | EndTxnResult:
        frame = encode_request(request)
        async with self._slots:
            if self._closed:
                raise BrokerNotAvailableError("the transaction channel connections are closed")
            stream = self._idle.pop() if self._idle else None
            try:
                if stream is None:
                    stream = await asyncio.open_unix_connection(self.address)
                reader, writer = stream
                writer.write(frame)
                await writer.drain()
                (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
                answer = decode_answer(await reader.readexactly(size))
            except (OSError, asyncio.IncompleteReadError, InvalidRequestError) as exc:
                _close(stream)
                raise BrokerNotAvailableError(f"the transaction channel connection is broken: {exc!r}") from None
            except BaseException:
                # Cancelled (the client went away) with the answer maybe still to come: the connection's next
                # answer would be this call's.
                _close(stream)
                raise
            if self._closed:
                _close(stream)
            else:
                self._idle.append(stream)
        if isinstance(answer, RaybrokerError):
            raise answer
        return answer


def _txn_error(answer: TxnError | dict[TopicPartition, TxnError] | EndTxnResult) -> TxnError:
    if not isinstance(answer, TxnError):
        raise BrokerNotAvailableError(f"the transaction channel answered {answer!r} where one error was due")
    return answer


def _close(stream: _Stream | None) -> None:
    if stream is not None:
        with contextlib.suppress(RuntimeError):
            stream[1].close()


__all__ = ["MAX_CONNECTIONS", "TransactionConnections"]

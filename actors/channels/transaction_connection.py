"""A Kafka listener's connections to the transaction coordinator's channel (`actors.channels.transaction_channel`),
when the coordinator runs on the listener's node.

`TransactionConnections(address)` is used from one event loop; its connections are the shared
`actors.channels.local_connections`' (at most `MAX_CONNECTIONS` calls in flight, one per connection, more waiting
for a free one). Each call sends one frame (`actors.channels.transaction_frames`) and awaits its answer.
A broken connection or an answer that does not parse fails its call with `BrokerNotAvailableError`, retriable (the
listener forgets the coordinator, looks it up again and the client retries, as after a failed Ray call); the
coordinator's own typed errors come back as they would through Ray.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from actors.channels.local_connections import LocalConnections
from actors.channels.transaction_frames import RequestKind, TransactionRequest, decode_answer, encode_request
from actors.core.transactions.transaction_coordinator import EndTxnResult
from actors.core.transactions.transaction_metadata import TxnError
from storage.errors import BrokerNotAvailableError, RaybrokerError
from storage.topic_partition import TopicPartition

# Calls in flight at once over one listener's connections; more wait for a free one. The coordinator runs its
# calls one at a time under its lock, so more connections would only wait there instead.
MAX_CONNECTIONS = 8


class TransactionConnections(LocalConnections):
    """See the module docstring. Not thread-safe: one event loop uses it."""

    def __init__(self, address: str) -> None:
        super().__init__(address, "transaction", max_connections=MAX_CONNECTIONS)

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
        return await self._partition_errors(
            RequestKind.VERIFY_PARTITIONS, transactional_id, producer_id, producer_epoch, partitions
        )

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
        return await self._partition_errors(
            RequestKind.ADD_PARTITIONS_IMPLICITLY, transactional_id, producer_id, producer_epoch, partitions
        )

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

    @property
    def has_free_connection(self) -> bool:
        """Always: a call waits for a free connection rather than go through Ray (the coordinator runs its calls
        one at a time under its lock, so a Ray call would only wait there instead)."""
        return True

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The coordinator's `method` (one of the channel's) called with these arguments."""
        return await getattr(self, method)(*args, **kwargs)

    async def _partition_errors(
        self,
        kind: RequestKind,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
    ) -> dict[TopicPartition, TxnError]:
        """A call answered with an error per partition (a verification, an implicit add)."""
        answer = await self._call(
            TransactionRequest(kind, transactional_id, producer_id, producer_epoch, tuple(partitions))
        )
        if not isinstance(answer, dict):
            raise BrokerNotAvailableError(f"the transaction channel answered {kind.name} with {answer!r}")
        return answer

    async def _call(self, request: TransactionRequest) -> TxnError | dict[TopicPartition, TxnError] | EndTxnResult:
        answer = await self.exchange(encode_request(request), decode_answer)
        if isinstance(answer, RaybrokerError):
            raise answer
        return answer


def _txn_error(answer: TxnError | dict[TopicPartition, TxnError] | EndTxnResult) -> TxnError:
    if not isinstance(answer, TxnError):
        raise BrokerNotAvailableError(f"the transaction channel answered {answer!r} where one error was due")
    return answer


__all__ = ["MAX_CONNECTIONS", "TransactionConnections"]

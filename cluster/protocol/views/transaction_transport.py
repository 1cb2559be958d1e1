"""The transport to the cluster's transaction coordinator actor (`actors.server.transaction_coordinator_actor`).

The actor is started by the first transactional request any listener receives (`actors.clients.broker.
transaction_coordinator`, on a worker thread: the lookup blocks) with this listener's transaction settings, and
found by name afterwards. When it runs on this listener's node, the calls of a transaction's steady state
(AddPartitionsToTxn, Produce's verification, EndTxn, and transactions v2's implicit adds and EndTxn:
`CHANNEL_METHODS`) go over its transaction channel
(`actors.channels.transaction_connection`) instead of Ray. Its handle and channel are forgotten when a call fails
retriably (the actor gone or restarting, a channel connection broken), so the next request reaches a restarted or
moved coordinator; a coordinator still loading its states is kept.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.calls import call, this_node_id
from actors.channels.transaction_connection import TransactionConnections
from actors.clients.broker import transaction_coordinator
from actors.options import transaction_coordinator_name
from cluster.protocol.views.transport import RayTransport
from storage.config.transaction_config import TransactionConfig
from storage.errors import CoordinatorLoadInProgressError, RaybrokerError

# The coordinator's methods its transaction channel serves, with the same arguments.
CHANNEL_METHODS = frozenset(
    {"add_partitions", "verify_partitions", "end_transaction", "add_partitions_implicitly", "end_transaction_v2"}
)


class RayTransactionTransport(RayTransport):
    """The transaction coordinator of the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self, config: TransactionConfig) -> None:
        super().__init__(transaction_coordinator_name())
        self._config = config
        self._channel: TransactionConnections | None = None
        self._looking_up = asyncio.Lock()

    @property
    def channel_address(self) -> str | None:
        """Where the steady-state calls go now: the coordinator's transaction channel, or None for Ray calls (or
        no coordinator found yet)."""
        return None if self._channel is None else self._channel.address

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method in CHANNEL_METHODS:
            await self._actor()
            channel = self._channel
            if channel is not None:
                try:
                    return await getattr(channel, method)(*args, **kwargs)
                except RaybrokerError as exc:
                    if self._forgets(exc):
                        self._forget()
                    raise
        return await super().call(method, *args, **kwargs)

    async def _actor(self) -> Any:
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

    def _forgets(self, exc: RaybrokerError) -> bool:
        return exc.retriable and not isinstance(exc, CoordinatorLoadInProgressError)

    def _forget(self) -> None:
        super()._forget()
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

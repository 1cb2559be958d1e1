"""The transport to the cluster's transaction coordinator actor (`actors.server.transaction_coordinator_actor`).

The actor is started by the first transactional request any listener receives (`actors.clients.broker.
transaction_coordinator`, on a worker thread: the lookup blocks) with this listener's transaction settings, and
found by name afterwards. When it runs on this listener's node, the calls of a transaction's steady state
(AddPartitionsToTxn, Produce's verification, EndTxn, and transactions v2's implicit adds and EndTxn:
`CHANNEL_METHODS`) go over its transaction channel
(`actors.channels.transaction_connection`) instead of Ray (`RayChannelTransport`). Its handle and channel are
forgotten when a call fails retriably, so the next request reaches a restarted or moved coordinator; a coordinator
still loading its states is kept.
"""

from __future__ import annotations

from typing import Any

from actors.calls import call, this_node_id
from actors.channels.transaction_connection import TransactionConnections
from actors.clients.broker import transaction_coordinator
from actors.options import transaction_coordinator_name
from cluster.protocol.views.transport import RayChannelTransport
from storage.config.transaction_config import TransactionConfig
from storage.errors import CoordinatorLoadInProgressError, RaybrokerError

# The coordinator's methods its transaction channel serves, with the same arguments.
CHANNEL_METHODS = frozenset(
    {"add_partitions", "verify_partitions", "end_transaction", "add_partitions_implicitly", "end_transaction_v2"}
)


class RayTransactionTransport(RayChannelTransport):
    """The transaction coordinator of the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self, config: TransactionConfig) -> None:
        super().__init__(transaction_coordinator_name(), CHANNEL_METHODS)
        self._config = config

    def _look_up(self) -> tuple[Any, TransactionConnections | None]:
        """The coordinator actor (started if need be) and, when it runs on this node, its channel."""
        handle = transaction_coordinator(self._config)
        node, address = call(handle.transaction_channel.remote())
        return handle, TransactionConnections(address) if node and node == this_node_id() else None

    def _forgets(self, exc: RaybrokerError) -> bool:
        return exc.retriable and not isinstance(exc, CoordinatorLoadInProgressError)

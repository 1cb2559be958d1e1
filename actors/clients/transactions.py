"""The transactions admin facade: Kafka's Admin `listTransactions` / `describeTransactions` over the transaction
coordinator actor.

Every method blocks until the coordinator answered and raises the broker's typed errors, never Ray's. A cluster
whose clients never used transactions runs no coordinator actor (it starts with the first transactional request):
it has no transactions to list, and every id is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.calls import call, get_actor
from actors.core.transactions.coordinator import TransactionDescription
from actors.options import transaction_coordinator_name
from storage.errors import BrokerNotAvailableError


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

"""The transaction coordinator actor's start on a real Ray broker: until its periodic thread has made the plain
coordinator and loaded `__transaction_state`, a producer's calls answer `CoordinatorLoadInProgressError` at once
(Kafka's COORDINATOR_LOAD_IN_PROGRESS) rather than wait, and leave no trace: the first InitProducerId answered after
the load gets epoch 0, as on a coordinator that was never asked before. A call that waited instead could run after
its client had given up and asked again, and bump the epoch behind the one the client holds.

The actor's class runs in the test's own process (its seams are the broker's real Ray actors), its load held back
by a gate the test opens."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from actors.core.transactions.transaction_metadata import TxnError
from storage.errors import CoordinatorLoadInProgressError

TIMEOUT_S = 30.0
TXN_ID = "loading-writer"


@pytest.mark.ray
def test_a_producers_calls_answer_load_in_progress_at_once_until_the_coordinator_has_loaded(
    start_test_broker: Callable[..., tuple[Any, Any]],
) -> None:
    from actors.calls import call
    from actors.server.transaction_coordinator_actor import TransactionCoordinatorActor

    broker, _ = start_test_broker(log_dirs_count=1, transaction_state_log_num_partitions="2")
    call(broker.controller.create_topic.remote("loading", 1))
    config = call(broker.controller.transaction_config.remote())
    gate = threading.Event()

    class GatedLoad(TransactionCoordinatorActor):
        def ready(self) -> int:
            assert gate.wait(TIMEOUT_S), "the test never opened the gate"
            return super().ready()

    coordinator = GatedLoad(config)
    try:
        started = time.monotonic()
        refused: list[Callable[[], object]] = [
            lambda: coordinator.init_producer_id(TXN_ID, 60_000, -1, -1),
            lambda: coordinator.add_partitions(TXN_ID, 0, 0, [("loading", 0)]),
            lambda: coordinator.verify_partitions(TXN_ID, 0, 0, [("loading", 0)]),
            lambda: coordinator.end_transaction(TXN_ID, 0, 0, True),
        ]
        for attempt in refused * 3:
            with pytest.raises(CoordinatorLoadInProgressError):
                attempt()
        assert time.monotonic() - started < 1.0, "a call waited for the load"
        gate.set()
        assert coordinator.ready() == 2
        first = coordinator.init_producer_id(TXN_ID, 60_000, -1, -1)
        assert (first.error, first.producer_epoch) == (TxnError.NONE, 0)
        assert coordinator.add_partitions(TXN_ID, first.producer_id, 0, [("loading", 0)]) == TxnError.NONE
        described = coordinator.describe(TXN_ID)
        assert described is not None
        assert (described.state, described.producer_epoch) == ("Ongoing", 0)
    finally:
        gate.set()
        coordinator.stop()

"""A `TransactionView` over the real coordinator actor (`RayTransactionTransport`) on a one-node Ray broker: the
steady-state calls of a transaction go over the coordinator's transaction channel (its node is the listener's), and
when the coordinator's process dies and Ray restarts it, the call that finds the channel broken fails as retriable,
the transport looks the coordinator up again, and the next calls reach the new process over its new channel with the
transactions intact."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import ray
from ray.exceptions import RayActorError

from actors.calls import call, get_actor
from actors.core.transactions.transaction_metadata import TxnError
from actors.options import transaction_coordinator_name
from cluster.protocol.views.transaction_transport import RayTransactionTransport
from cluster.protocol.views.transaction_view import TransactionView
from storage.config.transaction_config import TransactionConfig
from storage.errors import RaybrokerError
from storage.records.record_batch import RecordBatch, iter_batches

pytestmark = pytest.mark.ray

TOPIC = "view-orders"
TXN_ID = "view-ledger"
DEADLINE_S = 60.0


def process_id(handle: Any) -> int:
    return int(ray.get(handle.__ray_call__.remote(lambda _: os.getpid())))


def wait_for_new_process(name: str, old_pid: int) -> None:
    """`ray.kill` returns before the actor is dead and calls fail while Ray restarts it: asks until another process
    answers."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            if process_id(get_actor(name)) != old_pid:
                return
        except (RayActorError, RaybrokerError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{name} was not restarted within {DEADLINE_S} s")


async def until_answered(attempt: Callable[[], Any]) -> Any:
    """A client's retries: the call again while it fails retriably (a coordinator restarting, a channel broken)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return await attempt()
        except RaybrokerError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def committed_transaction(view: TransactionView, producer_id: int, epoch: int) -> list[Any]:
    """One transaction's steady-state calls, each retried as a client retries it."""
    partitions = [(TOPIC, 0)]
    return [
        await until_answered(lambda: view.add_partitions(TXN_ID, producer_id, epoch, partitions)),
        await until_answered(lambda: view.verify_partitions(TXN_ID, producer_id, epoch, partitions)),
        await until_answered(lambda: view.end_transaction(TXN_ID, producer_id, epoch, True)),
    ]


def described_state() -> str:
    described = call(get_actor(transaction_coordinator_name()).describe.remote(TXN_ID))
    return "" if described is None else str(described.state)


def wait_for_state(state: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while described_state() != state:
        assert time.monotonic() < deadline, f"{TXN_ID} never reached {state}"
        time.sleep(0.02)


def test_the_steady_state_goes_over_the_channel_and_survives_a_coordinator_restart(
    start_test_broker: Callable[..., tuple[Any, Any]],
) -> None:
    broker, _ = start_test_broker()
    call(broker.controller.create_topic.remote(TOPIC, 1))
    transport = RayTransactionTransport(TransactionConfig(transaction_state_log_num_partitions=1))
    view = TransactionView(transport)

    async def scenario() -> None:
        initialized = await until_answered(lambda: view.init_producer_id(TXN_ID, 60_000, -1, -1))
        assert initialized.error == TxnError.NONE
        producer_id, epoch = initialized.producer_id, initialized.producer_epoch
        first = await committed_transaction(view, producer_id, epoch)
        assert first == [TxnError.NONE, {(TOPIC, 0): TxnError.NONE}, TxnError.NONE]
        old_address = transport.channel_address
        assert old_address is not None
        await asyncio.to_thread(wait_for_state, "CompleteCommit")

        old_pid = process_id(get_actor(transaction_coordinator_name()))
        ray.kill(get_actor(transaction_coordinator_name()), no_restart=False)
        await asyncio.to_thread(wait_for_new_process, transaction_coordinator_name(), old_pid)

        second = await committed_transaction(view, producer_id, epoch)
        assert second == [TxnError.NONE, {(TOPIC, 0): TxnError.NONE}, TxnError.NONE]
        assert transport.channel_address not in (None, old_address)
        await asyncio.to_thread(wait_for_state, "CompleteCommit")

    asyncio.run(asyncio.wait_for(scenario(), DEADLINE_S * 4))
    markers = [batch.end_transaction_marker().control_type.name for batch in _batches(broker) if batch.is_control]
    assert markers == ["COMMIT", "COMMIT"]


def _batches(broker: Any) -> list[RecordBatch]:
    return list(iter_batches(call(broker.partition(TOPIC, 0).read.remote(0, 1 << 20))))

"""A connection's pipelined Produce requests reach a partition's log in the order they were sent, whatever each one
awaits first: Kafka's broker reads one request per connection at a time, and a producer's sequence numbers rely on
it. The listener serves the in-process broker over a real socket; the transaction coordinator's KIP-890
verification answers the requests in the reverse of their order (each waits less than the one before it, as a
coordinator round trip does when the first request's is slow). The same holds for Produce v13, which names topics by
id: a request may first wait for the controller's topic names, and here those lookups too end in reverse order (the
transactions-v2 requests are added to the transaction implicitly). The oracle is the order of the sequence numbers the
client sent: the log must hold them in that order, and every request must be answered NONE, as Kafka answers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Iterator, Mapping

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.transactions.transaction_metadata import TxnError
from cluster.protocol.handlers.produce import PRODUCE_KEY
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from cluster.protocol.views.transport import Transport
from storage.records.record_batch import RecordBatchBuilder, iter_batches
from tests.cluster.protocol.helpers import leader_log, pipelined, start_local_listener

TOPIC = "pipelined"
TXN = "pipelined-txn"
REQUESTS = 8
RECORDS_PER_BATCH = 3
# The first verification waits REQUESTS * STEP_S, each later one STEP_S less: they end in reverse order.
STEP_S = 0.03
PRODUCE_VERSION = 9
TOPIC_ID_VERSION = 13


class ReversingVerification(TransactionView):
    """The in-process coordinator's answers, the k-th verification delayed by (REQUESTS - k) * STEP_S."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self.calls = 0

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[tuple[str, int]]
    ) -> dict[tuple[str, int], TxnError]:
        delay_s = max(REQUESTS - self.calls, 0) * STEP_S
        self.calls += 1
        await asyncio.sleep(delay_s)
        return await super().verify_partitions(transactional_id, producer_id, producer_epoch, partitions)


@pytest.fixture
def served(broker: InProcessBroker) -> Iterator[tuple[KafkaListener, ReversingVerification]]:
    broker.controller.create_topic(TOPIC, 1)
    transactions = ReversingVerification.in_process(broker)
    with KafkaListener(
        {"listeners": "PLAINTEXT://127.0.0.1:0"},
        InProcessBrokerView(broker),
        SecurityView.in_process(broker.controller),
        groups=GroupView.in_process(broker),
        transactions=transactions,
    ) as listener:
        yield listener, transactions


def transactional_batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True
    )
    for index in range(RECORDS_PER_BATCH):
        builder.append(None, b"%d" % (sequence + index), timestamp=1000)
    return builder.build()


def produce_body(records: bytes) -> object:
    return build(
        load_request_schema(PRODUCE_KEY, PRODUCE_VERSION),
        {
            "transactional_id": TXN,
            "acks": -1,
            "timeout": 30000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
        },
    )


def pipeline(port: int, bodies: list[object], version: int = PRODUCE_VERSION) -> list[tuple[int, ErrorCode]]:
    """Sends every request before reading any answer, on one connection; (correlation id, error) of each answer."""
    answered = asyncio.run(pipelined(port, PRODUCE_KEY, version, bodies))
    return [(correlation_id, body.responses[0].partition_responses[0].error_code) for correlation_id, body in answered]


def test_pipelined_transactional_batches_land_in_send_order_when_their_verifications_end_in_reverse(
    broker: InProcessBroker, served: tuple[KafkaListener, ReversingVerification]
) -> None:
    listener, transactions = served
    coordinator = broker.transaction_coordinator
    initialized = coordinator.init_producer_id(TXN, 60_000)
    producer_id, epoch = initialized.producer_id, initialized.producer_epoch
    assert coordinator.add_partitions(TXN, producer_id, epoch, [(TOPIC, 0)]) == TxnError.NONE
    sequences = [index * RECORDS_PER_BATCH for index in range(REQUESTS)]
    bodies = [produce_body(transactional_batch(producer_id, epoch, sequence)) for sequence in sequences]

    answers = pipeline(listener.port, bodies)

    assert transactions.calls == REQUESTS
    assert answers == [(index, ErrorCode.none) for index in range(REQUESTS)]
    log = leader_log(InProcessBrokerView(broker), TOPIC, 0)
    stored = [batch.base_sequence for batch in iter_batches(log.read(0, 1 << 20).records)]
    assert stored == sequences


class ReversingNames(InProcessBrokerView):
    """The in-process broker's view whose k-th topic-name lookup is delayed by (REQUESTS - k) * STEP_S, as if each
    asked the controller afresh and the first answer were the slowest."""

    def __init__(self, broker: InProcessBroker) -> None:
        super().__init__(broker)
        self.lookups = 0

    async def topic_names(self, refresh: bool = False) -> Mapping[uuid.UUID, str]:
        delay_s = max(REQUESTS - self.lookups, 0) * STEP_S
        self.lookups += 1
        await asyncio.sleep(delay_s)
        return await super().topic_names(refresh=True)


def test_pipelined_v13_batches_land_in_send_order_when_their_topic_lookups_end_in_reverse(
    broker: InProcessBroker,
) -> None:
    broker.controller.create_topic(TOPIC, 1)
    view = ReversingNames(broker)
    topic_id = broker.controller.describe_topic(TOPIC).topic_id
    coordinator = broker.transaction_coordinator
    initialized = coordinator.init_producer_id(TXN, 60_000)
    producer_id, epoch = initialized.producer_id, initialized.producer_epoch
    sequences = [index * RECORDS_PER_BATCH for index in range(REQUESTS)]
    bodies = [
        build(
            load_request_schema(PRODUCE_KEY, TOPIC_ID_VERSION),
            {
                "transactional_id": TXN,
                "acks": -1,
                "timeout": 30000,
                "topic_data": [
                    {
                        "topic_id": topic_id,
                        "partition_data": [{"index": 0, "records": transactional_batch(producer_id, epoch, sequence)}],
                    }
                ],
            },
        )
        for sequence in sequences
    ]
    with start_local_listener(broker, view=view) as listener:
        answers = pipeline(listener.port, bodies, TOPIC_ID_VERSION)
    assert view.lookups >= REQUESTS
    assert answers == [(index, ErrorCode.none) for index in range(REQUESTS)]
    stored = [batch.base_sequence for batch in iter_batches(leader_log(view, TOPIC, 0).read(0, 1 << 20).records)]
    assert stored == sequences

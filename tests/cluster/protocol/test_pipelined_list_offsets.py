"""A consumer's first contact with a topic resets each partition's offset with a ListOffsets of its own (librdkafka
sends thousands at once over one connection): the listener handles a connection's pipelined ListOffsets side by
side, as it does Produce and Fetch, and still answers them in the order they were sent, each with its own
partition's offset. The oracle is the records appended to each partition (partition k holds k + 1 records, so its
latest offset is k + 1) and the order of the correlation ids; the view's answers are delayed so that they end in
the reverse of the order they were asked in."""

from __future__ import annotations

import asyncio

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.handlers.list_offsets import LIST_OFFSETS_KEY
from cluster.protocol.messages import build
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.partition.log_read import LATEST_TIMESTAMP
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import leader_log, pipelined, start_local_listener

TOPIC = "first-contact"
REQUESTS = 8
# The k-th answer waits (REQUESTS - k) * STEP_S: asked one after the other they would take REQUESTS^2 / 2 steps.
STEP_S = 0.05
VERSION = 7


class ReversingOffsets(InProcessBrokerView):
    """The in-process broker's view whose k-th `list_offset` is delayed by (REQUESTS - k) * STEP_S, counting how many
    were under way at once."""

    def __init__(self, broker: InProcessBroker) -> None:
        super().__init__(broker)
        self.asked = 0
        self.under_way = 0
        self.most_under_way = 0

    async def list_offset(self, *args: object) -> object:
        delay_s = max(REQUESTS - self.asked, 0) * STEP_S
        self.asked += 1
        self.under_way += 1
        self.most_under_way = max(self.most_under_way, self.under_way)
        try:
            await asyncio.sleep(delay_s)
            return await super().list_offset(*args)  # type: ignore[arg-type]
        finally:
            self.under_way -= 1


def list_offsets_body(partition: int) -> object:
    return build(
        load_request_schema(LIST_OFFSETS_KEY, VERSION),
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": partition, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}
                    ],
                }
            ],
        },
    )


def test_pipelined_list_offsets_run_side_by_side_and_are_answered_in_send_order(broker: InProcessBroker) -> None:
    broker.controller.create_topic(TOPIC, REQUESTS)
    view = ReversingOffsets(broker)
    for partition in range(REQUESTS):
        builder = RecordBatchBuilder()
        for index in range(partition + 1):
            builder.append(None, b"%d" % index, timestamp=1000)
        leader_log(view, TOPIC, partition).append(builder.build())
    with start_local_listener(broker, view=view) as listener:
        bodies = [list_offsets_body(p) for p in range(REQUESTS)]
        answered = asyncio.run(pipelined(listener.port, LIST_OFFSETS_KEY, VERSION, bodies))
    found = [(correlation_id, response.topics[0].partitions[0]) for correlation_id, response in answered]
    answers = [(correlation_id, p.partition_index, p.error_code, p.offset) for correlation_id, p in found]
    assert answers == [(p, p, ErrorCode.none, p + 1) for p in range(REQUESTS)]
    assert view.most_under_way == REQUESTS

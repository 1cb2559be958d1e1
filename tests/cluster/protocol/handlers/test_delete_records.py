"""DeleteRecords on the in-process broker: the new log start offset, -1 as the high watermark, and Kafka's codes for
an offset beyond the high watermark and an unknown partition."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.handlers.delete_records import DELETE_RECORDS_KEY, DeleteRecordsHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from tests.cluster.protocol.helpers import answer, batch, run

VERSIONS = range(SERVED[DELETE_RECORDS_KEY].min_version, SERVED[DELETE_RECORDS_KEY].max_version + 1)


@pytest.mark.parametrize("version", VERSIONS)
def test_records_below_the_offset_go(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("trimmed", 2))
    for partition in (0, 1):
        run(view.append("trimmed", partition, batch((None, b"v%d" % i, 1000 + i) for i in range(10))))
    partitions = [{"partition_index": 0, "offset": 4}, {"partition_index": 1, "offset": -1}]
    topics = [{"name": "trimmed", "partitions": partitions}]
    response = answer(DeleteRecordsHandler(view), DELETE_RECORDS_KEY, version, {"topics": topics, "timeout": 30000})
    assert [(p.partition_index, p.error_code, p.low_watermark) for p in response.topics[0].partitions] == [
        (0, ErrorCode.none, 4),
        (1, ErrorCode.none, 10),
    ]
    assert [run(view.offsets("trimmed", partition)).log_start_offset for partition in (0, 1)] == [4, 10]


def test_an_offset_beyond_the_high_watermark_and_unknown_partitions_are_refused(view: InProcessBrokerView) -> None:
    run(view.create_topic("short", 1))
    run(view.append("short", 0, batch([(None, b"only", 1000)])))
    topics = [
        {"name": "short", "partitions": [{"partition_index": 0, "offset": 5}, {"partition_index": 3, "offset": 0}]},
        {"name": "missing", "partitions": [{"partition_index": 0, "offset": 0}]},
    ]
    response = answer(DeleteRecordsHandler(view), DELETE_RECORDS_KEY, 2, {"topics": topics, "timeout": 30000})
    assert [(p.error_code, p.low_watermark) for t in response.topics for p in t.partitions] == [
        (ErrorCode.offset_out_of_range, -1),
        (ErrorCode.unknown_topic_or_partition, -1),
        (ErrorCode.unknown_topic_or_partition, -1),
    ]
    assert run(view.offsets("short", 0)).log_start_offset == 0

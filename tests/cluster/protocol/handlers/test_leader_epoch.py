"""OffsetForLeaderEpoch over real storage logs: the one epoch (0) ends at the log end offset; undefined and
unknown epochs, fencing by `current_leader_epoch`, and unknown partitions answer as Kafka's leader does."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.handlers.leader_epoch import OFFSET_FOR_LEADER_EPOCH_KEY, OffsetForLeaderEpochHandler
from cluster.protocol.router import SERVED
from tests.cluster.protocol.support import LogBrokerView, answer, batch, run

VERSIONS = range(SERVED[OFFSET_FOR_LEADER_EPOCH_KEY].min_version, SERVED[OFFSET_FOR_LEADER_EPOCH_KEY].max_version + 1)
CASES = [
    # (current_leader_epoch, leader_epoch) -> (error, leader_epoch, end_offset); log start 2, log end 7
    ((-1, 0), (ErrorCode.none, 0, 7)),
    ((0, 0), (ErrorCode.none, 0, 7)),
    ((-1, -1), (ErrorCode.none, -1, -1)),
    ((-1, 5), (ErrorCode.none, -1, -1)),
    ((-1, -3), (ErrorCode.none, -3, 2)),
    ((1, 0), (ErrorCode.unknown_leader_epoch, -1, -1)),
    ((-2, 0), (ErrorCode.fenced_leader_epoch, -1, -1)),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_epoch_end_offsets_as_kafkas_leader_answers(view: LogBrokerView, version: int) -> None:
    run(view.create_topic("epochs", 1))
    run(view.append("epochs", 0, batch((None, b"v", 1000 + i) for i in range(7))))
    run(view.delete_records("epochs", 0, 2))
    partitions = [
        {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch} for (current, epoch), _ in CASES
    ]
    partitions.append({"partition": 4, "current_leader_epoch": -1, "leader_epoch": 0})
    topics = [{"topic": "epochs", "partitions": partitions}, {"topic": "missing", "partitions": partitions[:1]}]
    handler = OffsetForLeaderEpochHandler(view)
    response = answer(handler, OFFSET_FOR_LEADER_EPOCH_KEY, version, {"replica_id": -1, "topics": topics})
    answers = [(p.error_code, p.leader_epoch, p.end_offset) for t in response.topics for p in t.partitions]
    assert answers == [
        *(expected for _, expected in CASES),
        (ErrorCode.unknown_topic_or_partition, -1, -1),
        (ErrorCode.unknown_topic_or_partition, -1, -1),
    ]

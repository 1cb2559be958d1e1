"""OffsetForLeaderEpoch on the in-process broker: a new partition's epoch (0) ends at the log end offset; a log that
several leaders wrote answers each epoch's end from its leader-epoch cache; undefined and unknown epochs, fencing
by `current_leader_epoch`, and unknown partitions answer as Kafka's leader does."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from cluster.protocol.handlers.leader_epoch import OFFSET_FOR_LEADER_EPOCH_KEY, OffsetForLeaderEpochHandler
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from storage.records.layout import PARTITION_LEADER_EPOCH_OFFSET
from tests.cluster.protocol.helpers import answer, batch, leader_log, run

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
def test_epoch_end_offsets_as_kafkas_leader_answers(view: InProcessBrokerView, version: int) -> None:
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


def led_in(epoch: int, base_offset: int, count: int) -> bytes:
    """A batch of `count` records at `base_offset` as a leader in `epoch` stored it."""
    out = bytearray(batch((None, b"v", 1000 + i) for i in range(count)))
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, PARTITION_LEADER_EPOCH_OFFSET, epoch)
    return bytes(out)


# Epochs 0 (offsets 0-3), 2 (4-9) and 5 (10-11) wrote the log, as after two leader changes; epoch 5 leads now.
EPOCH_CASES = [
    ((-1, 5), (ErrorCode.none, 5, 12)),
    ((5, 2), (ErrorCode.none, 2, 10)),
    ((-1, 3), (ErrorCode.none, 2, 10)),
    ((-1, 1), (ErrorCode.none, 0, 4)),
    ((-1, 0), (ErrorCode.none, 0, 4)),
    ((-1, 6), (ErrorCode.none, -1, -1)),
    ((4, 2), (ErrorCode.fenced_leader_epoch, -1, -1)),
    ((6, 2), (ErrorCode.unknown_leader_epoch, -1, -1)),
]


def test_each_epoch_of_a_log_several_leaders_wrote_ends_where_the_next_began(view: InProcessBrokerView) -> None:
    run(view.create_topic("led", 2))
    log = leader_log(view, "led", 0)
    for epoch, base, count in [(0, 0, 4), (2, 4, 6), (5, 10, 2)]:
        log.append_as_follower(led_in(epoch, base, count))
    partitions = [
        {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch} for (current, epoch), _ in EPOCH_CASES
    ]
    # Partition 1 is new and empty: its leader's epoch 0 starts and ends at offset 0.
    partitions.append({"partition": 1, "current_leader_epoch": 0, "leader_epoch": 0})
    response = answer(
        OffsetForLeaderEpochHandler(view),
        OFFSET_FOR_LEADER_EPOCH_KEY,
        SERVED[OFFSET_FOR_LEADER_EPOCH_KEY].max_version,
        {"replica_id": -1, "topics": [{"topic": "led", "partitions": partitions}]},
    )
    answers = [(p.error_code, p.leader_epoch, p.end_offset) for t in response.topics for p in t.partitions]
    assert answers == [*(expected for _, expected in EPOCH_CASES), (ErrorCode.none, 0, 0)]

"""ListOffsets: earliest, latest, a timestamp and the max timestamp name the offsets Kafka names (oracle: the
records appended); the tiered-storage sentinels answer as Kafka's without tiered storage; no match is offset -1;
unknown partitions fail alone; every served version encodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.list_offsets import LIST_OFFSETS_KEY, ListOffsetsHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from tests.cluster.protocol.helpers import batch, leader_log, request, run

VERSIONS = range(SERVED[LIST_OFFSETS_KEY].min_version, SERVED[LIST_OFFSETS_KEY].max_version + 1)
TIMESTAMPS = [1000, 3000, 2000, 5000]


def list_offsets(view: InProcessBrokerView, version: int, wanted: list[tuple[str, int, int]]) -> list[Any]:
    """Each (topic, partition, timestamp)'s answer, one request each (Kafka refuses a partition named twice)."""
    return [answer for each in wanted for answer in list_together(view, version, [each])]


def list_together(
    view: InProcessBrokerView,
    version: int,
    wanted: list[tuple[str, int, int]],
    leader_epochs: Mapping[tuple[str, int], int] | None = None,
) -> list[Any]:
    """The answers to one request for every (topic, partition, timestamp) of `wanted`, with the
    `current_leader_epoch` of partitions in `leader_epochs` (v4+; -1 for the others)."""
    body = build(
        load_request_schema(LIST_OFFSETS_KEY, version),
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "current_leader_epoch": (leader_epochs or {}).get((topic, p), -1),
                            "timestamp": ts,
                        }
                    ],
                }
                for topic, p, ts in wanted
            ],
        },
    )
    response = run(ListOffsetsHandler(view)(request(body)))
    _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(LIST_OFFSETS_KEY, version))
    return [p for t in decoded.topics for p in t.partitions]


@pytest.mark.parametrize("version", VERSIONS)
def test_sentinels_and_timestamps_name_kafkas_offsets(view: InProcessBrokerView, version: int) -> None:
    run(view.create_topic("t", 1))
    for timestamp in TIMESTAMPS:
        leader_log(view, "t", 0).append(batch([(None, b"v", timestamp)]))
    leader_log(view, "t", 0).delete_records(1)
    wanted = [("t", 0, -2), ("t", 0, -1), ("t", 0, 2500), ("t", 0, 9999)]
    if version >= 7:
        wanted.append(("t", 0, -3))
    answers = list_offsets(view, version, wanted)
    assert [(a.error_code, a.offset) for a in answers[:4]] == [
        (ErrorCode.none, 1),  # log start, after DeleteRecords
        (ErrorCode.none, 4),  # the high watermark
        (ErrorCode.none, 1),  # first record at or after 2500: offset 1 (3000)
        (ErrorCode.none, -1),  # none that late
    ]
    assert answers[2].timestamp == 3000
    if version >= 7:
        assert (answers[4].offset, answers[4].timestamp) == (3, 5000)


@pytest.mark.parametrize("version", VERSIONS)
def test_tiered_storage_sentinels_as_kafka_answers_them_without_tiered_storage(
    view: InProcessBrokerView, version: int
) -> None:
    """-4 (earliest local, v8+) is the log start offset, every segment being local; -5 (latest tiered, v9+) is offset
    -1; a sentinel older than the version, or a negative timestamp that is none, is UNSUPPORTED_VERSION."""
    run(view.create_topic("t", 1))
    for timestamp in TIMESTAMPS:
        leader_log(view, "t", 0).append(batch([(None, b"v", timestamp)]))
    leader_log(view, "t", 0).delete_records(2)
    answers = list_offsets(view, version, [("t", 0, -3), ("t", 0, -4), ("t", 0, -5), ("t", 0, -6)])
    unsupported = (ErrorCode.unsupported_version, -1, -1)
    assert [(a.error_code, a.offset, a.timestamp) for a in answers] == [
        (ErrorCode.none, 3, 5000) if version >= 7 else unsupported,
        (ErrorCode.none, 2, -1) if version >= 8 else unsupported,
        (ErrorCode.none, -1, -1) if version >= 9 else unsupported,
        unsupported,
    ]
    if version >= 9:
        assert answers[2].leader_epoch == -1
    assert list_offsets(view, 9, [("gone", 0, -5)])[0].error_code == ErrorCode.unknown_topic_or_partition


def test_an_unknown_partition_fails_alone(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    answers = list_offsets(view, 7, [("t", 0, -1), ("gone", 0, -1)])
    assert [a.error_code for a in answers] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]


def test_a_partition_named_twice_in_a_request_is_an_invalid_request(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 2))
    answers = list_together(view, 7, [("t", 0, -1), ("t", 1, -1), ("t", 0, -2)])
    assert [(a.partition_index, a.error_code) for a in answers] == [
        (0, ErrorCode.invalid_request),
        (1, ErrorCode.none),
        (0, ErrorCode.invalid_request),
    ]


# Partition 0 of `re_elected` is led in epoch 1: the `current_leader_epoch` a client sends for it, and its answer.
FENCING = [
    (-1, ErrorCode.none),  # not checked
    (1, ErrorCode.none),  # the leader's epoch
    (0, ErrorCode.fenced_leader_epoch),  # the client's metadata names the lost leader
    (-2, ErrorCode.fenced_leader_epoch),  # only -1 is "not checked" here, as in Kafka's `KafkaApis`
    (2, ErrorCode.unknown_leader_epoch),  # an epoch the leader has not been told of
]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 4])
@pytest.mark.parametrize(("current_leader_epoch", "error"), FENCING)
def test_a_client_leader_epoch_older_or_newer_than_the_leaders_is_fenced_per_partition(
    re_elected: InProcessBrokerView, version: int, current_leader_epoch: int, error: ErrorCode
) -> None:
    """Kafka's `Partition.fetchOffsetForTimestamp` checks the epoch first: the checked partition answers its error
    with offset and timestamp -1, for the latest offset and (v9+) the latest tiered one alike; partition 1, listed
    beside it in its own epoch (0), is answered as ever (its high watermark, 2)."""
    for partition in range(2):
        run(re_elected.append("led", partition, batch([(None, b"v", 1000), (None, b"w", 2000)])))
    timestamps = [-1, -5] if version >= 9 else [-1]
    for timestamp in timestamps:
        answers = list_together(
            re_elected,
            version,
            [("led", 0, timestamp), ("led", 1, -1)],
            leader_epochs={("led", 0): current_leader_epoch, ("led", 1): 0},
        )
        found = (2, -1) if timestamp == -1 else (-1, -1)
        expected = found if error == ErrorCode.none else (-1, -1)
        assert [(a.partition_index, a.error_code, a.offset, a.timestamp) for a in answers] == [
            (0, error, *expected),
            (1, ErrorCode.none, 2, -1),
        ]


@pytest.mark.parametrize("version", [1, 3])
def test_versions_before_4_carry_no_leader_epoch_and_are_not_fenced(
    re_elected: InProcessBrokerView, version: int
) -> None:
    run(re_elected.append("led", 0, batch([(None, b"v", 1000)])))
    answers = list_together(re_elected, version, [("led", 0, -1)], leader_epochs={("led", 0): 0})
    assert [(a.error_code, a.offset) for a in answers] == [(ErrorCode.none, 1)]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 4])
def test_offsets_found_are_answered_with_their_leader_epoch(re_elected: InProcessBrokerView, version: int) -> None:
    """As Kafka's `UnifiedLog.fetchOffsetByTimestamp`: a record's batch's epoch, the newest for -1, the oldest for -2;
    on partition 0, re-elected, records written after the election carry epoch 1, on partition 1 everything is 0."""
    for partition in range(2):
        run(re_elected.append("led", partition, batch([(None, b"v", 1000), (None, b"w", 2000)])))
    requests = [("led", 0, -1), ("led", 0, -2), ("led", 0, 1500), ("led", 1, -1), ("led", 1, 1500)]
    if version >= 7:
        requests.append(("led", 1, -3))
    answers = [list_offsets(re_elected, version, [one])[0] for one in requests]
    expected = [(2, 1), (0, 1), (1, 1), (2, 0), (1, 0), (1, 0)][: len(requests)]
    assert [(a.offset, a.leader_epoch) for a in answers] == expected
    assert all(a.error_code == ErrorCode.none for a in answers)

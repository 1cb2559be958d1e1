"""Fetch: records come back as produced with the partition's offsets; limits per partition and per response
follow Kafka's rules; errors are per partition; sessions are refused; every served version encodes."""

from __future__ import annotations

from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.metrics.names import BYTES_OUT
from actors.metrics.recorder import MetricsRecorder
from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.fetch import FETCH_KEY, FetchHandler
from cluster.protocol.local_broker_view import LocalBrokerView
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from tests.cluster.protocol.helpers import batch, leader_log, records_of, request, run

VERSIONS = range(SERVED[FETCH_KEY].min_version, SERVED[FETCH_KEY].max_version + 1)


def fetch(
    view: LocalBrokerView,
    version: int,
    positions: dict[tuple[str, int], int],
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    session_id: int = 0,
    metrics: MetricsRecorder | None = None,
) -> tuple[Any, dict[tuple[str, int], Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in positions.items():
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max_bytes,
            }
        )
    body = build(
        load_request_schema(FETCH_KEY, version),
        {
            "cluster_id": None,
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": -1,
            "topics": [{"topic": name, "partitions": parts} for name, parts in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    response = run(FetchHandler(view, metrics=metrics or MetricsRecorder())(request(body)))
    _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(FETCH_KEY, version))
    return decoded, {(t.topic, p.partition_index): p for t in decoded.responses for p in t.partitions}


def fill(view: LocalBrokerView, topic: str, partition: int, count: int, value_size: int = 10) -> None:
    for index in range(count):
        leader_log(view, topic, partition).append(batch([(b"%d" % index, bytes(value_size), 1000 + index)]))


@pytest.mark.parametrize("version", VERSIONS)
def test_records_come_back_with_the_partition_offsets(view: LocalBrokerView, version: int) -> None:
    run(view.create_topic("t", 2))
    fill(view, "t", 0, 3)
    _, answers = fetch(view, version, {("t", 0): 1, ("t", 1): 0})
    zero, one = answers[("t", 0)], answers[("t", 1)]
    assert zero.error_code == ErrorCode.none
    assert [(offset, key) for offset, key, _, _ in records_of(zero.records)] == [(1, b"1"), (2, b"2")]
    assert (zero.high_watermark, zero.last_stable_offset) == (3, 3)
    assert (one.error_code, one.high_watermark, one.records) == (ErrorCode.none, 0, b"")
    if version >= 5:
        assert zero.log_start_offset == 0
    if version >= 11:
        assert zero.preferred_read_replica == -1


def test_an_offset_past_the_end_is_out_of_range_and_an_unknown_partition_unknown(view: LocalBrokerView) -> None:
    run(view.create_topic("t", 1))
    fill(view, "t", 0, 2)
    _, answers = fetch(view, 12, {("t", 0): 3, ("t", 5): 0, ("nope", 0): 0})
    assert answers[("t", 0)].error_code == ErrorCode.offset_out_of_range
    assert answers[("t", 5)].error_code == ErrorCode.unknown_topic_or_partition
    assert answers[("nope", 0)].error_code == ErrorCode.unknown_topic_or_partition


def test_partition_max_bytes_cuts_but_always_returns_one_batch(view: LocalBrokerView) -> None:
    run(view.create_topic("t", 1))
    fill(view, "t", 0, 5, value_size=100)
    _, answers = fetch(view, 12, {("t", 0): 0}, partition_max_bytes=10)
    assert [offset for offset, _, _, _ in records_of(answers[("t", 0)].records)] == [0]


def test_max_bytes_leaves_out_later_partitions_but_never_the_first_with_data(view: LocalBrokerView) -> None:
    run(view.create_topic("t", 3))
    for partition in range(3):
        fill(view, "t", partition, 2, value_size=200)
    _, answers = fetch(view, 12, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, max_bytes=10)
    assert len(records_of(answers[("t", 0)].records)) == 2
    assert answers[("t", 1)].records == answers[("t", 2)].records == b""
    assert answers[("t", 1)].high_watermark == 2


def test_bytes_out_count_what_the_answers_carry_after_the_response_limit(view: LocalBrokerView) -> None:
    run(view.create_topic("t", 3))
    run(view.create_topic("u", 1))
    for partition in range(3):
        fill(view, "t", partition, 2, value_size=200)
    fill(view, "u", 0, 4)
    metrics = MetricsRecorder()
    _, answers = fetch(view, 12, {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, max_bytes=10, metrics=metrics)
    assert metrics.value(BYTES_OUT, "t") == len(answers[("t", 0)].records) > 0  # the left-out partitions: nothing
    _, answers = fetch(view, 12, {("t", 1): 0, ("u", 0): 1}, metrics=metrics)
    read_whole = leader_log(view, "t", 0).size_in_bytes + leader_log(view, "t", 1).size_in_bytes
    assert metrics.value(BYTES_OUT, "t") == read_whole
    assert metrics.value(BYTES_OUT, "u") == len(answers[("u", 0)].records) > 0
    assert metrics.value(BYTES_OUT, "") == metrics.value(BYTES_OUT, "t") + metrics.value(BYTES_OUT, "u")


def test_a_fetch_session_id_is_answered_session_not_found(view: LocalBrokerView) -> None:
    run(view.create_topic("t", 1))
    decoded, answers = fetch(view, 12, {("t", 0): 0}, session_id=42)
    assert (decoded.error_code, decoded.session_id, answers) == (ErrorCode.fetch_session_id_not_found, 0, {})

"""Produce: batches land in the log unchanged and the answer carries the assigned base offset; acks=0 answers
nothing; each partition fails on its own with Kafka's code; every served version encodes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from cluster.protocol.framing import decode_response, encode_response
from cluster.protocol.handlers.produce import FIRST_TOPIC_ID_VERSION, PRODUCE_KEY, ProduceHandler
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.transaction_view import TransactionView
from tests.cluster.protocol.helpers import batch, leader_log, records_of, request, run

VERSIONS = range(SERVED[PRODUCE_KEY].min_version, SERVED[PRODUCE_KEY].max_version + 1)


def produce(
    view: InProcessBrokerView, version: int, partitions: dict[tuple[str, int], bytes | None], acks: int = 1
) -> Any:
    """Each partition's answer to a Produce of `version`, by (topic, partition): v13 names topics by id, each id
    asked of the view (an unknown topic gets a random id) and its answer's id read back to the name."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), records in partitions.items():
        topics.setdefault(topic, []).append({"index": partition, "records": records})
    ids = {name: topic_id for topic_id, name in run(view.topic_names(refresh=True)).items()}
    named = {name: ids.get(name, uuid.uuid4()) for name in topics}
    by_id = version >= FIRST_TOPIC_ID_VERSION
    body = build(
        load_request_schema(PRODUCE_KEY, version),
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 30000,
            "topic_data": [
                {"topic_id": named[name]} | ({} if by_id else {"name": name}) | {"partition_data": parts}
                for name, parts in topics.items()
            ],
        },
    )
    response = run(ProduceHandler(view, TransactionView.in_process(view.broker))(request(body)))
    if response is None:
        return None
    _, decoded = decode_response(encode_response(1, response)[4:], load_response_schema(PRODUCE_KEY, version))
    names = {topic_id: name for name, topic_id in named.items()}
    return {
        (names[t.topic_id] if by_id else t.name, p.index): p for t in decoded.responses for p in t.partition_responses
    }


def test_v13_answers_an_unknown_topic_id_with_unknown_topic_id(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    answers = produce(view, FIRST_TOPIC_ID_VERSION, {("t", 0): batch([(b"k", b"v", 5)]), ("gone", 0): batch([])})
    assert answers[("t", 0)].error_code == ErrorCode.none
    assert answers[("gone", 0)].error_code == ErrorCode.unknown_topic_id


@pytest.mark.parametrize("version", VERSIONS)
def test_batches_are_appended_unchanged_and_answered_with_their_base_offset(
    view: InProcessBrokerView, version: int
) -> None:
    run(view.create_topic("t", 2))
    first = batch([(b"k1", b"v1", 1000), (b"k2", b"v2", 1001)])
    second = batch([(None, b"v3", 1002)])
    answers = produce(view, version, {("t", 0): first, ("t", 1): second})
    assert (answers[("t", 0)].error_code, answers[("t", 0)].base_offset) == (ErrorCode.none, 0)
    again = produce(view, version, {("t", 0): second})
    assert again[("t", 0)].base_offset == 2
    if version >= 2:
        assert again[("t", 0)].log_append_time is None  # CreateTime topic: -1 on the wire
    if version >= 5:
        assert again[("t", 0)].log_start_offset == 0
    stored = leader_log(view, "t", 0).read(0, 1 << 20).records
    assert records_of(bytes(stored)) == [(0, b"k1", b"v1", 1000), (1, b"k2", b"v2", 1001), (2, None, b"v3", 1002)]
    # Only offsets were rewritten: the client's bytes from the batch's attributes on are those stored.
    assert bytes(stored)[21 : len(first)] == first[21:]


def test_acks_zero_appends_and_answers_nothing(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    assert produce(view, 9, {("t", 0): batch([(b"k", b"v", 5)])}, acks=0) is None
    assert leader_log(view, "t", 0).log_end_offset == 1


def test_invalid_acks_fail_every_partition_and_append_nothing(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    answers = produce(view, 9, {("t", 0): batch([(b"k", b"v", 5)])}, acks=2)
    assert answers[("t", 0)].error_code == ErrorCode.invalid_required_acks
    assert leader_log(view, "t", 0).log_end_offset == 0


def test_each_partition_fails_on_its_own(view: InProcessBrokerView) -> None:
    run(view.create_topic("t", 1))
    good = batch([(b"k", b"v", 5)])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # inside the CRC-covered records
    answers = produce(view, 9, {("t", 0): good, ("t", 1): good, ("missing", 0): good})
    assert answers[("t", 0)].error_code == ErrorCode.none
    assert answers[("t", 1)].error_code == ErrorCode.unknown_topic_or_partition
    assert answers[("missing", 0)].error_code == ErrorCode.unknown_topic_or_partition
    run(view.create_topic("c", 1))
    assert produce(view, 9, {("c", 0): bytes(corrupt)})[("c", 0)].error_code == ErrorCode.corrupt_message
    assert produce(view, 9, {("c", 0): None})[("c", 0)].error_code == ErrorCode.invalid_record
    assert leader_log(view, "c", 0).log_end_offset == 0

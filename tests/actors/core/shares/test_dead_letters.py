"""A share group's dead letters (Kafka 4.4's dead-letter topic, KIP-1191): which archivings make them (Kafka's
`SharePartition.recordStateWithDlq` and its delivery-limit paths: REJECT, a release or a lock expiry at the limit;
never GAP, ACCEPT or a release below the limit, and nothing without a topic), the records a partition leader hands
over (its source records' keys and values copied only when the group asks), the records written (Kafka's
`ProduceRequestHandler.headers`: one per offset, six UTF-8 headers in its order), the group keys' refusals with
Kafka 4.4's messages, and the writer's checks of the topic over a real in-process broker (Kafka's
`validateDlqTopic` messages, the topic created only when the broker allows it, the partition chosen modulo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.core.in_process_broker import InProcessBroker
from actors.core.shares.acknowledgements import AcknowledgementBatch, AcknowledgeType
from actors.core.shares.dead_letters import (
    CLIENT_REJECT,
    DELIVERY_COUNT_EXCEEDED,
    DeadLetterBatch,
    DeadLetters,
    PartitionDeadLetters,
    dead_letter_batches,
)
from actors.core.shares.group_share_config import EARLIEST, DeadLetterSettings, ResolvedShareConfig
from actors.core.shares.leader_shares import LeaderShares, LogPosition, LogRead
from actors.core.shares.share_partition import SharePartition
from storage.clock import MockClock
from storage.config.broker_config import BrokerConfig
from storage.config.group_config import validate
from storage.errors import InvalidConfigError
from storage.records.record_batch import RecordBatchBuilder, iter_batches

ACCEPT, RELEASE, REJECT, GAP = (
    int(t) for t in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT, AcknowledgeType.GAP)
)
TO_DLQ = DeadLetterSettings("dlq.work", copy_record=False)
LOCK_MS = 30000


def _config(settings: DeadLetterSettings = TO_DLQ, limit: int = 2) -> ResolvedShareConfig:
    return ResolvedShareConfig(
        delivery_count_limit=limit, record_lock_duration_ms=LOCK_MS, auto_offset_reset=EARLIEST, dead_letters=settings
    )


def test_reject_and_the_delivery_limit_make_dead_letters_gap_accept_and_release_do_not() -> None:
    clock = MockClock()
    share = SharePartition(clock, _config())
    share.acquire("m", [(0, 5)], 500)
    share.acknowledge("m", [AcknowledgementBatch(0, 5, (REJECT, REJECT, GAP, ACCEPT, RELEASE, RELEASE))])
    assert share.take_dead_letters() == [DeadLetters(0, 1, 1, CLIENT_REJECT)]
    share.acquire("m", [(4, 5)], 500)
    share.acknowledge("m", [AcknowledgementBatch(4, 4, (RELEASE,))])
    clock.sleep(LOCK_MS)  # offset 5's lock expires at the limit too
    share.maybe_expire_locks()
    assert share.take_dead_letters() == [
        DeadLetters(4, 4, 2, DELIVERY_COUNT_EXCEEDED),
        DeadLetters(5, 5, 2, DELIVERY_COUNT_EXCEEDED),
    ]
    assert share.take_dead_letters() == []
    assert share.start_offset == 6 and share.in_flight() == ()


def test_a_member_released_at_the_limit_makes_dead_letters_and_a_group_without_a_topic_none() -> None:
    share = SharePartition(MockClock(), _config(limit=2))
    share.acquire("m", [(0, 0)], 500)
    share.acknowledge("m", [AcknowledgementBatch(0, 0, (RELEASE,))])
    share.acquire("m", [(0, 0)], 500)
    share.release_acquired_records("m")
    assert share.take_dead_letters() == [DeadLetters(0, 0, 2, DELIVERY_COUNT_EXCEEDED)]
    without = SharePartition(MockClock(), _config(DeadLetterSettings()))
    without.acquire("m", [(0, 0)], 500)
    without.acknowledge("m", [AcknowledgementBatch(0, 0, (REJECT,))])
    assert without.take_dead_letters() == []
    assert [r.state for r in without.in_flight()] == []  # archived all the same: SPSO passed it
    assert without.start_offset == 1


def _log(values: list[bytes]) -> LogPosition:
    def read(offset: int, max_bytes: int, read_committed: bool) -> LogRead:
        out = b""
        for index in range(offset, len(values)):
            builder = RecordBatchBuilder(base_offset=index)
            builder.append(b"k%d" % index, values[index], timestamp=0)
            out += builder.build()
        return LogRead(out)

    return LogPosition(0, len(values), read, 0)


@pytest.mark.parametrize("copy_record", [True, False])
def test_the_leader_hands_over_its_dead_letters_with_the_records_only_when_copying(copy_record: bool) -> None:
    written: list[DeadLetterBatch] = []
    shares = LeaderShares(MockClock(), dead_letters=PartitionDeadLetters(written.append, "work", 7))
    settings = DeadLetterSettings("dlq.work", copy_record=copy_record)
    log = _log([b"a", b"b", b"c"])
    shares.acquire("g", "m", _config(settings), log, 1 << 20, 500)
    shares.acknowledge("g", "m", _config(settings), log, [AcknowledgementBatch(0, 2, (REJECT, ACCEPT, REJECT))])
    assert [(b.group_id, b.topic, b.partition, b.letters) for b in written] == [
        ("g", "work", 7, (DeadLetters(0, 0, 1, CLIENT_REJECT), DeadLetters(2, 2, 1, CLIENT_REJECT)))
    ]
    expected = {0: (b"k0", b"a"), 2: (b"k2", b"c")} if copy_record else {}
    assert dict(written[0].originals) == expected


def test_a_failed_write_leaves_the_records_archived() -> None:
    def refuse(batch: DeadLetterBatch) -> None:
        raise InvalidConfigError("no such topic")

    shares = LeaderShares(MockClock(), dead_letters=PartitionDeadLetters(refuse, "work", 0))
    log = _log([b"a"])
    shares.acquire("g", "m", _config(), log, 1 << 20, 500)
    shares.acknowledge("g", "m", _config(), log, [AcknowledgementBatch(0, 0, (REJECT,))])
    assert shares.in_flight("g") == (1, ())
    assert shares.acquire("g", "m", _config(), log, 1 << 20, 500).acquired == ()


def test_the_records_written_carry_kafkas_headers_one_per_offset_and_split_at_the_size_limit() -> None:
    batch = DeadLetterBatch(
        "g",
        "work",
        3,
        DeadLetterSettings("dlq.work", copy_record=True),
        (DeadLetters(5, 6, 2, DELIVERY_COUNT_EXCEEDED), DeadLetters(9, 9, 1, CLIENT_REJECT)),
        {5: (b"k5", b"v5"), 9: (None, b"v9")},
    )
    (built,) = dead_letter_batches(batch, 1234, 1 << 20)
    records = [r for b in iter_batches(built) for r in b.records()]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, 1234, b"k5", b"v5"),
        (1, 1234, None, None),
        (2, 1234, None, b"v9"),
    ]
    assert records[0].headers == (
        ("__dlq.errors.topic", b"work"),
        ("__dlq.errors.partition", b"3"),
        ("__dlq.errors.offset", b"5"),
        ("__dlq.errors.group", b"g"),
        ("__dlq.errors.delivery.count", b"2"),
        ("__dlq.errors.message", b"Offset delivery count exceeded the threshold."),
    )
    assert records[2].headers[4:] == (
        ("__dlq.errors.delivery.count", b"1"),
        ("__dlq.errors.message", b"Offset rejected by client."),
    )
    split = dead_letter_batches(batch, 1234, 300)
    assert len(split) == 3
    assert [len(next(iter(iter_batches(b))).records()) for b in split] == [1, 1, 1]


def test_the_group_keys_are_refused_with_kafka_4_4s_messages() -> None:
    broker = BrokerConfig.from_properties({"log.dirs": "/tmp/unused"})
    args = (broker.group_protocol_config, broker.share_group_config)
    with pytest.raises(
        InvalidConfigError, match=r"^errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'$"
    ):
        validate({"errors.deadletterqueue.topic.name": "__x"}, *args)
    with pytest.raises(InvalidConfigError, match="Expected value to be either true or false"):
        validate({"errors.deadletterqueue.copy.record.enable": "maybe"}, *args)
    assert validate(
        {"errors.deadletterqueue.topic.name": " any ", "errors.deadletterqueue.copy.record.enable": "TRUE"}, *args
    ) == {
        "errors.deadletterqueue.topic.name": "any",
        "errors.deadletterqueue.copy.record.enable": "true",
    }


def _letters(settings: DeadLetterSettings, partition: int = 0) -> DeadLetterBatch:
    return DeadLetterBatch("g", "work", partition, settings, (DeadLetters(4, 4, 1, CLIENT_REJECT),))


def test_the_writer_checks_the_topic_as_kafka_does_and_creates_it_only_when_allowed(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "broker", properties={"num.partitions": "2"}, clock=MockClock())
    try:
        queue = broker.dead_letter_queue
        refusals = {
            "__dlq": "Configured DLQ topic name in share group: g cannot start with __, topic: __dlq.",
            "work-dlq": "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: g, "
            "topic: work-dlq, prefix: dlq..",
            "dlq.missing": "DLQ topic does not exist and auto create is disabled on cluster for share group: g, "
            "topic: dlq.missing.",
            "dlq.plain": "DLQ is not enabled on configured DLQ topic for share group: g, topic: dlq.plain.",
        }
        broker.controller.create_topic("dlq.plain", 1)
        for topic, message in refusals.items():
            with pytest.raises(InvalidConfigError) as refused:
                queue.write(_letters(DeadLetterSettings(topic)))
            assert str(refused.value) == message
        assert "dlq.missing" not in broker.controller.topics()
        queue.write(_letters(DeadLetterSettings("dlq.made", auto_create_topics=True), partition=5))
        made = broker.controller.describe_topic("dlq.made")
        assert (len(made.partitions), made.config) == (
            2,
            {"errors.deadletterqueue.group.enable": "true", "message.timestamp.type": "CreateTime"},
        )
        assert [broker.leader("dlq.made", p).log.log_end_offset for p in (0, 1)] == [0, 1]  # 5 % 2
        queue.write(_letters(DeadLetterSettings("any-name", topic_prefix="", auto_create_topics=True)))
        assert broker.leader("any-name", 0).log.log_end_offset == 1
    finally:
        broker.close()

"""Differential test of topic ids, fetch sessions and the newest ListOffsets sentinels: the same raw requests
(`cluster.protocol.client.WireClient`, kio's schemas) to Apache Kafka 3.9.1 and to raybroker's listener over the
in-process broker must get the same answers, Kafka being the oracle.

The sequence: a topic created (CreateTopics v7 answers its id), records produced, a full Fetch v17 by topic id that
opens a session, incremental fetches that list nothing or only a moved position (only partitions with news are
answered), a wrong epoch (INVALID_FETCH_SESSION_EPOCH), a name-based version on an id-based session
(FETCH_SESSION_TOPIC_ID_ERROR), an unknown session (FETCH_SESSION_ID_NOT_FOUND), closing the session, an unknown
topic id in Fetch, Metadata and DeleteTopics (UNKNOWN_TOPIC_ID), and ListOffsets' -3, -4, -5 and a negative
timestamp that is no sentinel, at v9 and at versions older than each sentinel (and a partition named twice in one
request). Session ids are random on both sides:
compared as "one was given". Leader epochs are left out (raybroker answers -1 where Kafka knows its epochs).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from storage.records.record_batch import RecordBatchBuilder
from tests.cluster.protocol.helpers import start_broker, start_local_listener

pytestmark = pytest.mark.kafka

PRODUCE, FETCH, LIST_OFFSETS, METADATA, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 2, 3, 19, 20
DEADLINE_S = 30.0
UNKNOWN_ID = uuid.UUID("6f6e6c792d666f722d746869732d7465")
UNKNOWN_SESSION = 2_000_000_001


def records(*values: bytes) -> bytes:
    builder = RecordBatchBuilder()
    for value in values:
        builder.append(None, value, timestamp=1000 + len(value))
    return builder.build()


class Side:
    """One broker, one connection, one topic of two partitions."""

    def __init__(self, address: str) -> None:
        self.client = WireClient(address, timeout_s=DEADLINE_S)
        self.topic = f"sessions-{uuid.uuid4().hex[:8]}"
        spec = {"name": self.topic, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []}
        created = self.client.request(CREATE_TOPICS, 7, {"topics": [spec], "timeout": 30000}).topics[0]
        assert created.error_code == ErrorCode.none, created
        self.topic_id = created.topic_id
        deadline = time.monotonic() + DEADLINE_S
        while not self.led():
            assert time.monotonic() < deadline, "the topic never got leaders"
            time.sleep(0.05)

    def led(self) -> bool:
        values = {"topics": [{"name": self.topic, "topic_id": None}], "allow_auto_topic_creation": False}
        (topic,) = self.client.request(METADATA, 12, {**values, "include_topic_authorized_operations": False}).topics
        return topic.error_code == ErrorCode.none and all(p.leader_id >= 0 for p in topic.partitions)

    def produce(self, partition: int, *values: bytes) -> None:
        data = [{"name": self.topic, "partition_data": [{"index": partition, "records": records(*values)}]}]
        answer = self.client.request(PRODUCE, 11, {"acks": 1, "timeout": 30000, "topic_data": data})
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none, answer

    def fetch(
        self,
        session_id: int,
        epoch: int,
        positions: dict[int, int],
        version: int = 17,
        forgotten: tuple[int, ...] = (),
        topic_id: uuid.UUID | None = None,
    ) -> dict[str, Any]:
        """The answer's error, whether it has a session, and each partition answered: (error, high watermark, log
        start offset, records)."""
        partitions = [
            {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20} for p, offset in positions.items()
        ]
        topic = {"topic": self.topic, "topic_id": topic_id or self.topic_id, "partitions": partitions}
        values = {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [topic] if partitions else [],
            "forgotten_topics_data": (
                [{"topic": self.topic, "topic_id": self.topic_id, "partitions": list(forgotten)}] if forgotten else []
            ),
            "rack_id": "",
        }
        answer = self.client.request(FETCH, version, values)
        self.session_id = answer.session_id
        return {
            "error": answer.error_code.name,
            "session": answer.session_id != 0,
            "partitions": sorted(
                (p.partition_index, p.error_code.name, p.high_watermark, p.log_start_offset, len(p.records or b""))
                for t in answer.responses
                for p in t.partitions
            ),
        }

    def list_offsets(self, version: int, timestamps: list[int]) -> list[list[tuple[str, int, int]]]:
        """Each timestamp's answer for partition 0, one request each, and then all of them in one request (a
        partition named twice in a request is an INVALID_REQUEST in Kafka)."""
        return [self._list_offsets(version, [timestamp]) for timestamp in timestamps] + [
            self._list_offsets(version, timestamps)
        ]

    def _list_offsets(self, version: int, timestamps: list[int]) -> list[tuple[str, int, int]]:
        partitions = [{"partition_index": 0, "timestamp": ts, "current_leader_epoch": -1} for ts in timestamps]
        values = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": self.topic, "partitions": partitions}]}
        answer = self.client.request(LIST_OFFSETS, version, values)
        return [(p.error_code.name, p.offset, p.timestamp) for p in answer.topics[0].partitions]

    def scenario(self) -> dict[str, Any]:
        steps: dict[str, Any] = {"created_with_id": self.topic_id is not None}
        self.produce(0, b"a", b"bb", b"ccc")
        steps["full"] = self.fetch(0, 0, {0: 0, 1: 0})
        session = self.session_id
        steps["nothing_new"] = self.fetch(session, 1, {0: 3})
        self.produce(1, b"dddd")
        steps["news_on_an_unlisted_partition"] = self.fetch(session, 2, {})
        steps["forgotten"] = self.fetch(session, 3, {1: 1}, forgotten=(0,))
        self.produce(0, b"e")
        steps["a_forgotten_partition_stays_quiet"] = self.fetch(session, 4, {})
        steps["wrong_epoch"] = self.fetch(session, 9, {})
        steps["names_on_an_id_session"] = self.fetch(session, 5, {}, version=12)
        steps["unknown_session"] = self.fetch(UNKNOWN_SESSION, 1, {})
        steps["closed"] = self.fetch(session, -1, {0: 4})
        steps["after_close"] = self.fetch(session, 5, {})
        steps["unknown_topic_id"] = self.fetch(0, -1, {0: 0, 1: 0}, topic_id=UNKNOWN_ID)
        steps["list_offsets_v9"] = self.list_offsets(9, [-2, -1, -3, -4, -5, -6])
        steps["list_offsets_v8"] = self.list_offsets(8, [-4, -5])
        steps["list_offsets_v7"] = self.list_offsets(7, [-3, -4])
        steps["list_offsets_v6"] = self.list_offsets(6, [-3])
        by_id = {"name": None, "topic_id": UNKNOWN_ID}
        metadata = self.client.request(
            METADATA,
            12,
            {"topics": [by_id], "allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
        )
        steps["metadata_unknown_id"] = [(t.name, t.topic_id, t.error_code.name) for t in metadata.topics]
        deleted = self.client.request(DELETE_TOPICS, 6, {"topics": [by_id], "timeout": 30000}).responses
        steps["delete_unknown_id"] = [(r.name, r.topic_id, r.error_code.name) for r in deleted]
        return steps


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaListener]:
    broker: InProcessBroker = start_broker(tmp_path_factory.mktemp("broker"))
    try:
        with start_local_listener(broker) as started:
            yield started
    finally:
        broker.close()


def test_sessions_topic_ids_and_list_offsets_sentinels_answer_as_kafka(kafka: str, listener: KafkaListener) -> None:
    theirs, ours = Side(kafka), Side(listener.bootstrap_servers)
    try:
        assert ours.scenario() == theirs.scenario()
    finally:
        theirs.client.close()
        ours.client.close()

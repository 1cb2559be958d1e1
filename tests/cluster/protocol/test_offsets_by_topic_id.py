"""OffsetCommit v10 and OffsetFetch v10 (topics named by topic id, KIP-848) on the wire, differentially: the same raw
requests to Apache Kafka 4.2 (the package's `kafka4`) and to raybroker's listener, each sent to the group's
coordinator as FindCoordinator names it, must get the same answers, topic ids written as what they name (each
broker gives its topics their own ids).

The sequence: both brokers advertise OffsetCommit and OffsetFetch up to v10 (ApiVersions); a v10 commit by id of
known partitions, a partition beyond the topic, an id no topic has and the zero id, and one naming a topic twice;
a v10 fetch of the same; a fetch of every committed offset at v10 (by id) and at v9 (by name); v9 commits and fetches
by name still answered as before (an unknown topic's refusal first, as Kafka's answer builder orders it); a v7 commit
and v5 and v3 fetches by name; metadata at `offset.metadata.max.bytes` (4096 two-byte characters fit: Kafka counts
UTF-16 code units) and over it, also from a stranger of generation -1 (taken into an Empty group); a v10 fetch of a
group without offsets. Every commit carries a metadata string and a leader epoch, and every fetch answers them
(the epoch from v5). Then one topic is deleted and, once each broker no longer knows it, its
offsets are gone (Kafka's coordinator deletes them a moment after its metadata drops the topic) and raybroker's
listener no longer trusts the topic's partition count it had (`TOPIC_CACHE_MS`), a v10 commit and
fetch by the deleted id, a v10 and v9 fetch of every offset, and a v9 commit and fetch by its name. Every answer is
compared whole (order included), but for a fetch of every offset, whose order is Kafka's hash map's: its topics are
compared sorted. Last, each coordinator's `__consumer_offsets` segment files (found with DescribeLogDirs) hold the
same commits of the group in the same order, Kafka's read by raybroker's decoder, and each of Kafka 4.2's values
(OffsetCommitValue v4) is byte for byte raybroker's encoding of that commit, but for the topic id Kafka adds as a
tagged field to a commit by id.

Kafka's Java client 4.2 (`java/ConsumerGroupMember.java`, `group.protocol=consumer`) names topics by id once the broker
advertises v10: a member reads a topic and leaves, committing what it read, and the next member of its group reads
only what was produced after, on both brokers; raybroker's listener counted the client's commits and fetches as
OffsetCommit v10 and OffsetFetch v10, none as v9."""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from actors.metrics.names import REQUESTS
from actors.metrics.recorder import MetricsRecorder
from cluster.protocol.client import WireClient
from cluster.protocol.handlers.group_offsets import FIRST_MULTI_GROUP_FETCH_VERSION
from cluster.protocol.handlers.partition_counts import TOPIC_CACHE_MS
from storage.records.consumer_offsets import (
    OffsetAndMetadata,
    decode_offset_commit_key,
    decode_offset_commit_value,
    encode_offset_commit_value,
    partition_for_group,
)
from storage.records.record_batch import iter_batches
from tests.cluster.applications.java_programs import java_classpath
from tests.cluster.protocol.conftest import serve_on_wall_clock
from tests.cluster.protocol.helpers import COORDINATOR_RETRIED, GROUP_KEY, coordinator_client
from tests.cluster.protocol.test_consumer_protocol_clients import (
    KAFKA_CLIENTS,
    PARTITIONS,
    RECORDS_PER_STEP,
    SOURCE,
    JavaMember,
    Position,
    create_topic,
    produce,
    wait_for,
)

pytestmark = pytest.mark.kafka

OFFSET_COMMIT, OFFSET_FETCH, METADATA, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 8, 9, 3, 18, 19, 20
DESCRIBE_LOG_DIRS = 35
CONSUMER_OFFSETS = "__consumer_offsets"
# The end of an OffsetCommitValue v4 Kafka writes for a commit by topic id (OffsetCommit v10): one tagged field, tag 0
# (the topic id), 16 bytes; and that of one without: no tagged field.
TOPIC_ID_TAG_HEAD = b"\x01\x00\x10"
NO_TAGGED_FIELDS = b"\x00"
DEADLINE_S = 30.0
# An id neither broker gives a topic, the same on both.
UNKNOWN = uuid.UUID("5c0ffee0-0000-4000-8000-00000000abcd")

Step = tuple[str, Any]


class Side:
    """One broker: a connection to its bootstrap, one to the coordinator of the sequence's group, and the topics the
    sequence created, by label ("alpha", "beta") with their names and ids."""

    def __init__(self, bootstrap: str, run: str) -> None:
        self.group = f"ids-{run}"
        self.run = run
        self.bootstrap = WireClient(bootstrap, timeout_s=DEADLINE_S)
        self.ids: dict[str, uuid.UUID] = {}
        for label, partitions in (("alpha", 2), ("beta", 1)):
            created = self.bootstrap.request(
                CREATE_TOPICS,
                7,
                {
                    "topics": [
                        {
                            "name": self.name(label),
                            "num_partitions": partitions,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout": 30000,
                },
            )
            (topic,) = created.topics
            assert topic.error_code == ErrorCode.none, created
            self.ids[label] = topic.topic_id
        self.coordinator = coordinator_client(bootstrap, self.group, GROUP_KEY, DEADLINE_S)
        self.wait_until("the coordinator's broker knows both topics", lambda: self.known(["alpha", "beta"]) == 2)

    def close(self) -> None:
        self.bootstrap.close()
        self.coordinator.close()

    def name(self, label: str) -> str:
        return f"{label}-{self.run}"

    def label(self, topic: Any) -> str:
        """What an answer's topic names, the same on both brokers: its label, "unknown" or "zero"."""
        if hasattr(topic, "name"):
            return str(topic.name).removesuffix(f"-{self.run}")
        if topic.topic_id is None:
            return "zero"
        by_id = {topic_id: label for label, topic_id in self.ids.items()}
        return by_id.get(topic.topic_id, "unknown" if topic.topic_id == UNKNOWN else str(topic.topic_id))

    def topic_id(self, label: str) -> uuid.UUID | None:
        """The id a request names the labelled topic by (None: the zero id, as kio writes it)."""
        return None if label == "zero" else UNKNOWN if label == "unknown" else self.ids[label]

    def known(self, labels: list[str]) -> int:
        """How many of the labelled topics the coordinator's broker knows with a leader for every partition."""
        answer = self.coordinator.request(
            METADATA,
            12,
            {
                "topics": [{"name": self.name(label), "topic_id": None} for label in labels],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        return sum(
            1
            for topic in answer.topics
            if topic.error_code == ErrorCode.none and all(p.leader_id >= 0 for p in topic.partitions)
        )

    def wait_until(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
            time.sleep(0.1)

    def commit(
        self,
        version: int,
        topics: list[tuple[str, list[int]]],
        offset: int = 5,
        metadata: str = "",
        member: tuple[str, int] = ("", -1),
    ) -> list[Step]:
        """An OffsetCommit of `offset` to each (label, partitions), by id from v10, each partition with leader epoch
        `offset + partition` (OffsetCommit v6+ carries it) and metadata `metadata` followed by the partition, as the
        (member id, generation) `member`; each answered topic's label and partition codes. Asked again while the
        coordinator answers a partition it is loading or moving."""
        values = {
            "group_id": self.group,
            "generation_id_or_member_epoch": member[1],
            "member_id": member[0],
            "group_instance_id": None,
            "topics": [
                {
                    **self.named(version, label),
                    "partitions": [
                        {
                            "partition_index": partition,
                            "committed_offset": offset,
                            "committed_leader_epoch": offset + partition,
                            "committed_metadata": f"{metadata}{partition}" if metadata else "",
                        }
                        for partition in partitions
                    ],
                }
                for label, partitions in topics
            ],
        }
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = self.coordinator.request(OFFSET_COMMIT, version, values)
            codes = [p.error_code for t in answer.topics for p in t.partitions]
            if not COORDINATOR_RETRIED.intersection(codes):
                return [
                    (self.label(t), [(p.partition_index, p.error_code) for p in t.partitions]) for t in answer.topics
                ]
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)

    def fetch(self, version: int, topics: list[tuple[str, list[int]]] | None, group: str | None = None) -> Step:
        """An OffsetFetch of the group (or `group`): its error code, and each answered topic's label and partitions
        (index, offset, leader epoch (from v5), metadata, code), sorted for a fetch of every offset. Before v8 the
        request names one group, with no member."""
        named = None if topics is None else [{**self.named(version, t), "partition_indexes": p} for t, p in topics]
        if version >= FIRST_MULTI_GROUP_FETCH_VERSION:
            values: dict[str, Any] = {
                "groups": [{"group_id": group or self.group, "member_id": None, "member_epoch": -1, "topics": named}],
                "require_stable": False,
            }
        else:
            values = {"group_id": group or self.group, "topics": named, "require_stable": False}
        deadline = time.monotonic() + DEADLINE_S
        while True:
            answer = self.coordinator.request(OFFSET_FETCH, version, values)
            (fetched,) = answer.groups if version >= FIRST_MULTI_GROUP_FETCH_VERSION else [answer]
            if fetched.error_code not in COORDINATOR_RETRIED:
                break
            assert time.monotonic() < deadline, fetched
            time.sleep(0.1)
        answered = [
            (
                self.label(t),
                [
                    (
                        p.partition_index,
                        p.committed_offset,
                        getattr(p, "committed_leader_epoch", None),
                        p.metadata,
                        p.error_code,
                    )
                    for p in t.partitions
                ],
            )
            for t in fetched.topics
        ]
        return fetched.error_code, sorted(answered) if topics is None else answered

    def named(self, version: int, label: str) -> dict[str, Any]:
        return {"topic_id": self.topic_id(label)} if version >= 10 else {"name": self.name(label)}

    def commit_records(self) -> list[tuple[str, int, bytes]]:
        """Every commit of the group in the coordinator's log of its `__consumer_offsets` partition (found with
        DescribeLogDirs, read from the segment files): (label, partition, value), in log order."""
        described = self.coordinator.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
        folders = [
            Path(result.log_dir) / f"{CONSUMER_OFFSETS}-{partition.partition_index}"
            for result in described.results
            for topic in result.topics
            if topic.name == CONSUMER_OFFSETS
            for partition in topic.partitions
        ]
        partition = partition_for_group(self.group, len({folder.name for folder in folders}))
        (folder,) = [folder for folder in folders if folder.name == f"{CONSUMER_OFFSETS}-{partition}"]
        found = []
        for log in sorted(folder.glob("*.log")):
            for batch in iter_batches(log.read_bytes()):
                for record in [] if batch.is_control else batch.records():
                    key = decode_offset_commit_key(record.key) if record.key is not None else None
                    if key is not None and key[0] == self.group and record.value is not None:
                        found.append((key[1].removesuffix(f"-{self.run}"), key[2], record.value))
        return found

    def delete(self, label: str) -> None:
        deleted = self.bootstrap.request(
            DELETE_TOPICS, 6, {"topics": [{"name": self.name(label), "topic_id": None}], "timeout": 30000}
        )
        assert deleted.responses[0].error_code == ErrorCode.none, deleted
        self.wait_until("the coordinator's broker forgets the deleted topic", lambda: self.known([label]) == 0)
        self.wait_until(
            "the deleted topic's offsets are gone",
            lambda: label not in {topic for topic, _ in self.fetch(9, None)[1]},
        )
        # raybroker's OffsetCommit trusts a topic's partition count for TOPIC_CACHE_MS (a commit by name within it
        # is still taken, `cluster.protocol.handlers.partition_counts`); Kafka's broker learns of the delete from its
        # metadata log, a moment later too. Past it, both refuse the name.
        time.sleep(TOPIC_CACHE_MS / 1000)


def run_sequence(side: Side) -> list[tuple[str, Any]]:
    """The module docstring's sequence; each step's description and answer, as the same on both brokers."""
    advertised = side.bootstrap.request(
        API_VERSIONS, 3, {"client_software_name": "raybroker-tests", "client_software_version": "1"}
    )
    steps: list[tuple[str, Any]] = [
        (
            "advertised OffsetCommit and OffsetFetch versions",
            sorted((k.api_key, k.min_version, k.max_version) for k in advertised.api_keys if k.api_key in (8, 9)),
        ),
        (
            "v10 commit by id",
            side.commit(10, [("unknown", [0]), ("alpha", [0, 5, 1]), ("zero", [0]), ("beta", [0])], 5, "by-id-"),
        ),
        (
            "v10 commit naming a topic twice",
            side.commit(10, [("alpha", [0]), ("unknown", [1]), ("alpha", [1])], 7, '{"streamTime":1700000000000}'),
        ),
        (
            "v10 fetch by id",
            side.fetch(10, [("unknown", [0]), ("alpha", [1, 0, 7]), ("zero", [3]), ("beta", [0])]),
        ),
        ("v10 fetch of every offset", side.fetch(10, None)),
        ("v9 fetch of every offset", side.fetch(9, None)),
        ("v9 commit by name", side.commit(9, [("alpha", [0]), ("gamma", [0])], 9, "by-name-")),
        ("v9 fetch by name", side.fetch(9, [("gamma", [0]), ("alpha", [0, 1])])),
        ("v7 commit by name", side.commit(7, [("beta", [0])], 12, "v7-")),
        ("v5 fetch by name", side.fetch(5, [("beta", [0]), ("alpha", [0, 1])])),
        ("v3 fetch by name (no leader epoch)", side.fetch(3, [("beta", [0]), ("alpha", [0])])),
        # offset.metadata.max.bytes (4096) counts Java's String.length(): 4096 "é" (8192 UTF-8 bytes) fit, 2049
        # characters outside the BMP (4098 UTF-16 code units) do not.
        ("v9 commit of 4096 two-byte characters", side.commit(9, [("alpha", [1])], 13, "é" * 4095)),
        ("v9 commit over offset.metadata.max.bytes", side.commit(9, [("alpha", [0])], 14, "\U0001f600" * 2049)),
        # Into an Empty group a commit of generation -1 is taken whoever sends it (Kafka's ClassicGroup
        # validateOffsetCommit); past the group's check, oversized metadata is refused per partition (4097
        # characters) and 4096 fit.
        (
            "v9 commit of a stranger of generation -1 with oversized metadata",
            side.commit(9, [("alpha", [0]), ("beta", [0])], 15, "x" * 4096, member=("stranger", -1)),
        ),
        (
            "v10 commit of a stranger of generation -1 with oversized metadata",
            side.commit(10, [("alpha", [1])], 16, "x" * 4095, member=("stranger", -1)),
        ),
        ("v10 fetch after the commits of the stranger", side.fetch(10, [("alpha", [0, 1]), ("beta", [0])])),
        # A group that has offsets but no members is an Empty group to Kafka: a generation of 0 or more must come from
        # a member of it.
        ("v9 commit of a stranger of generation 3", side.commit(9, [("alpha", [0])], 17, member=("stranger", 3))),
        ("v10 fetch of a group without offsets", side.fetch(10, [("alpha", [0])], group=f"{side.group}-none")),
    ]
    side.delete("beta")
    steps += [
        ("v10 commit to the deleted topic's id", side.commit(10, [("beta", [0]), ("alpha", [1])], 11)),
        ("v10 fetch by the deleted topic's id", side.fetch(10, [("beta", [0]), ("alpha", [1])])),
        ("v10 fetch of every offset after the delete", side.fetch(10, None)),
        ("v9 fetch of every offset after the delete", side.fetch(9, None)),
        ("v9 commit to the deleted topic's name", side.commit(9, [("beta", [0])])),
        ("v9 fetch by the deleted topic's name", side.fetch(9, [("beta", [0])])),
    ]
    return steps


def test_offsets_by_topic_id_answer_as_kafka_4(wall_clock_listener: str, kafka4: str) -> None:
    """The sequence's answers agree step for step; then each broker's log of the group's commits: the same commits
    (offset, leader epoch, metadata) in the same order, read by raybroker's decoder from Kafka's segment files too,
    and Kafka's value bytes are raybroker's encoding of the same commit (at Kafka's commit timestamp), plus the topic
    id's tagged field for a commit by id."""
    run = uuid.uuid4().hex[:8]
    answers = {}
    records = {}
    ids = {}
    for name, bootstrap in (("kafka", kafka4), ("raybroker", wall_clock_listener)):
        side = Side(bootstrap, run)
        try:
            answers[name] = run_sequence(side)
            records[name] = side.commit_records()
            ids[name] = side.ids
        finally:
            side.close()
    for (step, kafka), (_, ours) in zip(answers["kafka"], answers["raybroker"], strict=True):
        assert ours == kafka, step
    decoded = {
        name: [(label, p, decode_offset_commit_value(value)) for label, p, value in records[name]] for name in records
    }
    assert decoded["raybroker"] == decoded["kafka"]
    assert ("alpha", 1, OffsetAndMetadata(13, 14, "é" * 4095 + "1")) in decoded["kafka"]
    by_id = 0
    for label, partition, value in records["kafka"]:
        committed = decode_offset_commit_value(value)
        if value.endswith(TOPIC_ID_TAG_HEAD + ids["kafka"][label].bytes):
            untagged = value[: -len(TOPIC_ID_TAG_HEAD) - 16] + NO_TAGGED_FIELDS
            by_id += 1
        else:
            untagged = value
        (commit_timestamp_ms,) = struct.unpack_from(">q", untagged, len(untagged) - 9)
        assert encode_offset_commit_value(committed, commit_timestamp_ms) == untagged, (label, partition, value)
    # The v10 commits wrote 7 records by id (3, 2, 1 of the stranger and 1 after the delete); the v9 and v7 ones 3
    # by name.
    assert (by_id, len(records["kafka"]) - by_id) == (7, 3)


@pytest.fixture(scope="module")
def classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """`java/ConsumerGroupMember.java` compiled against kafka-clients 4.2."""
    return java_classpath([KAFKA_CLIENTS], {SOURCE.name: SOURCE.read_text()}, tmp_path_factory.mktemp("java"))


def resume_steps(classpath: str, bootstrap: str, folder: Path) -> tuple[set[Position], list[Position]]:
    """A Java member reads a topic and leaves (committing what it read), then another of its group starts: what was
    produced after the first left, and what the second read."""
    topic, group = f"resume-{uuid.uuid4().hex[:8]}", f"resume-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    produced = produce(bootstrap, topic, RECORDS_PER_STEP)
    first = JavaMember(classpath, bootstrap, topic, group, folder, "first")
    try:
        wait_for("every record read", lambda: set(first.records()) >= produced, [first])
    finally:
        first.leave()
    second = JavaMember(classpath, bootstrap, topic, group, folder, "second")
    try:
        wait_for("every partition assigned", lambda: second.assignment() == set(range(PARTITIONS)), [second])
        after = produce(bootstrap, topic, RECORDS_PER_STEP)
        wait_for("every new record read", lambda: set(second.records()) >= after, [second])
    finally:
        second.leave()
    return after, second.records()


def test_a_java_member_resumes_from_offsets_committed_and_fetched_by_topic_id(
    classpath: str, kafka4: str, tmp_path: Path
) -> None:
    metrics = MetricsRecorder()
    with serve_on_wall_clock(tmp_path / "broker", metrics) as raybroker:
        for name, bootstrap in (("kafka", kafka4), ("raybroker", raybroker)):
            folder = tmp_path / name
            folder.mkdir()
            after, read = resume_steps(classpath, bootstrap, folder)
            assert sorted(read) == sorted(after), name
    answered = {
        (api, version): metrics.value(REQUESTS, api, str(version))
        for api in ("OffsetCommit", "OffsetFetch")
        for version in (9, 10)
    }
    assert answered[("OffsetCommit", 10)] > 0 and answered[("OffsetFetch", 10)] > 0, answered
    assert answered[("OffsetCommit", 9)] == answered[("OffsetFetch", 9)] == 0, answered

"""A share group's dead-letter topic (Kafka 4.4, KIP-1191): the records a share-partition archives because a member
rejected them or because they reached the delivery count limit, written to the topic the group's
`errors.deadletterqueue.topic.name` names (Kafka's `ShareGroupDLQStateManager`).

What is written (Kafka's `ProduceRequestHandler`): one record per archived offset, uncompressed, CreateTime stamped
with the time of the write, to partition `source partition % the dead-letter topic's partition count`, with these
headers, in this order, each value UTF-8 text:

| header                        | value                                                                  |
|-------------------------------|------------------------------------------------------------------------|
| `__dlq.errors.topic`          | the source topic's name                                                |
| `__dlq.errors.partition`      | the source partition, in decimal                                       |
| `__dlq.errors.offset`         | the record's offset, in decimal                                        |
| `__dlq.errors.group`          | the share group's id                                                   |
| `__dlq.errors.delivery.count` | the record's delivery count when it was archived, in decimal           |
| `__dlq.errors.message`        | `Offset rejected by client.` or `Offset delivery count exceeded the threshold.` |

The key and value are the source record's only when the group sets `errors.deadletterqueue.copy.record.enable`
(null otherwise, and for an offset whose record is not found).

Before writing, the topic is checked as Kafka checks it (its `validateDlqTopic`, with its messages, each an
`InvalidConfigError`): a name starting with `__` is refused, as is one not starting with the broker's
`errors.deadletterqueue.topic.name.prefix` (unless that is empty); an existing topic must set
`errors.deadletterqueue.group.enable=true`; a missing one is created when the broker's
`errors.deadletterqueue.auto.create.topics.enable` is true (with the broker's default partition count and replication
factor, `errors.deadletterqueue.group.enable=true` and `message.timestamp.type=CreateTime`, as Kafka's CreateTopics
for it), and refused otherwise. A refused or failed write does not keep the records in flight: they are archived
anyway, as Kafka archives them ("Failed to write to DLQ, proceeding to ARCHIVED regardless"); the caller logs it.

`DeadLetterQueue` is that writer, over the controller (`TopicAdmin`) and an append to a partition's leader, so it runs
where the host's coordinators run (in process, or the group coordinator actor on Ray); the partition leaders hand it
their `DeadLetterBatch`es through a `DeadLetterWriter`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from actors.core.controller.topic_metadata import TopicMetadata
from actors.core.shares.group_share_config import DeadLetterSettings
from storage.clock import Clock
from storage.config.log_config import LogConfig
from storage.errors import InvalidConfigError, UnknownTopicOrPartitionError
from storage.records.record import Header
from storage.records.record_batch import RecordBatchBuilder

# Kafka's `ShareGroupDLQManager.CLIENT_REJECT` and `DELIVERY_COUNT_EXCEEDED` messages.
CLIENT_REJECT = "Offset rejected by client."
DELIVERY_COUNT_EXCEEDED = "Offset delivery count exceeded the threshold."
TOPIC_HEADER = "__dlq.errors.topic"
PARTITION_HEADER = "__dlq.errors.partition"
OFFSET_HEADER = "__dlq.errors.offset"
GROUP_HEADER = "__dlq.errors.group"
DELIVERY_COUNT_HEADER = "__dlq.errors.delivery.count"
MESSAGE_HEADER = "__dlq.errors.message"
DLQ_GROUP_ENABLE = "errors.deadletterqueue.group.enable"
# What Kafka's CreateTopics for a missing dead-letter topic sets (partitions and replicas are the broker's defaults).
CREATED_TOPIC_CONFIG = {DLQ_GROUP_ENABLE: "true", "message.timestamp.type": "CreateTime"}
_DEFAULT_MAX_MESSAGE_BYTES = LogConfig().max_message_bytes


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """An offset range (inclusive) archived at once, its records' delivery count and why (`CLIENT_REJECT` or
    `DELIVERY_COUNT_EXCEEDED`)."""

    first_offset: int
    last_offset: int
    delivery_count: int
    message: str


@dataclass(frozen=True, slots=True)
class DeadLetterBatch:
    """What one share-partition call archived for the dead-letter topic: the group, the source partition, the
    group's settings then, the ranges, and, when the group copies records, each offset's key and value."""

    group_id: str
    topic: str
    partition: int
    settings: DeadLetterSettings
    letters: tuple[DeadLetters, ...]
    originals: Mapping[int, tuple[bytes | None, bytes | None]] = field(default_factory=dict)


class DeadLetterWriter(Protocol):
    """Where one partition leader's share-partitions send their dead letters: its host's `DeadLetterQueue`, with the
    source topic and partition added."""

    def write_dead_letters(
        self,
        group_id: str,
        settings: DeadLetterSettings,
        letters: tuple[DeadLetters, ...],
        originals: Mapping[int, tuple[bytes | None, bytes | None]],
    ) -> None:
        """Writes them to the group's dead-letter topic; `InvalidConfigError` (or the append's error) if refused."""
        ...


class DeadLetterTopics(Protocol):
    """What the writer needs of the controller (the plain `Controller`, or a client of the controller actor)."""

    def describe_topic(self, name: str) -> TopicMetadata: ...

    def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str], *, replication_factor: int
    ) -> TopicMetadata: ...


class DeadLetterQueue:
    """Writes dead letters to their group's topic (see the module docstring). `controller` describes and creates
    topics; `append(topic, partition, batch)` appends one batch to the partition's leader, answered once replicated;
    `default_partitions` is the broker's `num.partitions` for a topic it creates."""

    def __init__(
        self,
        controller: DeadLetterTopics,
        append: Callable[[str, int, bytes], object],
        clock: Clock,
        default_partitions: int,
    ) -> None:
        self._controller = controller
        self._append = append
        self._clock = clock
        self._default_partitions = default_partitions

    def write(self, batch: DeadLetterBatch) -> None:
        """Writes `batch`'s records (module docstring); `InvalidConfigError` with Kafka's message if the topic is
        refused."""
        settings = batch.settings
        topic = self._checked_topic(batch.group_id, settings)
        try:
            metadata = self._controller.describe_topic(topic)
        except UnknownTopicOrPartitionError:
            if not settings.auto_create_topics:
                raise InvalidConfigError(
                    "DLQ topic does not exist and auto create is disabled on cluster for share group: "
                    f"{batch.group_id}, topic: {topic}."
                ) from None
            metadata = self._controller.create_topic(
                topic, self._default_partitions, CREATED_TOPIC_CONFIG, replication_factor=-1
            )
        if metadata.config.get(DLQ_GROUP_ENABLE, "false").lower() != "true":
            raise InvalidConfigError(
                f"DLQ is not enabled on configured DLQ topic for share group: {batch.group_id}, topic: {topic}."
            )
        max_bytes = int(metadata.config.get("max.message.bytes", _DEFAULT_MAX_MESSAGE_BYTES))
        partition = batch.partition % len(metadata.partitions)
        for records in dead_letter_batches(batch, self._clock.milliseconds(), max_bytes):
            self._append(topic, partition, records)

    @staticmethod
    def _checked_topic(group_id: str, settings: DeadLetterSettings) -> str:
        topic = settings.topic
        if not topic:
            raise InvalidConfigError(f"Configured DLQ topic name in share group: {group_id} is empty.")
        if topic.startswith("__"):
            raise InvalidConfigError(
                f"Configured DLQ topic name in share group: {group_id} cannot start with __, topic: {topic}."
            )
        prefix = settings.topic_prefix
        if prefix and not topic.startswith(prefix):
            raise InvalidConfigError(
                "Configured DLQ topic name does not comply with the DLQ topic prefix in share group: "
                f"{group_id}, topic: {topic}, prefix: {prefix}."
            )
        return topic


def dead_letter_batches(batch: DeadLetterBatch, timestamp_ms: int, max_bytes: int) -> list[bytes]:
    """`batch`'s records (one per offset, module docstring) as uncompressed v2 batches of at most `max_bytes` each
    (at least one record), stamped `timestamp_ms`."""
    built: list[bytes] = []
    builder = RecordBatchBuilder()
    for letters in batch.letters:
        for offset in range(letters.first_offset, letters.last_offset + 1):
            key, value = batch.originals.get(offset, (None, None)) if batch.settings.copy_record else (None, None)
            headers = _headers(batch, letters, offset)
            record_bytes = len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") + 2 for k, v in headers)
            if len(builder) and builder.estimated_size_in_bytes + record_bytes + 32 > max_bytes:
                built.append(builder.build())
                builder = RecordBatchBuilder()
            builder.append(key, value, timestamp=timestamp_ms, headers=headers)
    if len(builder):
        built.append(builder.build())
    return built


def _headers(batch: DeadLetterBatch, letters: DeadLetters, offset: int) -> list[Header]:
    return [
        (TOPIC_HEADER, batch.topic.encode()),
        (PARTITION_HEADER, str(batch.partition).encode()),
        (OFFSET_HEADER, str(offset).encode()),
        (GROUP_HEADER, batch.group_id.encode()),
        (DELIVERY_COUNT_HEADER, str(letters.delivery_count).encode()),
        (MESSAGE_HEADER, letters.message.encode()),
    ]


class PartitionDeadLetters:
    """One partition leader's `DeadLetterWriter`: its dead letters, with the source `topic` and `partition`, handed
    to `write` (the host's `DeadLetterQueue.write`, directly or through a call to where it runs)."""

    def __init__(self, write: Callable[[DeadLetterBatch], None], topic: str, partition: int) -> None:
        self._write = write
        self._topic = topic
        self._partition = partition

    def write_dead_letters(
        self,
        group_id: str,
        settings: DeadLetterSettings,
        letters: tuple[DeadLetters, ...],
        originals: Mapping[int, tuple[bytes | None, bytes | None]],
    ) -> None:
        self._write(DeadLetterBatch(group_id, self._topic, self._partition, settings, letters, dict(originals)))

"""The admin facade: Kafka's Admin client (topics, configs, partitions, records, offsets) over the broker's actors.

Topic metadata comes from the controller (`actors.server.controller`); the live numbers of each partition
(offsets, size, segments, folder) come from the partition actors' `state()`, asked of all partitions at
once. Every method blocks until the broker has answered and raises the broker's typed errors
(`UnknownTopicOrPartitionError`, `TopicExistsError`, `InvalidPartitionsError`, `InvalidConfigError`,
`PolicyViolationError`, ...), never Ray's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from actors.calls import call, partition_actor
from actors.clients.broker import Broker
from actors.server.controller import TopicMetadata
from storage.arguments import is_int
from storage.errors import InvalidConfigError, InvalidRequestError

# Kafka's ListOffsets sentinels (OffsetSpec.earliest(), latest(), maxTimestamp()).
OFFSET_SPECS = {"earliest": -2, "latest": -1, "max-timestamp": -3}


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    """One partition: where it lives (Ray node, log dir) and its offsets and size now."""

    partition: int
    node_id: str
    log_dir: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """A topic's config overrides (Kafka names) and its partitions, in partition order."""

    name: str
    config: dict[str, str]
    partitions: list[PartitionDescription]


class Admin:
    """Manages topics of the running broker; see the module docstring."""

    def __init__(self, broker: Broker | None = None) -> None:
        self._broker = broker or Broker.connect()
        self._controller = self._broker.controller

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None) -> TopicDescription:
        """Creates the topic (Kafka's CreateTopics); `config` takes Kafka's topic config names."""
        metadata = call(self._controller.create_topic.remote(name, partitions, _config_mapping(config)))
        return self._describe(metadata)

    def delete_topic(self, name: str) -> None:
        call(self._controller.delete_topic.remote(name))

    def list_topics(self, include_internal: bool = False) -> list[str]:
        return call(self._controller.list_topics.remote(include_internal))

    def describe_topic(self, name: str) -> TopicDescription:
        return self._describe(call(self._controller.describe_topic.remote(name)))

    def alter_topic_config(self, name: str, config: Mapping[str, str]) -> TopicDescription:
        """Merges `config` into the topic's overrides; every partition applies it at once."""
        return self._describe(call(self._controller.alter_topic_config.remote(name, _config_mapping(config))))

    def add_partitions(self, name: str, total: int) -> TopicDescription:
        """Grows the topic to `total` partitions (topics never shrink)."""
        return self._describe(call(self._controller.add_partitions.remote(name, total)))

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Kafka's DeleteRecords: records below `offset` go; returns the new log start offset."""
        return call(self._broker.partition(topic, partition).delete_records.remote(offset))

    def list_offsets(self, topic: str, spec: str | int) -> dict[int, tuple[int, int] | None]:
        """Per partition, the (offset, timestamp) Kafka's ListOffsets gives for `spec`: `earliest`, `latest`,
        `max-timestamp`, or a timestamp in ms (the first record at or after it); None when there is none."""
        timestamp = _offset_spec(spec)
        partitions = sorted(self._broker.topic(topic).partitions)
        refs = [partition_actor(topic, p).list_offset.remote(timestamp) for p in partitions]
        answers = {}
        for partition, ref in zip(partitions, refs, strict=True):
            found = call(ref)
            answers[partition] = None if found is None else (found.offset, found.timestamp)
        return answers

    def _describe(self, metadata: TopicMetadata) -> TopicDescription:
        partitions = sorted(metadata.partitions)
        refs = [partition_actor(metadata.name, p).state.remote() for p in partitions]
        described = []
        for partition, ref in zip(partitions, refs, strict=True):
            state = call(ref)
            described.append(
                PartitionDescription(
                    partition,
                    metadata.partitions[partition],
                    str(Path(state.directory).parent),
                    state.log_start_offset,
                    state.log_end_offset,
                    state.high_watermark,
                    state.size_bytes,
                    state.segments,
                )
            )
        return TopicDescription(metadata.name, dict(metadata.config), described)


def _config_mapping(config: Mapping[str, str] | None) -> dict[str, str]:
    """A plain dict of `config` for the controller; anything but a mapping is an `InvalidConfigError`."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidConfigError(f"a topic config must be a mapping, not {type(config).__name__}")
    return dict(config)


def _offset_spec(spec: str | int) -> int:
    if isinstance(spec, str):
        if spec in OFFSET_SPECS:
            return OFFSET_SPECS[spec]
        if spec.isdigit():
            return int(spec)
    elif is_int(spec) and spec >= 0:
        return spec
    raise InvalidRequestError(
        f"offset spec must be one of {', '.join(OFFSET_SPECS)} or a timestamp in ms >= 0, got {spec!r}"
    )


__all__ = ["Admin", "PartitionDescription", "TopicDescription"]

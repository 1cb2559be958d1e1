"""The name of one partition: `(topic, partition)`, as Kafka's `TopicPartition`.

A plain tuple rather than a class: it is a dict key and a checkpoint entry everywhere, sorts as Kafka sorts
partitions in checkpoint files (by topic, then number), and crosses Ray's pickling for free.
"""

from __future__ import annotations

from storage.arguments import is_int
from storage.errors import RaybrokerError, UnknownTopicOrPartitionError

TopicPartition = tuple[str, int]


def check_topic_partition(tp: object, error: type[RaybrokerError] = UnknownTopicOrPartitionError) -> TopicPartition:
    """`tp` as a (topic, partition) tuple, or `error` unless it is (str, int >= 0): callers' arguments arrive
    untyped (through Ray, or from a client)."""
    if not isinstance(tp, tuple) or len(tp) != 2 or not isinstance(tp[0], str) or not is_int(tp[1]) or tp[1] < 0:
        raise error(f"expected a (topic, partition >= 0) tuple, got {tp!r}")
    return tp[0], tp[1]

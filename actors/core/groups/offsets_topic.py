"""`__consumer_offsets`, the internal topic of the group coordinator's committed offsets, which the broker creates
itself.

`ensure_consumer_offsets_topic` creates it with `offsets.topic.num.partitions` partitions and Kafka's settings for
it: compacted (only the latest commit of each group and partition matters) in 100 MiB segments (Kafka's
`offsets.topic.segment.bytes`), so the cleaner can compact sealed segments long before the 1 GiB default would
roll. A broker's start calls it, and so does the group coordinator when it finds the topic deleted (a client may
delete it, as Kafka allows; Kafka creates it again for the next group that needs it). The controller's metadata
log, `__cluster_metadata`, is storage's (`storage.logdir.log_dirs.METADATA_TOPIC`): log dirs skip its folder.
"""

from __future__ import annotations

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC, TopicMetadata
from actors.core.internal_topics import TopicAdmin, ensure_internal_topic

# Kafka's `offsets.topic.replication.factor` default.
DEFAULT_OFFSETS_REPLICATION_FACTOR = 3
CONSUMER_OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


def ensure_consumer_offsets_topic(
    controller: TopicAdmin, partitions: int, replication_factor: int = DEFAULT_OFFSETS_REPLICATION_FACTOR
) -> TopicMetadata:
    """`__consumer_offsets` as the controller has it, created first with `partitions` partitions (the broker's
    `offsets.topic.num.partitions`), `replication_factor` replicas (its `offsets.topic.replication.factor`, capped at
    the brokers running, with a warning: the first broker of a cluster creates the topic alone) and
    `CONSUMER_OFFSETS_CONFIG` if it does not exist. An existing topic is left as it is, whatever its partition count
    and replicas, as Kafka leaves it."""
    return ensure_internal_topic(
        controller,
        CONSUMER_OFFSETS_TOPIC,
        partitions,
        replication_factor,
        CONSUMER_OFFSETS_CONFIG,
        "offsets.topic.replication.factor",
    )

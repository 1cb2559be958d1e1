"""The broker's internal topics, which the broker creates itself.

`__consumer_offsets` holds the group coordinator's committed offsets (`actors.server.group_coordinator`);
`ensure_consumer_offsets_topic` creates it with `offsets.topic.num.partitions` partitions and Kafka's settings
for it: compacted (only the latest commit of each group and partition matters) in 100 MiB segments (Kafka's
`offsets.topic.segment.bytes`), so the cleaner can compact sealed segments long before the 1 GiB default
would roll. `start_broker` calls it, and so does the group coordinator when it finds the topic deleted (a client
may delete it, as Kafka allows; Kafka creates it again for the next group that needs it). The controller's
metadata log, `__cluster_metadata`, is storage's (`storage.logdir.log_dirs.METADATA_TOPIC`): log dirs skip its
folder.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from actors.calls import call
from actors.core.controller.topic_metadata import TopicMetadata
from storage.errors import TopicExistsError

logger = logging.getLogger(__name__)

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's `offsets.topic.replication.factor` default.
DEFAULT_OFFSETS_REPLICATION_FACTOR = 3
CONSUMER_OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


def ensure_consumer_offsets_topic(
    controller_handle: Any, partitions: int, replication_factor: int = DEFAULT_OFFSETS_REPLICATION_FACTOR
) -> TopicMetadata:
    """`__consumer_offsets` as the controller (`controller_handle`) has it, created first with `partitions`
    partitions (the broker's `offsets.topic.num.partitions`), `replication_factor` replicas (its
    `offsets.topic.replication.factor`, capped at the brokers running, with a warning: the first broker of a
    cluster creates the topic alone) and `CONSUMER_OFFSETS_CONFIG` if it does not exist. An existing topic is left
    as it is, whatever its partition count and replicas, as Kafka leaves it."""
    brokers = len(call(controller_handle.brokers.remote()))
    replicas = max(min(replication_factor, brokers), 1)
    with contextlib.suppress(TopicExistsError):
        created = call(
            controller_handle.create_topic.remote(
                CONSUMER_OFFSETS_TOPIC, partitions, CONSUMER_OFFSETS_CONFIG, replication_factor=replicas
            )
        )
        if replicas < replication_factor:
            logger.warning(
                "offsets.topic.replication.factor is %d but %d broker(s) run: %s was created with %d replica(s)",
                replication_factor,
                brokers,
                CONSUMER_OFFSETS_TOPIC,
                replicas,
            )
        return created
    return call(controller_handle.describe_topic.remote(CONSUMER_OFFSETS_TOPIC))

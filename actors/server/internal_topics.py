"""The broker's internal topics, which the broker creates itself.

`__consumer_offsets` holds the group coordinator's committed offsets (`actors.server.group_coordinator`);
`start_broker` creates it with `offsets.topic.num.partitions` partitions and Kafka's settings for it:
compacted (only the latest commit of each group and partition matters) in 100 MiB segments (Kafka's
`offsets.topic.segment.bytes`), so the cleaner can compact sealed segments long before the 1 GiB default
would roll. The controller's metadata log, `__cluster_metadata`, is storage's
(`storage.logdir.log_dirs.METADATA_TOPIC`): log dirs skip its folder.
"""

from __future__ import annotations

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
CONSUMER_OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}

"""The replicas a topic's replication throttle applies to: Kafka's `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas` topic configs, parsed and checked.

A value is empty (no replica is throttled), the literal `*` (every replica of the topic), or a comma-separated list
of `partition:broker` pairs (`0:101,0:102,1:101`), whitespace around each item ignored, as Kafka's
`ThrottledReplicaListValidator` accepts them and with its message for anything else. `kafka-reassign-partitions.sh
--throttle` writes them: the leader list names each moving partition's current replicas, the follower list the
replicas it adds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from storage.errors import InvalidConfigError

_PAIR = re.compile(r"(\d+):(\d+)")


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """One throttled-replicas config: every replica (`everything`), or the `(partition, broker)` pairs listed."""

    everything: bool
    pairs: frozenset[tuple[int, int]]

    @classmethod
    def parse(cls, name: str, value: str) -> ThrottledReplicas:
        """`value` of config `name`; `InvalidConfigError` with Kafka's wording when it is neither `*` nor pairs."""
        items = [item.strip() for item in value.split(",")]
        if items == ["*"]:
            return cls(True, frozenset())
        if items == [""]:
            return cls(False, frozenset())
        pairs = []
        for item in items:
            match = _PAIR.fullmatch(item)
            if match is None:
                raise InvalidConfigError(
                    f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be the literal '*' or "
                    "a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                )
            pairs.append((int(match.group(1)), int(match.group(2))))
        return cls(False, frozenset(pairs))

    def partitions_of(self, broker: int) -> frozenset[int] | None:
        """The partitions throttled on `broker`: None for all of them (`*`)."""
        if self.everything:
            return None
        return frozenset(partition for partition, listed in self.pairs if listed == broker)

"""Whether the cluster serves share groups now: Kafka 4.2's `share.version` gate (`KafkaApis.
isShareGroupProtocolEnabled`).

Share groups are served while the cluster finalizes `share.version` 1 or above (the listener's copy of the features,
`cluster.protocol.feature_cache`; a new cluster finalizes 1, as Kafka 4.2's `kafka-storage format` does). Below it
every share-group API answers UNSUPPORTED_VERSION (35) before any other check, as Kafka 4.2's broker does:
ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, AlterShareGroupOffsets and DeleteShareGroupOffsets at the top,
ShareGroupDescribe and DescribeShareGroupOffsets for each group. Before the listener's first copy of the features
arrives a heartbeat answers COORDINATOR_NOT_AVAILABLE (15), which clients retry, as the consumer group protocol's does;
the other APIs are served meanwhile (a member exists only once a heartbeat admitted it).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import SHARE_VERSION, SHARE_VERSION_LEVEL, UNKNOWN_EPOCH
from cluster.protocol.feature_cache import FeatureCache

# Kafka's message of UNSUPPORTED_VERSION, which the answers with an error message carry (`Errors.message()`).
UNSUPPORTED_VERSION_MESSAGE = "The version of API is not supported."


class ShareVersionGate:
    """The gate of one listener's share-group handlers; without a feature copy (`features` None) it never refuses."""

    def __init__(self, features: FeatureCache | None) -> None:
        self._features = features

    def refusal(self, before_known: ErrorCode | None = None) -> ErrorCode | None:
        """UNSUPPORTED_VERSION while the cluster does not serve share groups, `before_known` until the first copy of
        the features arrived, else None."""
        if self._features is None:
            return None
        epoch, levels = self._features.current()
        if epoch == UNKNOWN_EPOCH:
            return before_known
        if levels.get(SHARE_VERSION, 0) < SHARE_VERSION_LEVEL:
            return ErrorCode.unsupported_version
        return None

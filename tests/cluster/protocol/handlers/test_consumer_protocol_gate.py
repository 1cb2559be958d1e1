"""The consumer group protocol (KIP-848) is served as the cluster's `group.version` says, as Kafka 4.2's broker serves
it: a new cluster finalizes level 1 and a member joins; once `kafka-features downgrade --feature group.version=0` has
gone through this listener, ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION with no member id nor epoch and
ConsumerGroupDescribe the same for each group (what Kafka 4.2 answered to the same sequence, recorded over the wire),
while the group is kept: after the upgrade back its member's next heartbeat is answered in its epoch. Before the
listener's first copy of the features both answer COORDINATOR_NOT_AVAILABLE, which clients retry."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import GROUP_VERSION, GROUP_VERSION_LEVEL
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.handlers.consumer_group_apis import (
    CONSUMER_GROUP_DESCRIBE_KEY,
    CONSUMER_GROUP_HEARTBEAT_KEY,
    ConsumerGroupDescribeHandler,
    ConsumerGroupHeartbeatHandler,
)
from cluster.protocol.handlers.features import UPDATE_FEATURES_KEY, UpdateFeaturesHandler
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.handlers.test_acls import access_for, ask
from tests.cluster.protocol.helpers import run

DESCRIBE = {"group_ids": ["g"], "include_authorized_operations": False}
SAFE_DOWNGRADE, UPGRADE = 2, 1


def heartbeat(features: FeatureCache, groups: GroupView, epoch: int = 0) -> Any:
    values = {
        "group_id": "g",
        "member_id": "member-1",
        "member_epoch": epoch,
        "rebalance_timeout": 30000,
        "subscribed_topic_names": ["t"],
        "topic_partitions": [],
    }
    return ask(ConsumerGroupHeartbeatHandler(groups, features), CONSUMER_GROUP_HEARTBEAT_KEY, values, 1)


def described(features: FeatureCache, groups: GroupView) -> Any:
    (group,) = ask(ConsumerGroupDescribeHandler(groups, features), CONSUMER_GROUP_DESCRIBE_KEY, DESCRIBE, 1).groups
    return group


def set_feature(features: FeatureCache, security: SecurityView, feature: str, level: int, upgrade_type: int) -> None:
    """UpdateFeatures of one feature through this listener's handler, which reloads `features`."""
    update = {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}
    handler = UpdateFeaturesHandler(security, features, 0, access_for(security))
    answer = ask(handler, UPDATE_FEATURES_KEY, {"feature_updates": [update]}, 1)
    assert [result.error_code for result in answer.results] == [ErrorCode.none]


def test_the_consumer_protocol_follows_group_version(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    run(view.create_topic("t", 2))
    features = FeatureCache(security)
    early = heartbeat(features, groups)
    assert (early.error_code, early.member_epoch) == (ErrorCode.coordinator_not_available, 0)
    assert described(features, groups).error_code == ErrorCode.coordinator_not_available

    run(features.refresh())
    assert features.current()[1][GROUP_VERSION] == GROUP_VERSION_LEVEL
    joined = heartbeat(features, groups)
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)

    set_feature(features, security, GROUP_VERSION, 0, SAFE_DOWNGRADE)
    refused = heartbeat(features, groups, joined.member_epoch)
    assert (refused.error_code, refused.error_message, refused.member_id, refused.member_epoch) == (
        ErrorCode.unsupported_version,
        None,
        None,
        0,
    )
    group = described(features, groups)
    assert (group.error_code, group.error_message, group.group_state, group.members) == (
        ErrorCode.unsupported_version,
        None,
        "",
        (),
    )

    set_feature(features, security, GROUP_VERSION, GROUP_VERSION_LEVEL, UPGRADE)
    again = heartbeat(features, groups, joined.member_epoch)
    assert (again.error_code, again.member_id, again.member_epoch) == (ErrorCode.none, "member-1", 1)
    assert described(features, groups).group_state == "Stable"

"""Share groups (KIP-932) are served as the cluster's `share.version` says, as Kafka 4.2's broker serves them: a new
cluster finalizes level 1 and a member joins; once `kafka-features downgrade --feature share.version=0` has gone
through this listener every share-group API answers UNSUPPORTED_VERSION (ShareGroupHeartbeat with no member id nor
epoch, ShareGroupDescribe and DescribeShareGroupOffsets for each group, ShareFetch, ShareAcknowledge,
AlterShareGroupOffsets and DeleteShareGroupOffsets at the top, the last two with Kafka's message), while the group is
kept: after the upgrade back its member's next heartbeat is answered in its epoch. Before the listener's first copy of
the features a heartbeat answers COORDINATOR_NOT_AVAILABLE, which clients retry. The same sequence against Kafka 4.2
over the wire: `tests/cluster/protocol/test_features.py`."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.controller.finalized_features import SHARE_VERSION, SHARE_VERSION_LEVEL
from actors.core.shares.share_sessions import ShareSessions
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.handlers.share_fetch import (
    SHARE_ACKNOWLEDGE_KEY,
    SHARE_FETCH_KEY,
    ShareAcknowledgeHandler,
    ShareFetchHandler,
)
from cluster.protocol.handlers.share_group_apis import (
    SHARE_GROUP_DESCRIBE_KEY,
    SHARE_GROUP_HEARTBEAT_KEY,
    ShareGroupDescribeHandler,
    ShareGroupHeartbeatHandler,
)
from cluster.protocol.handlers.share_group_offsets import (
    ALTER_SHARE_GROUP_OFFSETS_KEY,
    DELETE_SHARE_GROUP_OFFSETS_KEY,
    DESCRIBE_SHARE_GROUP_OFFSETS_KEY,
    AlterShareGroupOffsetsHandler,
    DeleteShareGroupOffsetsHandler,
    DescribeShareGroupOffsetsHandler,
)
from cluster.protocol.handlers.share_version_gate import UNSUPPORTED_VERSION_MESSAGE
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.handlers.test_acls import ask
from tests.cluster.protocol.handlers.test_consumer_protocol_gate import SAFE_DOWNGRADE, UPGRADE, set_feature
from tests.cluster.protocol.helpers import run

SESSION = {"group_id": "g", "member_id": "member-1", "share_session_epoch": 0, "topics": []}


def heartbeat(features: FeatureCache, groups: GroupView, epoch: int = 0) -> Any:
    values = {"group_id": "g", "member_id": "member-1", "member_epoch": epoch, "subscribed_topic_names": ["t"]}
    return ask(ShareGroupHeartbeatHandler(groups, None, features), SHARE_GROUP_HEARTBEAT_KEY, values, 1)


def the_others(features: FeatureCache, view: InProcessBrokerView, groups: GroupView) -> list[tuple[Any, ...]]:
    """Every share-group API but the heartbeat about group g: (error code, error message) of each."""
    sessions = ShareSessions()
    describe = {"group_ids": ["g"], "include_authorized_operations": False}
    (described,) = ask(
        ShareGroupDescribeHandler(groups, view, None, features), SHARE_GROUP_DESCRIBE_KEY, describe, 1
    ).groups
    fetch = {**SESSION, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100}
    fetch["forgotten_topics_data"] = []
    fetched = ask(ShareFetchHandler(view, groups, sessions, features=features), SHARE_FETCH_KEY, fetch, 1)
    acknowledge = {**SESSION, "share_session_epoch": 1}
    handler = ShareAcknowledgeHandler(view, groups, sessions, features=features)
    acknowledged = ask(handler, SHARE_ACKNOWLEDGE_KEY, acknowledge, 1)
    offsets = {"groups": [{"group_id": "g", "topics": None}]}
    handler = DescribeShareGroupOffsetsHandler(view, None, features)
    (group_offsets,) = ask(handler, DESCRIBE_SHARE_GROUP_OFFSETS_KEY, offsets, 1).groups
    change = {"group_id": "g", "topics": []}
    altered = ask(AlterShareGroupOffsetsHandler(view, groups, None, features), ALTER_SHARE_GROUP_OFFSETS_KEY, change, 0)
    handler = DeleteShareGroupOffsetsHandler(view, groups, None, features)
    deleted = ask(handler, DELETE_SHARE_GROUP_OFFSETS_KEY, change, 0)
    return [
        (described.error_code, described.error_message),
        (fetched.error_code, fetched.error_message),
        (acknowledged.error_code, acknowledged.error_message),
        (group_offsets.error_code, group_offsets.error_message),
        (altered.error_code, altered.error_message),
        (deleted.error_code, deleted.error_message),
    ]


def test_share_groups_follow_share_version(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    run(view.create_topic("t", 1))
    features = FeatureCache(security)
    early = heartbeat(features, groups)
    assert (early.error_code, early.member_epoch) == (ErrorCode.coordinator_not_available, 0)

    run(features.refresh())
    assert features.current()[1][SHARE_VERSION] == SHARE_VERSION_LEVEL
    joined = heartbeat(features, groups)
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    served = the_others(features, view, groups)
    assert ErrorCode.unsupported_version not in {code for code, _ in served}

    set_feature(features, security, SHARE_VERSION, 0, SAFE_DOWNGRADE)
    refused = heartbeat(features, groups, joined.member_epoch)
    assert (refused.error_code, refused.member_id, refused.member_epoch) == (ErrorCode.unsupported_version, None, 0)
    unsupported = (ErrorCode.unsupported_version, None)
    with_message = (ErrorCode.unsupported_version, UNSUPPORTED_VERSION_MESSAGE)
    assert the_others(features, view, groups) == [unsupported] * 4 + [with_message] * 2

    set_feature(features, security, SHARE_VERSION, SHARE_VERSION_LEVEL, UPGRADE)
    again = heartbeat(features, groups, joined.member_epoch)
    assert (again.error_code, again.member_id, again.member_epoch) == (ErrorCode.none, "member-1", 1)

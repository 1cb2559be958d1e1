"""The frames of the group channel (`actors.channels.group_channel`): the group coordinator's methods a same-node
listener calls by name, and the codec of their calls (`actors.channels.call_frames`), whose only classes are the
group API's messages and results.

`GROUP_METHODS` are every method the listeners' `GroupView` calls (`cluster.protocol.views.group_view`): the
classic protocol's JoinGroup, SyncGroup, Heartbeat and LeaveGroup with their bounded waits, KIP-848's
ConsumerGroupHeartbeat, KIP-932's ShareGroupHeartbeat and ShareGroupDescribe, a share group's settings and whether
its offsets may change (AlterShareGroupOffsets, DeleteShareGroupOffsets), offsets
committed, fetched and deleted (transactional ones too), and the groups listed, described and deleted; and
`complete_transaction`, which the transaction coordinator calls once a COMMIT or ABORT marker reached a
`__consumer_offsets` partition. Anything else is refused by the channel.
"""

from __future__ import annotations

from actors.channels.call_frames import CallCodec
from actors.core.groups.consumer_group_api import (
    ConsumerGroupDescription,
    ConsumerGroupState,
    ConsumerMemberDescription,
    HeartbeatRequest,
    HeartbeatResult,
)
from actors.core.groups.group_membership import (
    GroupDescription,
    GroupError,
    GroupState,
    JoinMember,
    JoinResult,
    MemberDescription,
    PendingJoin,
    SyncResult,
)
from actors.core.shares.group_share_config import DeadLetterSettings, ResolvedShareConfig
from actors.core.shares.share_group import (
    ShareGroupDescription,
    ShareGroupState,
    ShareHeartbeatAnswer,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    ShareMemberDescription,
)
from storage.records.consumer_offsets import OffsetAndMetadata

GROUP_METHODS = frozenset(
    {
        "join_group",
        "await_join",
        "sync_group",
        "await_sync",
        "heartbeat",
        "leave_group",
        "commit_member",
        "consumer_group_heartbeat",
        "describe_consumer_group",
        "check_offset_fetch",
        "group_offsets",
        "fetch_committed",
        "partition_for",
        "commit_transactional",
        "unstable_offsets",
        "list_groups",
        "describe_group",
        "delete_group",
        "delete_offsets",
        "complete_transaction",
        "share_group_heartbeat",
        "describe_share_group",
        "share_group_settings",
        "admit_share_offsets_change",
    }
)

GROUP_CODEC = CallCodec(
    (
        GroupError,
        GroupState,
        ConsumerGroupState,
        JoinMember,
        JoinResult,
        PendingJoin,
        SyncResult,
        MemberDescription,
        GroupDescription,
        HeartbeatRequest,
        HeartbeatResult,
        ConsumerMemberDescription,
        ConsumerGroupDescription,
        OffsetAndMetadata,
        ShareGroupState,
        ShareHeartbeatRequest,
        ShareHeartbeatResult,
        ShareHeartbeatAnswer,
        ShareMemberDescription,
        ShareGroupDescription,
        ResolvedShareConfig,
        DeadLetterSettings,
    )
)

__all__ = ["GROUP_CODEC", "GROUP_METHODS"]

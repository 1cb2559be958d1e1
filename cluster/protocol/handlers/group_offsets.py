"""OffsetCommit (8) and OffsetFetch (9): a group's committed offsets, in the `__consumer_offsets` topic that
raybroker's Python `Consumer` commits to too, so either kind of client resumes where the other committed.

OffsetCommit checks, per partition, that the topic and partition exist (else UNKNOWN_TOPIC_OR_PARTITION, 3),
that the metadata fits `offset.metadata.max.bytes` (Kafka's 4096; else OFFSET_METADATA_TOO_LARGE, 12) and that
the offset is not negative (INVALID_REQUEST, 42); the rest are written in one batch if the group's state allows
the commit (`GroupMembership.check_commit`, Kafka's classic coordinator's rules: one with generation -1 is
written into a group without members (Empty, or only known by its committed offsets), which is how a
consumer that assigns its own partitions and the admin client's AlterConsumerGroupOffsets commit; into a group
with members only a member commits, anyone else gets UNKNOWN_MEMBER_ID, generation -1 without a member id
included; a member of another generation gets ILLEGAL_GENERATION, a member's commit during the sync phase
REBALANCE_IN_PROGRESS), and that verdict is every such partition's code. Leader epochs are not kept:
OffsetFetch answers -1.

In a group of the consumer protocol (KIP-848) the generation is the member epoch: OffsetCommit needs v9+ from a
member (UNSUPPORTED_VERSION, 35, below), and another epoch than the member's answers STALE_MEMBER_EPOCH (113); an
OffsetFetch v9+ naming a member is checked the same way (`ConsumerGroups.check_commit` / `check_fetch`).

OffsetFetch v1-7 asks for one group, v8+ for several; a null topic list (v2+) asks for every committed offset of
the group. A partition without a commit answers offset -1 with no error, as Kafka's does. With `require_stable`
(v7+, what a read_committed Java consumer sends) a partition with transactional offsets of the group still pending
(TxnOffsetCommit before its transaction's COMMIT marker) answers UNSTABLE_OFFSET_COMMIT (88), which clients retry;
without it, such a partition answers its last committed offset.

Authorization, as Kafka's: OffsetCommit needs READ on the group (else every partition answers
GROUP_AUTHORIZATION_FAILED, 30) and READ on each topic (else its partitions answer TOPIC_AUTHORIZATION_FAILED, 29,
before their existence is checked). OffsetFetch needs DESCRIBE on each group (else that group answers
GROUP_AUTHORIZATION_FAILED); a named topic the principal may not DESCRIBE answers offset -1 and
TOPIC_AUTHORIZATION_FAILED per partition, and a request for every committed offset leaves such topics out.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.groups.group_membership import GroupError
from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import coordinator_error_code, error_code, group_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_names
from cluster.protocol.handlers.partition_counts import PartitionCounts
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView, TopicPartition
from storage.errors import RaybrokerError
from storage.records.consumer_offsets import NO_LEADER_EPOCH

OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
# Kafka's `offset.metadata.max.bytes` default.
OFFSET_METADATA_MAX_BYTES = 4096
NO_OFFSET = -1
FIRST_MULTI_GROUP_FETCH_VERSION = 8
# OffsetFetch v9's member epoch of a request that names no member (an admin client, a classic consumer).
NO_MEMBER_EPOCH = -1


class OffsetCommitHandler:
    """Answers OffsetCommit (see the module docstring)."""

    def __init__(self, view: BrokerView, groups: GroupView, access: AccessControl | None = None) -> None:
        self._view = view
        self._groups = groups
        self._access = access
        self._counts = PartitionCounts(view)

    async def __call__(self, request: Request) -> Any:
        body = request.body
        codes: dict[TopicPartition, ErrorCode] = {}
        if allows(self._access, request.context, AclOperation.READ, ResourceType.GROUP, body.group_id):
            await self._commit(request, codes)
        else:
            for topic in body.topics:
                codes.update(
                    {(topic.name, p.partition_index): ErrorCode.group_authorization_failed for p in topic.partitions}
                )
        return build(
            response_schema(OFFSET_COMMIT_KEY, request.api_version),
            {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": topic.name,
                        "partitions": [
                            {"partition_index": p.partition_index, "error_code": codes[(topic.name, p.partition_index)]}
                            for p in topic.partitions
                        ],
                    }
                    for topic in body.topics
                ],
            },
        )

    async def _commit(self, request: Request, codes: dict[TopicPartition, ErrorCode]) -> None:
        """Commits what may be committed; every partition's code goes into `codes`."""
        body = request.body
        offsets: dict[TopicPartition, tuple[int, str]] = {}
        readable = authorized_names(
            self._access, request.context, AclOperation.READ, ResourceType.TOPIC, (topic.name for topic in body.topics)
        )
        try:
            partition_counts = await self._counts.covering(
                (topic.name, partition.partition_index) for topic in body.topics for partition in topic.partitions
            )
        except RaybrokerError as exc:
            partition_counts, failure = {}, error_code(exc)
        else:
            failure = ErrorCode.unknown_topic_or_partition
        for topic in body.topics:
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                metadata = partition.committed_metadata or ""
                if topic.name not in readable:
                    codes[key] = ErrorCode.topic_authorization_failed
                elif not 0 <= partition.partition_index < partition_counts.get(topic.name, 0):
                    codes[key] = failure
                elif len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    codes[key] = ErrorCode.offset_metadata_too_large
                elif partition.committed_offset < 0:
                    codes[key] = ErrorCode.invalid_request
                else:
                    offsets[key] = (partition.committed_offset, metadata)
        if offsets:
            try:
                verdict = group_error_code(
                    await self._groups.commit_offsets(
                        body.group_id,
                        body.member_id,
                        body.generation_id_or_member_epoch,
                        offsets,
                        api_version=request.api_version,
                    )
                )
            except RaybrokerError as exc:
                verdict = coordinator_error_code(exc)
            codes.update(dict.fromkeys(offsets, verdict))


class OffsetFetchHandler(GuardedHandler[GroupView]):
    """Answers OffsetFetch (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        response_type = response_schema(OFFSET_FETCH_KEY, request.api_version)
        stable = bool(getattr(body, "require_stable", False))
        if request.api_version >= FIRST_MULTI_GROUP_FETCH_VERSION:
            groups = [
                await self._fetch(
                    group.group_id,
                    group.topics,
                    context,
                    stable,
                    getattr(group, "member_id", None),
                    getattr(group, "member_epoch", NO_MEMBER_EPOCH),
                )
                for group in body.groups
            ]
            return build(response_type, {"throttle_time": 0, "groups": groups})
        answer = await self._fetch(body.group_id, body.topics, context, stable)
        return build(response_type, {"throttle_time": 0, **answer})

    async def _fetch(
        self,
        group: str,
        topics: Any,
        context: ConnectionContext,
        stable: bool,
        member_id: str | None = None,
        member_epoch: int = NO_MEMBER_EPOCH,
    ) -> dict[str, Any]:
        """One group's answer: {group_id, error_code, topics}. A member of a consumer-protocol group (v9+ names
        it) must fetch in its current epoch (`GroupView.check_offset_fetch`)."""
        if not allows(self._access, context, AclOperation.DESCRIBE, ResourceType.GROUP, group):
            return {"group_id": group, "error_code": ErrorCode.group_authorization_failed, "topics": []}
        if not group:
            return {"group_id": group, "error_code": group_error_code(GroupError.INVALID_GROUP_ID), "topics": []}
        if member_id is not None or member_epoch >= 0:
            try:
                verdict = await self._view.check_offset_fetch(group, member_id, member_epoch)
            except RaybrokerError as exc:
                return {"group_id": group, "error_code": coordinator_error_code(exc), "topics": []}
            if verdict != GroupError.NONE:
                return {"group_id": group, "error_code": group_error_code(verdict), "topics": []}
        visible = authorized_names(
            self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics or ())
        )
        wanted = (
            None if topics is None else [(t.name, p) for t in topics if t.name in visible for p in t.partition_indexes]
        )
        try:
            # Pending offsets first: a transaction completing between the two reads then shows as unstable or as
            # committed, never as neither (its offsets read while pending, then found no longer pending).
            unstable = await self._view.unstable_offsets(group, wanted) if stable else set()
            committed = await self._view.committed_offsets(group, wanted)
        except RaybrokerError as exc:
            return {"group_id": group, "error_code": coordinator_error_code(exc), "topics": []}
        if wanted is None:
            visible = authorized_names(
                self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, (topic for topic, _ in committed)
            )
            found = [(key, offset) for key, offset in sorted(committed.items()) if key[0] in visible]
        else:
            found = _in_order(wanted, committed)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in found:
            pending = (topic, partition) in unstable
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "committed_offset": NO_OFFSET if offset is None or pending else offset,
                    "committed_leader_epoch": NO_LEADER_EPOCH,
                    "metadata": "",
                    "error_code": ErrorCode.unstable_offset_commit if pending else ErrorCode.none,
                }
            )
        for topic in topics or ():
            if topic.name not in visible:
                by_topic.setdefault(topic.name, []).extend(
                    {
                        "partition_index": partition,
                        "committed_offset": NO_OFFSET,
                        "committed_leader_epoch": NO_LEADER_EPOCH,
                        "metadata": "",
                        "error_code": ErrorCode.topic_authorization_failed,
                    }
                    for partition in topic.partition_indexes
                )
        return {
            "group_id": group,
            "error_code": ErrorCode.none,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()],
        }


def _in_order(
    wanted: list[TopicPartition], committed: dict[TopicPartition, int | None]
) -> list[tuple[TopicPartition, int | None]]:
    return [(key, committed.get(key)) for key in wanted]

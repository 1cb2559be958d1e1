"""Share groups' offset admin APIs (KIP-932) as Kafka 4.2 serves them: DescribeShareGroupOffsets (90) v0-1,
AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0, what `kafka-share-groups.sh --describe`,
`--reset-offsets` and `--delete-offsets` send.

A share group's offsets live with its share-partitions, at each partition's leader
(`actors.core.shares.leader_shares`), so every answer is gathered from the leaders (`BrokerView.share_offsets`,
`alter_share_offset`, `delete_share_state`); the group coordinator only says whether the group may change
(`GroupView.admit_share_offsets_change`).

DescribeShareGroupOffsets answers, for each group, each partition's start offset as its share-partition last wrote it,
the leader epoch written with it and the lag (v1; Kafka 4.2's KIP-1226: the high watermark less the start offset less
the records done above it). Like Kafka, it answers no error for a group that is unknown or not a share group, nor for a
topic that does not exist (topic id zero) or a partition without state: those report start offset -1, leader epoch 0,
lag -1. Topics null asks for every partition the group has state on (Kafka's initialized share-partitions); here the
leaders of every topic's partitions are asked, and a topic the principal may not DESCRIBE is left out.

AlterShareGroupOffsets sets start offsets and DeleteShareGroupOffsets drops whole topics' state, only in a share group
without members (else NON_EMPTY_GROUP, "The group is not empty."); a classic or consumer group's id is
GROUP_ID_NOT_FOUND ("Group g is not a share group."), an empty group id INVALID_GROUP_ID; Alter creates an unknown group
(Empty), as Kafka's does. Alter takes any start offset (Kafka checks none; a later fetch follows the log start
offset), and a partition named twice takes the last. A topic that does not exist, or a partition beyond its count,
answers UNKNOWN_TOPIC_OR_PARTITION; Delete answers it too for a topic the group has no state on ("There is no offset
information to delete."), both with topic id zero, as Kafka does. Group-level errors answer no topics.

While the cluster's `share.version` is below 1 (`share_version_gate`), Describe answers UNSUPPORTED_VERSION for each
group, Alter and Delete for the request ("The version of API is not supported.", Kafka's message), before any other
check.

Authorization, as Kafka's `KafkaApis`: Describe needs DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for the
group) and on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions); Alter READ on the group and on each
topic; Delete DELETE on the group and READ on each topic (TOPIC_AUTHORIZATION_FAILED for the topic).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from actors.core.groups.group_membership import GroupError
from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.shares.leader_shares import UNKNOWN_SHARE_OFFSETS, ShareOffsets
from cluster.protocol.error_codes import coordinator_error_code, error_code, group_error_code
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_names
from cluster.protocol.handlers.share_version_gate import UNSUPPORTED_VERSION_MESSAGE, ShareVersionGate
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView, TopicInfo
from cluster.protocol.views.group_view import GroupView
from storage.errors import RaybrokerError

DESCRIBE_SHARE_GROUP_OFFSETS_KEY = 90
ALTER_SHARE_GROUP_OFFSETS_KEY = 91
DELETE_SHARE_GROUP_OFFSETS_KEY = 92

# The leaders asked at once by one request: "every topic" asks each partition of the cluster (thousands, on Ray one
# actor call each), and 64 calls in flight keep a listener's event loop and the actors' threads busy without piling up.
LEADER_CALLS_AT_ONCE = 64

# Kafka's `Errors` messages these answers carry.
NOT_HOSTED = "This server does not host this topic-partition."
NO_OFFSETS_TO_DELETE = "There is no offset information to delete."
GROUP_MESSAGES = {
    GroupError.NON_EMPTY_GROUP: "The group is not empty.",
    GroupError.INVALID_GROUP_ID: "The group id is invalid.",
}


def _offsets_row(partition: int, offsets: ShareOffsets, code: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "start_offset": offsets.start_offset,
        "leader_epoch": offsets.leader_epoch,
        "lag": offsets.lag,
        "error_code": code,
    }


class DescribeShareGroupOffsetsHandler(GuardedHandler[BrokerView]):
    """Answers DescribeShareGroupOffsets (see the module docstring)."""

    def __init__(
        self, view: BrokerView, access: AccessControl | None = None, features: FeatureCache | None = None
    ) -> None:
        super().__init__(view, access)
        self._gate = ShareVersionGate(features)

    async def __call__(self, request: Request) -> Any:
        described = [await self._describe(request, group) for group in request.body.groups]
        return build(
            response_schema(DESCRIBE_SHARE_GROUP_OFFSETS_KEY, request.api_version),
            {"throttle_time": 0, "groups": described},
        )

    async def _describe(self, request: Request, group: Any) -> dict[str, Any]:
        context, group_id = request.context, group.group_id
        unserved = self._gate.refusal()
        if unserved is not None:
            return {"group_id": group_id, "topics": [], "error_code": unserved}
        if not allows(self._access, context, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return {"group_id": group_id, "topics": [], "error_code": ErrorCode.group_authorization_failed}
        try:
            topics = await self._view.topics()
        except RaybrokerError as exc:
            return {"group_id": group_id, "topics": [], "error_code": error_code(exc)}
        calls = asyncio.Semaphore(LEADER_CALLS_AT_ONCE)
        if group.topics is None:
            visible = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, topics)
            wanted = [topics[name] for name in sorted(visible) if not topics[name].internal]
            rows = await asyncio.gather(*(self._topic_rows(group_id, topic, None, calls) for topic in wanted))
            answered = [row for row in rows if row["partitions"]]
            return {"group_id": group_id, "topics": answered, "error_code": ErrorCode.none}
        asked = [topic.topic_name for topic in group.topics]
        readable = authorized_names(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, asked)
        known, unknown, refused = [], [], []
        for topic in group.topics:
            name, partitions = topic.topic_name, list(topic.partitions)
            if name not in readable:
                rows = [
                    _offsets_row(p, UNKNOWN_SHARE_OFFSETS, ErrorCode.topic_authorization_failed) for p in partitions
                ]
                refused.append({"topic_name": name, "topic_id": None, "partitions": rows})
            elif name not in topics:
                rows = [_offsets_row(p, UNKNOWN_SHARE_OFFSETS) for p in partitions]
                unknown.append({"topic_name": name, "topic_id": None, "partitions": rows})
            else:
                known.append(self._topic_rows(group_id, topics[name], partitions, calls))
        return {
            "group_id": group_id,
            "topics": [*await asyncio.gather(*known), *unknown, *refused],
            "error_code": ErrorCode.none,
        }

    async def _topic_rows(
        self, group_id: str, topic: TopicInfo, partitions: list[int] | None, calls: asyncio.Semaphore
    ) -> dict[str, Any]:
        """The topic's rows: the `partitions` asked (each answered), or every partition the group has state on; the
        leaders asked while `calls` lets them."""
        every = partitions is None
        asked = range(topic.partition_count) if partitions is None else partitions
        found = await asyncio.gather(*(self._partition_offsets(group_id, topic, p, every, calls) for p in asked))
        return {
            "topic_name": topic.name,
            "topic_id": topic.topic_id,
            "partitions": [row for row in found if row is not None],
        }

    async def _partition_offsets(
        self, group_id: str, topic: TopicInfo, partition: int, only_with_state: bool, calls: asyncio.Semaphore
    ) -> dict[str, Any] | None:
        if not 0 <= partition < topic.partition_count:
            return _offsets_row(partition, UNKNOWN_SHARE_OFFSETS)
        try:
            async with calls:
                offsets = await self._view.share_offsets(topic.name, partition, group_id)
        except RaybrokerError as exc:
            return _offsets_row(partition, UNKNOWN_SHARE_OFFSETS, error_code(exc))
        if offsets is None:
            return None if only_with_state else _offsets_row(partition, UNKNOWN_SHARE_OFFSETS)
        return _offsets_row(partition, offsets)


class _ShareOffsetsChange(GuardedHandler[BrokerView], ABC):
    """What AlterShareGroupOffsets and DeleteShareGroupOffsets share: the group's checks and admission. A subclass
    names its API `KEY`, the operation on the group it needs and whether it makes an unknown group."""

    KEY: ClassVar[int]
    GROUP_OPERATION: ClassVar[AclOperation] = AclOperation.READ
    CREATES_GROUP: ClassVar[bool] = False

    def __init__(
        self,
        view: BrokerView,
        groups: GroupView,
        access: AccessControl | None = None,
        features: FeatureCache | None = None,
    ) -> None:
        super().__init__(view, access)
        self._groups = groups
        self._gate = ShareVersionGate(features)

    async def __call__(self, request: Request) -> Any:
        body = request.body
        group_id = body.group_id
        if self._gate.refusal() is not None:
            return self._answer(request, ErrorCode.unsupported_version, UNSUPPORTED_VERSION_MESSAGE)
        if not allows(self._access, request.context, self.GROUP_OPERATION, ResourceType.GROUP, group_id):
            return self._answer(request, ErrorCode.group_authorization_failed)
        if not group_id:
            return self._answer(request, ErrorCode.invalid_group_id, GROUP_MESSAGES[GroupError.INVALID_GROUP_ID])
        try:
            verdict = await self._groups.admit_share_offsets_change(group_id, self.CREATES_GROUP)
            topics = await self._view.topics()
        except RaybrokerError as exc:
            return self._answer(request, coordinator_error_code(exc))
        if verdict == GroupError.GROUP_ID_NOT_FOUND:
            return self._answer(request, ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        if verdict != GroupError.NONE:
            return self._answer(request, group_error_code(verdict), GROUP_MESSAGES.get(verdict))
        readable = authorized_names(
            self._access, request.context, AclOperation.READ, ResourceType.TOPIC, (t.topic_name for t in body.topics)
        )
        answers = await self._change(group_id, body.topics, readable, topics)
        return self._answer(request, ErrorCode.none, None, answers)

    @abstractmethod
    async def _change(
        self, group_id: str, asked: Any, readable: set[str], topics: dict[str, TopicInfo]
    ) -> list[dict[str, Any]]:
        """The request's topics changed at their leaders, each with its answer."""

    def _answer(
        self, request: Request, code: ErrorCode, message: str | None = None, answers: list[dict[str, Any]] | None = None
    ) -> Any:
        return build(
            response_schema(self.KEY, request.api_version),
            {"throttle_time": 0, "error_code": code, "error_message": message, "responses": answers or []},
        )


class AlterShareGroupOffsetsHandler(_ShareOffsetsChange):
    """Answers AlterShareGroupOffsets (see the module docstring)."""

    KEY = ALTER_SHARE_GROUP_OFFSETS_KEY
    CREATES_GROUP = True

    async def _change(
        self, group_id: str, asked: Any, readable: set[str], topics: dict[str, TopicInfo]
    ) -> list[dict[str, Any]]:
        failed, altered = [], []
        for topic in asked:
            name = topic.topic_name
            if name not in readable or name not in topics:
                code, message = (
                    (ErrorCode.topic_authorization_failed, None)
                    if name not in readable
                    else (ErrorCode.unknown_topic_or_partition, NOT_HOSTED)
                )
                rows = [_alter_row(p.partition_index, code, message) for p in topic.partitions]
                failed.append({"topic_name": name, "topic_id": None, "partitions": rows})
                continue
            info = topics[name]
            rows = [await self._alter(group_id, info, p.partition_index, p.start_offset) for p in topic.partitions]
            altered.append({"topic_name": name, "topic_id": info.topic_id, "partitions": rows})
        return [*failed, *altered]

    async def _alter(self, group_id: str, topic: TopicInfo, partition: int, start_offset: int) -> dict[str, Any]:
        if not 0 <= partition < topic.partition_count:
            return _alter_row(partition, ErrorCode.unknown_topic_or_partition, NOT_HOSTED)
        try:
            await self._view.alter_share_offset(topic.name, partition, group_id, start_offset)
        except RaybrokerError as exc:
            return _alter_row(partition, error_code(exc), str(exc))
        return _alter_row(partition, ErrorCode.none, None)


def _alter_row(partition: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": code, "error_message": message}


class DeleteShareGroupOffsetsHandler(_ShareOffsetsChange):
    """Answers DeleteShareGroupOffsets (see the module docstring)."""

    KEY = DELETE_SHARE_GROUP_OFFSETS_KEY
    GROUP_OPERATION = AclOperation.DELETE

    async def _change(
        self, group_id: str, asked: Any, readable: set[str], topics: dict[str, TopicInfo]
    ) -> list[dict[str, Any]]:
        failed, deleted = [], []
        for topic in asked:
            name = topic.topic_name
            if name not in readable:
                failed.append(_delete_row(name, None, ErrorCode.topic_authorization_failed, None))
            elif name not in topics:
                failed.append(_delete_row(name, None, ErrorCode.unknown_topic_or_partition, NOT_HOSTED))
            else:
                info = topics[name]
                try:
                    had = await self._delete_topic(group_id, info)
                except RaybrokerError as exc:
                    failed.append(_delete_row(name, info.topic_id, error_code(exc), str(exc)))
                    continue
                if any(had):
                    deleted.append(_delete_row(name, info.topic_id, ErrorCode.none, None))
                else:
                    failed.append(_delete_row(name, None, ErrorCode.unknown_topic_or_partition, NO_OFFSETS_TO_DELETE))
        return [*deleted, *failed]

    async def _delete_topic(self, group_id: str, topic: TopicInfo) -> list[bool]:
        """Each partition's share-partition of the group dropped at its leader: whether it had one."""
        return await drop_share_states(self._view, group_id, [topic])


async def drop_share_states(view: BrokerView, group_id: str, topics: Iterable[TopicInfo]) -> list[bool]:
    """The group's share-partition of each partition of `topics` dropped at the partition's leader, up to
    `LEADER_CALLS_AT_ONCE` leaders asked at once: whether each had one (DeleteShareGroupOffsets, DeleteGroups)."""
    calls = asyncio.Semaphore(LEADER_CALLS_AT_ONCE)

    async def delete(topic: str, partition: int) -> bool:
        async with calls:
            return await view.delete_share_state(topic, partition, group_id)

    return await asyncio.gather(*(delete(t.name, p) for t in topics for p in range(t.partition_count)))


def _delete_row(name: str, topic_id: Any, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"topic_name": name, "topic_id": topic_id, "error_code": code, "error_message": message}

"""OffsetCommit (8) and OffsetFetch (9): a group's committed offsets, in the `__consumer_offsets` topic that
raybroker's Python `Consumer` commits to too, so either kind of client resumes where the other committed.

OffsetCommit checks, per partition, that the topic and partition exist (else UNKNOWN_TOPIC_OR_PARTITION, 3); the
coordinator then checks the group's state (`GroupMembership.check_commit`, Kafka's classic coordinator's rules: one
with generation -1 is written into a group without members (Empty, or only known by its committed offsets), which is
how a consumer that assigns its own partitions and the admin client's AlterConsumerGroupOffsets commit; into a group
with members only a member commits, anyone else gets UNKNOWN_MEMBER_ID, generation -1 without a member id included; a
member of another generation gets ILLEGAL_GENERATION, a member's commit during the sync phase
REBALANCE_IN_PROGRESS). A verdict other than NONE is every remaining partition's code, as in Kafka 4.2, whose
`OffsetMetadataManager.commitOffset` validates the group before it looks at any partition. Past it, a partition
whose metadata is longer than `offset.metadata.max.bytes` (Kafka's 4096, counted as Kafka counts it: Java's
`String.length()`, UTF-16 code units) answers OFFSET_METADATA_TOO_LARGE (12) and one with a negative offset
INVALID_REQUEST (42); the others are written in one batch, each with its offset, leader epoch (v6+, -1 before) and
metadata, and answer NONE.

The answer is built as Kafka 4.2's broker builds it (`OffsetCommitResponse.Builder`): the partitions refused before
the coordinator is asked (unknown topic id, topic authorization, unknown topic or partition) come first, grouped by
topic in the order the request named them, and the coordinator's answer (each remaining topic of the request with
its partitions) is merged in after them, into a topic already answered or as a new one at the end (so a request
naming an unknown topic after a good one is answered the unknown one first, as recorded from Kafka 4.2 over the
wire).

In a group of the consumer protocol (KIP-848) the generation is the member epoch: OffsetCommit needs v9+ from a
member (UNSUPPORTED_VERSION, 35, below), and another epoch than the member's answers STALE_MEMBER_EPOCH (113); an
OffsetFetch v9+ naming a member is checked the same way (`ConsumerGroups.check_commit` / `check_fetch`).

OffsetFetch v1-7 asks for one group, v8+ for several; a null topic list (v2+) asks for every committed offset of
the group. A committed partition answers its offset and metadata, and from v5 its leader epoch; a partition without
a commit answers offset -1, leader epoch -1 and metadata "" with no error, as Kafka's does. With `require_stable`
(v7+, what a read_committed Java consumer sends) a partition with transactional offsets of the group still pending
(TxnOffsetCommit before its transaction's COMMIT marker) answers UNSTABLE_OFFSET_COMMIT (88) with offset -1, which
clients retry;
without it, such a partition answers its last committed offset. The named topics the coordinator answers come in the
request's order, then those refused (unknown topic id, topic authorization) in the request's order.

OffsetCommit v10 and OffsetFetch v10 (KIP-848, stable in Kafka 4.2) name each topic by its topic id and carry no
name; the id is looked up in the controller's topics (`BrokerView.topic_names_naming`). As Kafka 4.2's broker: an id
no topic has (never created, deleted, or the zero id) answers every partition of that topic UNKNOWN_TOPIC_ID (100),
OffsetFetch with offset -1, and the answer names the topic by the id it was asked for; a fetch of every committed
offset answers each topic by its id and leaves out a topic that has none (deleted while its offsets remain). The
group itself is checked before any topic, as at v9.

Authorization, as Kafka's: OffsetCommit needs READ on the group (else every partition answers
GROUP_AUTHORIZATION_FAILED, 30) and READ on each topic (else its partitions answer TOPIC_AUTHORIZATION_FAILED, 29,
before their existence is checked; at v10, after the id is found). OffsetFetch needs DESCRIBE on each group (else
that group answers GROUP_AUTHORIZATION_FAILED); a named topic the principal may not DESCRIBE answers offset -1 and
TOPIC_AUTHORIZATION_FAILED per partition, and a request for every committed offset leaves such topics out.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.groups.group_membership import GroupError
from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import coordinator_error_code, error_code, group_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_names
from cluster.protocol.handlers.metadata import wire_topic_id
from cluster.protocol.handlers.partition_counts import PartitionCounts
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView, TopicPartition
from storage.errors import RaybrokerError
from storage.kafka_uuid import ZERO_UUID
from storage.records.consumer_offsets import NO_LEADER_EPOCH, OffsetAndMetadata

OFFSET_COMMIT_KEY = 8
OFFSET_FETCH_KEY = 9
# Kafka's `offset.metadata.max.bytes` default.
OFFSET_METADATA_MAX_BYTES = 4096
NO_OFFSET = -1
FIRST_MULTI_GROUP_FETCH_VERSION = 8
# OffsetFetch v9's member epoch of a request that names no member (an admin client, a classic consumer).
NO_MEMBER_EPOCH = -1
# The first OffsetCommit and OffsetFetch version naming topics by topic id (both v10).
FIRST_TOPIC_ID_VERSION = 10

# A request's topic as the answer names it: its topic id from v10 (the zero id for kio's None), else its name.
TopicKey = uuid.UUID | str


class OffsetCommitHandler(GuardedHandler[BrokerView]):
    """Answers OffsetCommit (see the module docstring)."""

    def __init__(self, view: BrokerView, groups: GroupView, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._groups = groups
        self._counts = PartitionCounts(view)

    async def __call__(self, request: Request) -> Any:
        body = request.body
        by_id = request.api_version >= FIRST_TOPIC_ID_VERSION
        if allows(self._access, request.context, AclOperation.READ, ResourceType.GROUP, body.group_id):
            topics = await self._commit(request, by_id)
        else:
            topics = [
                _commit_answer(
                    topic, [(p.partition_index, ErrorCode.group_authorization_failed) for p in topic.partitions]
                )
                for topic in body.topics
            ]
        return build(response_schema(OFFSET_COMMIT_KEY, request.api_version), {"throttle_time": 0, "topics": topics})

    async def _commit(self, request: Request, by_id: bool) -> list[dict[str, Any]]:
        """Commits what may be committed; the answer's topics, in Kafka's order (see the module docstring)."""
        body = request.body
        try:
            names = await _names(self._view, body.topics, by_id)
        except RaybrokerError as exc:
            failed = error_code(exc)
            return [
                _commit_answer(topic, [(p.partition_index, failed) for p in topic.partitions]) for topic in body.topics
            ]
        readable = authorized_names(
            self._access, request.context, AclOperation.READ, ResourceType.TOPIC, (n for n in names if n is not None)
        )
        try:
            partition_counts = await self._counts.covering(
                (name, partition.partition_index)
                for topic, name in zip(body.topics, names, strict=True)
                if name in readable
                for partition in topic.partitions
            )
        except RaybrokerError as exc:
            partition_counts, failure = {}, error_code(exc)
        else:
            failure = ErrorCode.unknown_topic_or_partition
        refused: dict[TopicKey, dict[str, Any]] = {}
        asked: list[tuple[Any, str, list[Any]]] = []
        for topic, name in zip(body.topics, names, strict=True):
            if name is None or name not in readable or name not in partition_counts:
                # In Kafka's order: an id no topic has, then authorization, then existence.
                if name is None:
                    code = ErrorCode.unknown_topic_id
                elif name not in readable:
                    code = ErrorCode.topic_authorization_failed
                else:
                    code = failure
                _refuse(refused, topic, by_id, [(p.partition_index, code) for p in topic.partitions])
                continue
            count = partition_counts[name]
            absent = [(p.partition_index, failure) for p in topic.partitions if not 0 <= p.partition_index < count]
            if absent:
                _refuse(refused, topic, by_id, absent)
            present = [p for p in topic.partitions if 0 <= p.partition_index < count]
            if present:
                asked.append((topic, name, present))
        if not asked:
            return list(refused.values())
        answered = await self._commit_to_coordinator(request, asked)
        if not refused:
            return answered
        for (topic, _, _), answer in zip(asked, answered, strict=True):
            key = _key(topic, by_id)
            if key in refused:
                refused[key]["partitions"].extend(answer["partitions"])
            else:
                refused[key] = answer
        return list(refused.values())

    async def _commit_to_coordinator(
        self, request: Request, asked: list[tuple[Any, str, list[Any]]]
    ) -> list[dict[str, Any]]:
        """The coordinator's part: each asked topic's answer, its partitions in the request's order. The group's
        verdict comes first and, if not NONE, is every partition's code; else oversized metadata and negative
        offsets are refused per partition and the rest are written together (see the module docstring)."""
        body = request.body
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        codes: dict[TopicPartition, ErrorCode] = {}
        for _, name, partitions in asked:
            for partition in partitions:
                key = (name, partition.partition_index)
                metadata = partition.committed_metadata or ""
                if metadata_too_large(metadata):
                    codes[key] = ErrorCode.offset_metadata_too_large
                elif partition.committed_offset < 0:
                    codes[key] = ErrorCode.invalid_request
                else:
                    epoch = getattr(partition, "committed_leader_epoch", NO_LEADER_EPOCH)
                    offsets[key] = OffsetAndMetadata(partition.committed_offset, epoch, metadata)
        try:
            verdict = group_error_code(
                await self._groups.commit_offsets(
                    body.group_id,
                    body.member_id,
                    body.generation_id_or_member_epoch,
                    offsets,
                    api_version=request.api_version,
                    group_instance_id=getattr(body, "group_instance_id", None),
                )
            )
        except RaybrokerError as exc:
            verdict = coordinator_error_code(exc)
        if verdict != ErrorCode.none:
            codes = dict.fromkeys(codes, verdict)
        codes.update(dict.fromkeys(offsets, verdict))
        return [
            _commit_answer(topic, [(p.partition_index, codes[(name, p.partition_index)]) for p in partitions])
            for topic, name, partitions in asked
        ]


class OffsetFetchHandler(GuardedHandler[BrokerView]):
    """Answers OffsetFetch (see the module docstring)."""

    def __init__(self, view: BrokerView, groups: GroupView, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._groups = groups

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        response_type = response_schema(OFFSET_FETCH_KEY, request.api_version)
        stable = bool(getattr(body, "require_stable", False))
        by_id = request.api_version >= FIRST_TOPIC_ID_VERSION
        if request.api_version >= FIRST_MULTI_GROUP_FETCH_VERSION:
            groups = [
                await self._fetch(
                    group.group_id,
                    group.topics,
                    context,
                    stable,
                    by_id,
                    getattr(group, "member_id", None),
                    getattr(group, "member_epoch", NO_MEMBER_EPOCH),
                )
                for group in body.groups
            ]
            return build(response_type, {"throttle_time": 0, "groups": groups})
        answer = await self._fetch(body.group_id, body.topics, context, stable, by_id)
        return build(response_type, {"throttle_time": 0, **answer})

    async def _fetch(
        self,
        group: str,
        topics: Sequence[Any] | None,
        context: ConnectionContext,
        stable: bool,
        by_id: bool,
        member_id: str | None = None,
        member_epoch: int = NO_MEMBER_EPOCH,
    ) -> dict[str, Any]:
        """One group's answer: {group_id, error_code, topics}. A member of a consumer-protocol group (v9+ names
        it) must fetch in its current epoch (`GroupView.check_offset_fetch`)."""
        if not allows(self._access, context, AclOperation.DESCRIBE, ResourceType.GROUP, group):
            return _group_error(group, ErrorCode.group_authorization_failed)
        if not group:
            return _group_error(group, group_error_code(GroupError.INVALID_GROUP_ID))
        if member_id is not None or member_epoch >= 0:
            try:
                verdict = await self._groups.check_offset_fetch(group, member_id, member_epoch)
            except RaybrokerError as exc:
                return _group_error(group, coordinator_error_code(exc))
            if verdict != GroupError.NONE:
                return _group_error(group, group_error_code(verdict))
        try:
            if topics is None:
                found = await self._fetch_all(group, context, stable, by_id)
            else:
                found = await self._fetch_named(group, topics, context, stable, by_id)
        except RaybrokerError as exc:
            return _group_error(group, coordinator_error_code(exc))
        return {"group_id": group, "error_code": ErrorCode.none, "topics": found}

    async def _fetch_named(
        self, group: str, topics: Sequence[Any], context: ConnectionContext, stable: bool, by_id: bool
    ) -> list[dict[str, Any]]:
        """The named topics' answers: those the coordinator answers, in the request's order, then those refused."""
        names = await _names(self._view, topics, by_id)
        visible = authorized_names(
            self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, (n for n in names if n is not None)
        )
        asked = [(topic, name) for topic, name in zip(topics, names, strict=True) if name in visible]
        wanted = [(name, partition) for topic, name in asked for partition in topic.partition_indexes]
        # Pending offsets first: a transaction completing between the two reads then shows as unstable or as
        # committed, never as neither (its offsets read while pending, then found no longer pending).
        unstable = await self._groups.unstable_offsets(group, wanted) if stable else set()
        committed = await self._groups.committed_offsets(group, wanted)
        answered = [
            _fetch_answer(
                topic,
                name,
                [
                    _offset(name, partition, committed.get((name, partition)), unstable)
                    for partition in topic.partition_indexes
                ],
            )
            for topic, name in asked
        ]
        refused = [
            _fetch_answer(
                topic,
                name or "",
                [
                    _refused_offset(
                        partition,
                        ErrorCode.unknown_topic_id if name is None else ErrorCode.topic_authorization_failed,
                    )
                    for partition in topic.partition_indexes
                ],
            )
            for topic, name in zip(topics, names, strict=True)
            if name not in visible
        ]
        return answered + refused

    async def _fetch_all(
        self, group: str, context: ConnectionContext, stable: bool, by_id: bool
    ) -> list[dict[str, Any]]:
        """Every committed offset of the group on a topic the principal may describe, by topic name then partition;
        from v10 by topic id, leaving out a topic no id names."""
        unstable = await self._groups.unstable_offsets(group, None) if stable else set()
        committed = await self._groups.committed_offsets(group, None)
        visible = authorized_names(
            self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, (topic for topic, _ in committed)
        )
        ids = await self._topic_ids(visible) if by_id else {}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), found in sorted(committed.items(), key=lambda item: item[0]):
            if topic in visible and (topic in ids or not by_id):
                by_topic.setdefault(topic, []).append(_offset(topic, partition, found, unstable))
        return [
            {"name": name, "topic_id": wire_topic_id(ids.get(name, ZERO_UUID)), "partitions": partitions}
            for name, partitions in by_topic.items()
        ]

    async def _topic_ids(self, names: Collection[str]) -> dict[str, uuid.UUID]:
        """The topic id of each of `names` a topic has, asked afresh when one has none (a topic created a moment
        ago, or one deleted)."""
        known = {name: topic_id for topic_id, name in (await self._view.topic_names()).items()}
        if any(name not in known for name in names):
            known = {name: topic_id for topic_id, name in (await self._view.topic_names(refresh=True)).items()}
        return known


async def _names(view: BrokerView, topics: Sequence[Any], by_id: bool) -> list[str | None]:
    """Each request topic's name: its own before v10; from v10 its topic id's, None for an id no topic has."""
    if not by_id:
        return [topic.name for topic in topics]
    ids = [topic.topic_id or ZERO_UUID for topic in topics]
    names = await view.topic_names_naming(ids)
    return [names.get(topic_id) for topic_id in ids]


def _key(topic: Any, by_id: bool) -> TopicKey:
    key: TopicKey = (topic.topic_id or ZERO_UUID) if by_id else topic.name
    return key


def _refuse(
    refused: dict[TopicKey, dict[str, Any]], topic: Any, by_id: bool, codes: list[tuple[int, ErrorCode]]
) -> None:
    """Adds `codes` to the refused partitions' answer of `topic`'s key (Kafka's builder keys a topic by its id
    from v10, by its name before)."""
    key = _key(topic, by_id)
    if key in refused:
        refused[key]["partitions"].extend(_commit_answer(topic, codes)["partitions"])
    else:
        refused[key] = _commit_answer(topic, codes)


def _commit_answer(topic: Any, codes: list[tuple[int, ErrorCode]]) -> dict[str, Any]:
    """An OffsetCommit answer's topic, named as the request named it (by name, or by topic id from v10)."""
    return {
        "name": getattr(topic, "name", ""),
        "topic_id": getattr(topic, "topic_id", None),
        "partitions": [{"partition_index": partition, "error_code": code} for partition, code in codes],
    }


def _fetch_answer(topic: Any, name: str, partitions: list[dict[str, Any]]) -> dict[str, Any]:
    """An OffsetFetch answer's topic, named as the request named it (by name, or by topic id from v10)."""
    return {"name": name, "topic_id": getattr(topic, "topic_id", None), "partitions": partitions}


def metadata_too_large(metadata: str) -> bool:
    """Whether a commit's metadata is over `offset.metadata.max.bytes`, measured as Kafka measures it: Java's
    `String.length()`, in UTF-16 code units (a character outside the BMP counts 2, and "é" 1 though UTF-8 takes 2
    bytes for it)."""
    return len(metadata.encode("utf-16-le")) // 2 > OFFSET_METADATA_MAX_BYTES


def _offset(
    topic: str, partition: int, committed: OffsetAndMetadata | None, unstable: Collection[TopicPartition]
) -> dict[str, Any]:
    """A partition's commit as OffsetFetch answers it: its offset, leader epoch and metadata; offset -1, epoch -1
    and no metadata if none, or with UNSTABLE_OFFSET_COMMIT if the group's transactional offsets of it are
    pending."""
    if (topic, partition) in unstable:
        return _refused_offset(partition, ErrorCode.unstable_offset_commit)
    if committed is None:
        return _refused_offset(partition, ErrorCode.none)
    return {
        "partition_index": partition,
        "committed_offset": committed.offset,
        "committed_leader_epoch": committed.leader_epoch,
        "metadata": committed.metadata,
        "error_code": ErrorCode.none,
    }


def _refused_offset(partition: int, code: ErrorCode) -> dict[str, Any]:
    """A partition answered with no commit: offset -1, epoch -1, metadata "" and `code`."""
    return {
        "partition_index": partition,
        "committed_offset": NO_OFFSET,
        "committed_leader_epoch": NO_LEADER_EPOCH,
        "metadata": "",
        "error_code": code,
    }


def _group_error(group: str, code: ErrorCode) -> dict[str, Any]:
    return {"group_id": group, "error_code": code, "topics": []}

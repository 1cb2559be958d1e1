"""OffsetDelete (47): deletes some of a group's committed offsets, what `kafka-consumer-groups.sh --delete-offsets`
and the Admin client's `deleteConsumerGroupOffsets` send.

The group coordinator decides (`GroupCoordinator.delete_offsets`, Kafka's classic coordinator's rules): an Empty
group, or one known only by its committed offsets, loses the offsets of every partition named; in a group of
protocol type "consumer" with members, the partitions of the topics its members subscribe to answer
GROUP_SUBSCRIBED_TO_TOPIC (86) and the others are deleted; another group with members answers NON_EMPTY_GROUP (68)
and a group never seen GROUP_ID_NOT_FOUND (69). A partition with no committed offset answers no error.

Authorization and checks, as Kafka's `KafkaApis`: DELETE on the group, else the request answers
GROUP_AUTHORIZATION_FAILED (30); READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29); a
topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (3) per partition. A group-level error answers no
topic.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.error_codes import coordinator_error_code, error_code, group_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView, TopicPartition
from storage.errors import RaybrokerError

OFFSET_DELETE_KEY = 47


class OffsetDeleteHandler(GuardedHandler[BrokerView]):
    """Answers OffsetDelete (see the module docstring)."""

    def __init__(self, view: BrokerView, groups: GroupView, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._groups = groups

    async def __call__(self, request: Request) -> Any:
        body = request.body
        if not allows(self._access, request.context, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
            return self._response(request, ErrorCode.group_authorization_failed, {})
        codes: dict[TopicPartition, ErrorCode] = {}
        readable = authorized_names(
            self._access, request.context, AclOperation.READ, ResourceType.TOPIC, (topic.name for topic in body.topics)
        )
        try:
            existing = set(await self._view.topics())
        except RaybrokerError as exc:
            existing, missing = set(), error_code(exc)
        else:
            missing = ErrorCode.unknown_topic_or_partition
        wanted: list[TopicPartition] = []
        for topic in body.topics:
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                if topic.name not in readable:
                    codes[key] = ErrorCode.topic_authorization_failed
                elif topic.name not in existing:
                    codes[key] = missing
                else:
                    wanted.append(key)
        try:
            verdict, answers = await self._groups.delete_offsets(body.group_id, wanted)
        except RaybrokerError as exc:
            return self._response(request, coordinator_error_code(exc), {})
        group_code = group_error_code(verdict)
        if group_code != ErrorCode.none:
            return self._response(request, group_code, {})
        codes.update({key: group_error_code(answer) for key, answer in answers.items()})
        return self._response(request, ErrorCode.none, codes)

    @staticmethod
    def _response(request: Request, code: ErrorCode, codes: dict[TopicPartition, ErrorCode]) -> Any:
        """The response: the group's `code`, and the request's topics and partitions with their `codes` (none
        after a group-level error)."""
        topics = [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": codes[(topic.name, p.partition_index)]}
                    for p in topic.partitions
                ],
            }
            for topic in (request.body.topics if codes else ())
        ]
        return build(
            response_schema(OFFSET_DELETE_KEY, request.api_version),
            {"error_code": code, "throttle_time": 0, "topics": topics},
        )

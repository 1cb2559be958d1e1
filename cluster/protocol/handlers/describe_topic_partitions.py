"""DescribeTopicPartitions (75): topics and their partitions a page at a time, what Kafka 3.7+'s Admin client
sends for `describeTopics` (`kafka-topics.sh --describe`) when the broker serves it, in place of Metadata.

As Kafka's `DescribeTopicPartitionsRequestHandler` and `KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse`:
- An empty topic list asks for every topic the principal may DESCRIBE; a named topic it may not DESCRIBE answers
  TOPIC_AUTHORIZATION_FAILED (29) with the zero topic id, whether it exists or not; a named topic that does not
  exist answers UNKNOWN_TOPIC_OR_PARTITION (3), or INVALID_TOPIC_EXCEPTION (17) for an invalid name.
- Topics are answered in name order from the cursor's topic (topics before it left out), the cursor's topic from
  the cursor's partition; a cursor naming a topic the request's list does not hold answers INVALID_REQUEST (42) for
  every topic named, as Kafka's error answer to the request does.
- At most `response_partition_limit` partitions are answered, and never more than the broker's
  `max.request.partition.size.limit` (2000): the first partition left out is the `next_cursor` (its topic and index,
  index 0 when a topic was not reached at all); a complete answer has none.
- Each partition as Metadata describes it (`metadata.partition_entry`: leader, leader epoch, replicas, ISR,
  offline replicas), with no error code even without a leader (leader -1), and empty eligible leader replicas
  (KIP-966's ELR is not kept). Each described topic carries its authorized operations.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_operations
from cluster.protocol.handlers.metadata import partition_entry, topic_error, wire_topic_id
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint, BrokerView, TopicInfo
from storage.config.broker_config import BrokerConfig
from storage.errors import InvalidTopicError, UnknownTopicOrPartitionError
from storage.file_names import validate_topic

DESCRIBE_TOPIC_PARTITIONS_KEY = 75


class DescribeTopicPartitionsHandler(GuardedHandler[BrokerView]):
    """Answers DescribeTopicPartitions (see the module docstring) as the listener of broker `endpoint`."""

    def __init__(
        self,
        view: BrokerView,
        endpoint: BrokerEndpoint,
        broker_config: BrokerConfig,
        access: AccessControl | None = None,
    ) -> None:
        super().__init__(view, access)
        self._endpoint = endpoint
        self._limit = broker_config.max_request_partition_size_limit

    async def __call__(self, request: Request) -> Any:
        body = request.body
        context = request.context
        cursor = body.cursor
        after = "" if cursor is None else cursor.topic_name
        every = not body.topics
        if every:
            known = await self._view.topics()
            names = sorted(name for name in known if name >= after)
        else:
            names = sorted({topic.name for topic in body.topics if topic.name >= after})
            if cursor is not None and cursor.topic_name not in names:
                refused = [topic_error(topic.name, ErrorCode.invalid_request) for topic in body.topics]
                return self._response(request, refused, None)
        allowed = [
            name for name in names if allows(self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        ]
        denied = (
            []
            if every
            else [topic_error(name, ErrorCode.topic_authorization_failed) for name in names if name not in allowed]
        )
        remaining = min(self._limit, body.response_partition_limit)
        topics: list[dict[str, Any]] = []
        next_cursor: dict[str, Any] | None = None
        for name in allowed:
            if remaining == 0:
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            try:
                topic = known[name] if every else await self._view.topic(name)
            except UnknownTopicOrPartitionError:
                if not every:
                    topics.append(topic_error(name, _missing_code(name)))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            upper = min(topic.partition_count, start + remaining)
            topics.append(self._describe(topic, range(start, upper), request))
            if upper < topic.partition_count:
                next_cursor = {"topic_name": name, "partition_index": upper}
                break
            remaining -= upper - start
        return self._response(request, topics + denied, next_cursor)

    def _describe(self, topic: TopicInfo, partitions: range, request: Request) -> dict[str, Any]:
        entries = []
        for partition in partitions:
            entry = partition_entry(self._endpoint.node_id, partition, topic.partition(partition))
            entries.append(
                {**entry, "error_code": ErrorCode.none, "eligible_leader_replicas": [], "last_known_elr": []}
            )
        return {
            "error_code": ErrorCode.none,
            "name": topic.name,
            "topic_id": wire_topic_id(topic.topic_id),
            "is_internal": topic.internal,
            "partitions": entries,
            "topic_authorized_operations": authorized_operations(
                self._access, request.context, ResourceType.TOPIC, topic.name
            ),
        }

    @staticmethod
    def _response(request: Request, topics: list[dict[str, Any]], next_cursor: dict[str, Any] | None) -> Any:
        return build(
            response_schema(DESCRIBE_TOPIC_PARTITIONS_KEY, request.api_version),
            {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor},
        )


def _missing_code(name: str) -> ErrorCode:
    try:
        validate_topic(name)
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition

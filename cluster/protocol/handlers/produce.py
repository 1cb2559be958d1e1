"""Produce (key 0): each partition's record batches go, byte for byte as the client sent them, to its log.

`acks` is 0 (no response at all: the router sends nothing back), 1 (answer after the leader's append) or -1
(answer once every in-sync replica has the records, within the request's `timeout_ms`: NOT_ENOUGH_REPLICAS when
fewer than `min.insync.replicas` are in sync before the append, REQUEST_TIMED_OUT or
NOT_ENOUGH_REPLICAS_AFTER_APPEND after it). Any other value
fails every partition with INVALID_REQUIRED_ACKS (21). Partitions are appended concurrently and fail one by one:
an unknown partition, a corrupt batch or a sequence gap answers that partition's error code and leaves the others
appended. A partition's answer carries the base offset the log assigned, the LogAppendTime it stamped (-1 for
CreateTime topics) and the log start offset.

Authorization: WRITE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29) without being
looked at, whether the topic exists or not, as Kafka's. Transactional batches are not served (InitProducerId
refuses a transactional id), so there is no transactional id to authorize.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.replication.replica import ACKS
from actors.core.security.acls import AclOperation, ResourceType
from cluster.protocol.broker_view import BrokerView
from cluster.protocol.errors import error_code
from cluster.protocol.framing import Request
from cluster.protocol.handlers.authorization import authorized_names
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from storage.errors import RaybrokerError
from storage.records.layout import NO_TIMESTAMP

PRODUCE_KEY = 0
NO_OFFSET = -1


class ProduceHandler:
    """Answers Produce (see the module docstring); returns None for `acks=0`."""

    def __init__(self, view: BrokerView, access: AccessControl | None = None) -> None:
        self._view = view
        self._access = access

    async def __call__(self, request: Request) -> Any | None:
        body = request.body
        wanted = [(topic.name, data.index, data.records) for topic in body.topic_data for data in topic.partition_data]
        allowed = authorized_names(
            self._access, request.context, AclOperation.WRITE, ResourceType.TOPIC, (topic for topic, _, _ in wanted)
        )
        writable = [index for index, (topic, _, _) in enumerate(wanted) if topic in allowed]
        answers = [_failed(ErrorCode.topic_authorization_failed)] * len(wanted)
        if body.acks not in ACKS:
            appended = [_failed(ErrorCode.invalid_required_acks) for _ in writable]
        else:
            timeout_ms = int(body.timeout.total_seconds() * 1000)
            appended = list(
                await asyncio.gather(*(self._append(*wanted[index], body.acks, timeout_ms) for index in writable))
            )
        for index, answer in zip(writable, appended, strict=True):
            answers[index] = answer
        if body.acks == 0:
            return None
        responses: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition, _), answer in zip(wanted, answers, strict=True):
            responses.setdefault(topic, []).append({"index": partition, **answer})
        return build(
            load_response_schema(PRODUCE_KEY, request.api_version),
            {
                "responses": [{"name": name, "partition_responses": parts} for name, parts in responses.items()],
                "throttle_time": 0,
            },
        )

    async def _append(
        self, topic: str, partition: int, records: bytes | None, acks: int, timeout_ms: int
    ) -> dict[str, Any]:
        if not records:
            return _failed(ErrorCode.invalid_record, "a produce request must carry record batches")
        try:
            info = await self._view.append(topic, partition, bytes(records), acks, timeout_ms)
        except RaybrokerError as exc:
            return _failed(error_code(exc), exc.message)
        return {
            "error_code": ErrorCode.none,
            "base_offset": info.first_offset,
            "log_append_time": info.log_append_time,
            "log_start_offset": info.log_start_offset,
            "record_errors": [],
        }


def _failed(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "base_offset": NO_OFFSET,
        "log_append_time": NO_TIMESTAMP,
        "log_start_offset": NO_OFFSET,
        "record_errors": [],
        "error_message": message,
    }

"""Fetch (key 1): record batches from each requested partition, exactly as they are stored.

Limits, as Kafka applies them: each partition returns at most its `partition_max_bytes`, and the response at most
`max_bytes`, except that the first partition with data returns at least one whole batch even when that batch is
larger (else a consumer could never get past it). A partition whose data would push the response past
`max_bytes` answers no records this time, with its offsets, and the client asks again.

Long poll (`max_wait_ms`, `min_bytes`): a request for one partition passes both to its actor, which answers once
`min_bytes` are there or the time is up. For more partitions, when they together hold fewer than `min_bytes` new
bytes, every partition that had none waits (in its own actor, for at most the remaining time) for an append; the
first one that gets data wakes the request, which answers once `min_bytes` are there or the time is up.
Partitions are read concurrently, each with its own error: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE (the
client then resets its position with ListOffsets), and so on; the others still answer.

Offsets: records are served up to the leader's high watermark (every in-sync replica has them; with one replica
it is the log end). Isolation (`isolation_level`, Fetch v4+): a READ_COMMITTED (1) fetch is served only up to the
last stable offset (the first offset of the oldest transaction still open, or whose marker the high watermark has
not passed), and its answer lists the aborted transactions (producer id, first offset) overlapping the records
returned, for the consumer to drop their records (possibly an empty list); a READ_UNCOMMITTED (0) answer's list is
null. Every v4+ answer carries the real last stable offset, at both levels, as Kafka's. The long poll of a
read_committed fetch waits for bytes below the last stable offset, so a transaction's records wake it when its
marker lands. `preferred_read_replica` is -1 (Fetch v11+; any other value sends a client looking for a replica).
Fetch sessions (v7+, KIP-227) are not kept: every answer has session id 0, which tells the client to send full fetch
requests; a request naming a session id answers FETCH_SESSION_ID_NOT_FOUND (70), after which clients start over without
one.

Authorization: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29) without being read
(and without waiting for them), whether the topic exists or not, as Kafka's consumer fetch.

Metrics: the record bytes each answer carries, per topic (Kafka's BytesOutPerSec), once the response limit is
applied, so that a partition left out this time is counted when it is sent.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.security.acls import AclOperation, ResourceType
from actors.metrics.recorder import NO_METRICS, BrokerMetrics
from cluster.protocol.broker_view import BrokerView, FetchedRecords
from cluster.protocol.errors import TopicAuthorizationFailedError, error_code
from cluster.protocol.file_region import FileRegion
from cluster.protocol.framing import Request
from cluster.protocol.handlers.authorization import authorized_names
from cluster.protocol.messages import build, milliseconds
from cluster.protocol.security.access import AccessControl
from storage.errors import RaybrokerError

FETCH_KEY = 1
NO_SESSION = 0
NO_PREFERRED_READ_REPLICA = -1
UNKNOWN_OFFSET = -1
# Fetch's `isolation_level` (Kafka's IsolationLevel), and the log read each one is.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_LOG_ISOLATION = {READ_UNCOMMITTED: "high_watermark", READ_COMMITTED: "txn_committed"}


@dataclass(frozen=True, slots=True)
class _PartitionFetch:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    isolation: str


_Answer = FetchedRecords | RaybrokerError


class FetchHandler:
    """Answers Fetch (see the module docstring)."""

    def __init__(
        self, view: BrokerView, access: AccessControl | None = None, metrics: BrokerMetrics = NO_METRICS
    ) -> None:
        self._view = view
        self._access = access
        self._metrics = metrics

    async def __call__(self, request: Request) -> Any:
        body = request.body
        response_type = load_response_schema(FETCH_KEY, request.api_version)
        if getattr(body, "session_id", NO_SESSION) != NO_SESSION:
            return build(
                response_type,
                {
                    "throttle_time": 0,
                    "error_code": ErrorCode.fetch_session_id_not_found,
                    "session_id": NO_SESSION,
                    "responses": [],
                },
            )
        # Requests before v4 have no isolation level: they read everything below the high watermark.
        isolation = _LOG_ISOLATION.get(getattr(body, "isolation_level", READ_UNCOMMITTED), "high_watermark")
        wanted = [
            _PartitionFetch(topic.topic, part.partition, part.fetch_offset, part.partition_max_bytes, isolation)
            for topic in body.topics
            for part in topic.partitions
        ]
        allowed = authorized_names(
            self._access, request.context, AclOperation.READ, ResourceType.TOPIC, (fetch.topic for fetch in wanted)
        )
        read = iter(
            await self._read(
                [fetch for fetch in wanted if fetch.topic in allowed], milliseconds(body.max_wait), body.min_bytes
            )
        )
        answers = _within_response_limit(
            [next(read) if fetch.topic in allowed else _denied(fetch.topic) for fetch in wanted], body.max_bytes
        )
        responses: dict[str, list[dict[str, Any]]] = {}
        for fetch, answer in zip(wanted, answers, strict=True):
            responses.setdefault(fetch.topic, []).append(_partition_answer(fetch.partition, answer))
            if isinstance(answer, FetchedRecords) and answer.records:
                self._metrics.fetched(fetch.topic, len(answer.records))
        return build(
            response_type,
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "session_id": NO_SESSION,
                "responses": [{"topic": topic, "partitions": parts} for topic, parts in responses.items()],
            },
        )

    async def _read(self, wanted: list[_PartitionFetch], max_wait_ms: int, min_bytes: int) -> list[_Answer]:
        """Every partition's answer, after the long poll described in the module docstring."""
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        if len(wanted) == 1:
            # One partition waits in its actor for `min_bytes` itself: one call, not a look and then a wait.
            return [await self._fetch(wanted[0], max(max_wait_ms, 0), max(min_bytes, 1))]
        answers = list(await asyncio.gather(*(self._fetch(fetch, 0) for fetch in wanted)))
        while _size(answers) < min_bytes:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            idle = [
                index
                for index, answer in enumerate(answers)
                if isinstance(answer, FetchedRecords) and not answer.records
            ]
            if remaining_ms <= 0 or not idle:
                break
            waits = {asyncio.ensure_future(self._fetch(wanted[index], remaining_ms)): index for index in idle}
            try:
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                # The waits still running are abandoned (also when the connection closes meanwhile).
                for task in waits:
                    task.cancel()
            woken = False
            for task in done:
                answer = task.result()
                answers[waits[task]] = answer
                woken = woken or not isinstance(answer, FetchedRecords) or bool(answer.records)
            if not woken:
                break
        return answers

    async def _fetch(self, fetch: _PartitionFetch, max_wait_ms: int, min_bytes: int = 1) -> _Answer:
        try:
            return await self._view.fetch(
                fetch.topic, fetch.partition, fetch.offset, fetch.max_bytes, max_wait_ms, min_bytes, fetch.isolation
            )
        except RaybrokerError as exc:
            return exc


def _denied(topic: str) -> TopicAuthorizationFailedError:
    return TopicAuthorizationFailedError(f"not authorized to READ topic {topic!r}")


def _size(answers: list[_Answer]) -> int:
    return sum(len(answer.records) for answer in answers if isinstance(answer, FetchedRecords))


def _within_response_limit(answers: list[_Answer], max_bytes: int) -> list[_Answer]:
    """`answers` with the records of every partition that would take the response past `max_bytes` left out,
    except the first partition with records (see the module docstring)."""
    kept: list[_Answer] = []
    total = 0
    for answer in answers:
        if isinstance(answer, FetchedRecords) and answer.records:
            if total and total + len(answer.records) > max_bytes:
                if isinstance(answer.records, FileRegion):
                    answer.records.close()
                answer = replace(answer, records=b"")
            total += len(answer.records)
        kept.append(answer)
    return kept


def _partition_answer(partition: int, answer: _Answer) -> dict[str, Any]:
    if isinstance(answer, RaybrokerError):
        return {
            "partition_index": partition,
            "error_code": error_code(answer),
            "high_watermark": UNKNOWN_OFFSET,
            "last_stable_offset": UNKNOWN_OFFSET,
            "log_start_offset": UNKNOWN_OFFSET,
            "aborted_transactions": [],
            "preferred_read_replica": NO_PREFERRED_READ_REPLICA,
            "records": b"",
        }
    return {
        "partition_index": partition,
        "error_code": ErrorCode.none,
        "high_watermark": answer.high_watermark,
        "last_stable_offset": answer.last_stable_offset,
        "log_start_offset": answer.log_start_offset,
        "aborted_transactions": _aborted(answer),
        "preferred_read_replica": NO_PREFERRED_READ_REPLICA,
        "records": answer.records,
    }


def _aborted(answer: FetchedRecords) -> list[dict[str, int]] | None:
    """The answer's aborted transactions as Fetch lists them; null for a read_uncommitted fetch."""
    if answer.aborted_transactions is None:
        return None
    return [{"producer_id": txn.producer_id, "first_offset": txn.first_offset} for txn in answer.aborted_transactions]

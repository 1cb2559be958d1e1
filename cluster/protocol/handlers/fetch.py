"""Fetch (key 1): record batches from each requested partition, exactly as they are stored.

Limits, as Kafka applies them: each partition returns at most its `partition_max_bytes`, and the response at most
`max_bytes`, except that the first partition with data returns at least one whole batch even when that batch is
larger (else a consumer could never get past it). A partition whose data would push the response past
`max_bytes` answers no records this time, with its offsets, and the client asks again.

Long poll (`max_wait_ms`, `min_bytes`): a request for one partition passes both to the broker view, which answers
once `min_bytes` are there or the time is up (waiting in the partition's actor, or for a partition on the listener's
node on its change notices: `cluster.protocol.views.ray_broker_view`). For more partitions, when they together hold
fewer than `min_bytes` new bytes, every partition that had none waits (for at most the remaining time) for an append;
the first one that gets data wakes the request, which answers once `min_bytes` are there or the time is up.
Partitions are read concurrently, each with its own error: UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE (the
client then resets its position with ListOffsets), and so on; the others still answer.

Leader epochs (`current_leader_epoch`, Fetch v9+, KIP-320): the epoch of the leader the client's metadata names is
checked first against the partition leader's (`actors.core.replication.replica.check_current_leader_epoch`), as
Kafka's `Partition.localLogWithEpochOrThrow`: older answers FENCED_LEADER_EPOCH (74), newer UNKNOWN_LEADER_EPOCH
(75), both without records, and the client refreshes its metadata; -1 (any negative epoch, as Kafka's
`FetchRequest` reads it) is not checked. A fetch waiting for bytes checks it again each time it looks, so a leader
change ends the wait. The Ray view compares it with the epoch its partition's process publishes when it answers from
its local view of the log, and passes it to the partition's actor when it calls it anyway
(`cluster.protocol.views.ray_broker_view`).

Offsets: records are served up to the leader's high watermark (every in-sync replica has them; with one replica
it is the log end). Isolation (`isolation_level`, Fetch v4+): a READ_COMMITTED (1) fetch is served only up to the
last stable offset (the first offset of the oldest transaction still open, or whose marker the high watermark has
not passed), and its answer lists the aborted transactions (producer id, first offset) overlapping the records
returned, for the consumer to drop their records (possibly an empty list); a READ_UNCOMMITTED (0) answer's list is
null. Every v4+ answer carries the real last stable offset, at both levels, as Kafka's. The long poll of a
read_committed fetch waits for bytes below the last stable offset, so a transaction's records wake it when its
marker lands. `preferred_read_replica` is -1 (Fetch v11+; any other value sends a client looking for a replica).

Fetch sessions (v7+, KIP-227): a client that asks for one gets a session id, then lists only the partitions whose
position changed, and hears only of the partitions with something new (`cluster.protocol.fetch_session`, which also
says how session errors are answered and sessions evicted). The response limit is applied to every partition of the
session, before the unchanged ones are left out; a partition left out by the limit with moved offsets is still sent,
without records.

Topic ids (KIP-516, v13+): topics are named by id in requests and answers; an id the broker does not know answers
UNKNOWN_TOPIC_ID (100) for each of its partitions. Ids are resolved through the view's recent copy of the
controller's ids (`BrokerView.topic_names`), asked afresh when a request names one it does not have. v14 (tiered
storage's OFFSET_MOVED_TO_TIERED_STORAGE, never answered without tiered storage), v15 (the follower's replica state),
v16 (the current leader's endpoints, sent with NOT_LEADER_OR_FOLLOWER; none here: every listener serves every
partition) and v17 (the follower's log dir id) add nothing a consumer's fetch needs here.

Authorization: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29) without being read
(and without waiting for them), whether the topic exists or not, as Kafka's consumer fetch. A partition of an unknown
topic id answers UNKNOWN_TOPIC_ID before authorization (there is no name to authorize).

Client quotas (`consumer_byte_rate`, `cluster.protocol.quota_enforcer`): a consumer's fetch (not a replica's) whose
record bytes take its budget over the quota is answered with no partition, its session as it was, and its
`throttle_time_ms`, as Kafka's `getThrottledResponse`; the client fetches the same offsets again once unmuted.

Metrics: the record bytes each answer carries, per topic (Kafka's BytesOutPerSec), once the response limit is
applied, so that a partition left out this time is counted when it is sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.metrics.names import FETCH_SESSION_PARTITIONS, FETCH_SESSIONS
from actors.metrics.recorder import NO_METRICS, BrokerMetrics, Sample
from cluster.protocol.error_codes import TopicAuthorizationFailedError, error_code
from cluster.protocol.fetch_session import (
    DEFAULT_CACHE_SLOTS,
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    TOPIC_ID_VERSION,
    FetchSessionCache,
    PartitionKey,
    PartitionOutcome,
    PartitionRequest,
    forgotten_key,
)
from cluster.protocol.file_region import FileRegion
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, authorized_names
from cluster.protocol.handlers.metadata import wire_topic_id
from cluster.protocol.messages import build, milliseconds
from cluster.protocol.quota_enforcer import QuotaEnforcer
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView, FetchedRecords
from storage.clock import SYSTEM_CLOCK
from storage.errors import RaybrokerError, UnknownTopicIdError
from storage.kafka_uuid import ZERO_UUID, uuid_text
from storage.partition.leader_epoch_cache import UNDEFINED_EPOCH

FETCH_KEY = 1
NO_PREFERRED_READ_REPLICA = -1
UNKNOWN_OFFSET = -1
CONSUMER_REPLICA_ID = -1
# Fetch's `isolation_level` (Kafka's IsolationLevel), and the log read each one is.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_LOG_ISOLATION = {READ_UNCOMMITTED: "high_watermark", READ_COMMITTED: "txn_committed"}

_Answer = FetchedRecords | RaybrokerError


class FetchHandler(GuardedHandler[BrokerView]):
    """Answers Fetch (see the module docstring), keeping the fetch sessions of `sessions` (by default a cache of
    Kafka's default size on the system clock)."""

    def __init__(
        self,
        view: BrokerView,
        access: AccessControl | None = None,
        metrics: BrokerMetrics = NO_METRICS,
        sessions: FetchSessionCache | None = None,
        quotas: QuotaEnforcer | None = None,
    ) -> None:
        super().__init__(view, access)
        self._metrics = metrics
        self._quotas = quotas
        self.sessions = sessions if sessions is not None else FetchSessionCache(DEFAULT_CACHE_SLOTS, SYSTEM_CLOCK)
        metrics.add_gauges(self._session_gauges)

    def close(self) -> None:
        """Stops reporting the sessions' gauges (the listener stops)."""
        self._metrics.remove_gauges(self._session_gauges)

    def _session_gauges(self) -> list[Sample]:
        """Kafka's FetchSessionCache gauges. Read from the metrics exporter's thread: the counts may be a moment
        old, never wrong by more than the request being answered."""
        sessions = self.sessions
        return [(FETCH_SESSIONS, (), len(sessions)), (FETCH_SESSION_PARTITIONS, (), sessions.total_partitions)]

    async def __call__(self, request: Request) -> Any:
        body = request.body
        version = request.api_version
        response_type = response_schema(FETCH_KEY, version)
        uses_topic_ids = version >= TOPIC_ID_VERSION
        topic_names = (
            await self._view.topic_names_naming({topic.topic_id or ZERO_UUID for topic in body.topics})
            if uses_topic_ids
            else {}
        )
        context = self.sessions.new_context(
            version,
            getattr(body, "session_id", INVALID_SESSION_ID),
            getattr(body, "session_epoch", FINAL_EPOCH),
            _requested(body, uses_topic_ids, topic_names),
            _forgotten(body, uses_topic_ids),
            topic_names,
            privileged=_replica_id(body) >= 0,
        )
        wanted = context.partitions
        # Requests before v4 have no isolation level: they read everything below the high watermark.
        isolation = _LOG_ISOLATION.get(getattr(body, "isolation_level", READ_UNCOMMITTED), "high_watermark")
        allowed = authorized_names(
            self._access,
            request.context,
            AclOperation.READ,
            ResourceType.TOPIC,
            (fetch.topic for fetch in wanted if fetch.topic is not None),
        )
        readable = [fetch for fetch in wanted if fetch.topic in allowed]
        read = iter(await self._read(readable, isolation, milliseconds(body.max_wait), body.min_bytes))
        answers = _within_response_limit([_answer(fetch, allowed, read) for fetch in wanted], body.max_bytes)
        throttle_ms = self._throttle_ms(request, answers)
        decided = context.throttled() if throttle_ms else context.answer([_outcome(answer) for answer in answers])
        included = set(decided.included)
        responses: list[dict[str, Any]] = []
        for index in decided.included:
            fetch, answer = wanted[index], answers[index]
            topic_key = fetch.topic_id if uses_topic_ids else fetch.topic
            if not responses or responses[-1]["key"] != topic_key:
                responses.append(
                    {
                        "key": topic_key,
                        "topic": fetch.topic,
                        "topic_id": wire_topic_id(fetch.topic_id),
                        "partitions": [],
                    }
                )
            responses[-1]["partitions"].append(_partition_answer(fetch.partition, answer))
            if isinstance(answer, FetchedRecords) and answer.records and fetch.topic is not None:
                self._metrics.fetched(fetch.topic, len(answer.records))
        for index, answer in enumerate(answers):
            if index not in included and isinstance(answer, FetchedRecords) and isinstance(answer.records, FileRegion):
                answer.records.close()
        return build(
            response_type,
            {
                "throttle_time": throttle_ms,
                "error_code": decided.error.value,
                "session_id": decided.session_id,
                "responses": responses,
            },
        )

    def _throttle_ms(self, request: Request, answers: Sequence[_Answer]) -> int:
        """The throttle time a consumer's client quota gives this answer's record bytes (0 for a replica's fetch, or
        without quotas); a throttled answer carries no partition (see the module docstring)."""
        if self._quotas is None or _replica_id(request.body) >= 0:
            return 0
        size = sum(len(answer.records) for answer in answers if isinstance(answer, FetchedRecords) and answer.records)
        return self._quotas.fetched(request.context, request.client_id, size)

    async def _read(
        self, wanted: Sequence[PartitionRequest], isolation: str, max_wait_ms: int, min_bytes: int
    ) -> list[_Answer]:
        """Every partition's answer, after the long poll described in the module docstring."""
        deadline = time.monotonic() + max(max_wait_ms, 0) / 1000
        if len(wanted) == 1:
            # One partition waits in its actor for `min_bytes` itself: one call, not a look and then a wait.
            return [await self._fetch(wanted[0], isolation, max(max_wait_ms, 0), max(min_bytes, 1))]
        answers = list(await asyncio.gather(*(self._fetch(fetch, isolation, 0) for fetch in wanted)))
        while _size(answers) < min_bytes:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            idle = [
                index
                for index, answer in enumerate(answers)
                if isinstance(answer, FetchedRecords) and not answer.records
            ]
            if remaining_ms <= 0 or not idle:
                break
            waits = {
                asyncio.ensure_future(self._fetch(wanted[index], isolation, remaining_ms)): index for index in idle
            }
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

    async def _fetch(self, fetch: PartitionRequest, isolation: str, max_wait_ms: int, min_bytes: int = 1) -> _Answer:
        assert fetch.topic is not None, "only partitions of known topics are read"
        try:
            return await self._view.fetch(
                fetch.topic,
                fetch.partition,
                fetch.fetch_offset,
                fetch.max_bytes,
                max_wait_ms,
                min_bytes,
                isolation,
                fetch.current_leader_epoch,
            )
        except RaybrokerError as exc:
            return exc


def _requested(body: Any, uses_topic_ids: bool, topic_names: Mapping[uuid.UUID, str]) -> list[PartitionRequest]:
    """The request's partitions, each with the leader epoch its client knows (v9+; -1, not checked, before and for
    any negative epoch, as Kafka's `FetchRequest` reads it); from v13 each topic id resolved to its name (None when
    unknown)."""
    requested = []
    for topic in body.topics:
        topic_id = (topic.topic_id or ZERO_UUID) if uses_topic_ids else ZERO_UUID
        name = topic_names.get(topic_id) if uses_topic_ids else topic.topic
        for part in topic.partitions:
            requested.append(
                PartitionRequest(
                    topic_id,
                    name,
                    part.partition,
                    part.fetch_offset,
                    part.partition_max_bytes,
                    max(getattr(part, "current_leader_epoch", UNDEFINED_EPOCH), UNDEFINED_EPOCH),
                )
            )
    return requested


def _forgotten(body: Any, uses_topic_ids: bool) -> list[PartitionKey]:
    """The session keys of the partitions an incremental request drops (v7+)."""
    return [
        forgotten_key(getattr(topic, "topic_id", None) or ZERO_UUID, getattr(topic, "topic", None), p, uses_topic_ids)
        for topic in getattr(body, "forgotten_topics_data", ())
        for p in topic.partitions
    ]


def _replica_id(body: Any) -> int:
    """The fetching replica's broker id (-1 for a consumer): a field of its own before v15, in `replica_state` from."""
    state = getattr(body, "replica_state", None)
    return int(state.replica_id if state is not None else getattr(body, "replica_id", CONSUMER_REPLICA_ID))


def _answer(fetch: PartitionRequest, allowed: set[str], read: Any) -> _Answer:
    if fetch.topic is None:
        return UnknownTopicIdError(f"unknown topic id {uuid_text(fetch.topic_id)}")
    return next(read) if fetch.topic in allowed else _denied(fetch.topic)


def _outcome(answer: _Answer) -> PartitionOutcome:
    if isinstance(answer, RaybrokerError):
        return PartitionOutcome(UNKNOWN_OFFSET, UNKNOWN_OFFSET, 0, True)
    return PartitionOutcome(answer.high_watermark, answer.log_start_offset, len(answer.records), False)


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

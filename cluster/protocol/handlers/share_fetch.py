"""Share groups' record APIs (KIP-932) as Kafka 4.2 serves them: ShareFetch (78) v1-2 and ShareAcknowledge (79)
v1-2, which Kafka 4.2's `KafkaShareConsumer` sends to each partition's leader.

Both answer UNSUPPORTED_VERSION, before any other check, while the cluster's `share.version` is below 1
(`share_version_gate`). Each request first passes its share session (`actors.core.shares.share_sessions`: epoch 0
opens, -1 closes, any other must be the session's); a session error (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, INVALID_REQUEST) is the answer's top-level error and nothing changes. Then:

- the acknowledgements it carries are applied per partition at the partition's leader
  (`BrokerView.share_acknowledge`, all or none per partition): a partition's outcome is its `acknowledge_error_code`
  in a ShareFetch, its `error_code` in a ShareAcknowledge (INVALID_RECORD_STATE for records the member does not
  hold, INVALID_REQUEST for malformed batches or unknown acknowledge types, Kafka's checks). In a session of one
  partition a ShareFetch that is not final sends them with the acquisition's call to the leader, which applies them
  first (records they release may be acquired by the same fetch, as on Kafka) and then acquires: one call where two
  cost more of a 2-core machine's CPU than the state write they let overlap (`docs/performance.md`). A session of
  several sends them in calls of their own while it acquires, as Kafka's `KafkaApis` writes their state meanwhile;
  either way the answer comes once both are done;
- a final request (epoch -1) then releases every record the member holds in its session's partitions and forgets the
  session;
- any other ShareFetch acquires records for the member from each partition of its session (`BrokerView.share_fetch`),
  `max_records` for the whole request (a soft limit: whole batches; a hard one in the record-limit acquire mode,
  ShareFetch v2's `ShareAcquireMode` 1, `SharePartition.acquire`) and `max_bytes` a partition. When nothing is
  acquired it waits up to `max_wait`, as Kafka's delayed share fetch waits: a session of one partition at the
  partition's leader, in the same call, which answers at once what it can acquire and otherwise as soon as an
  append, an acknowledgement or a release lets it acquire records (`PartitionServer.share_fetch`); a session of
  several looks again every `POLL_INTERVAL_S`.

Each request counts in Kafka's BrokerTopicMetrics share meters (`BrokerMetrics.share_requested`): a topic whose
records it acknowledged, and for a ShareFetch that is not final a topic of its session, once each, as failed too if a
partition of it answered an error.

The answer names each partition with records, an error or an acknowledgement outcome; the opening request's names
every partition of the session. `acquisition_lock_timeout` is the group's record lock duration.

A member id that is empty or longer than 36 characters is INVALID_REQUEST ("Invalid member id in the request."),
checked after the group's authorization, as Kafka's `KafkaApis` does.

Authorization, as Kafka's: READ on the group (else GROUP_AUTHORIZATION_FAILED, top level) and READ on each topic
(else TOPIC_AUTHORIZATION_FAILED for its partitions); an unknown topic id answers UNKNOWN_TOPIC_ID.

An acquire mode other than Kafka's two is INVALID_REQUEST at the top level, before the session moves (Kafka 4.2.2
answers UNKNOWN_SERVER_ERROR after the request took the session's next epoch). A v2 request whose `IsRenewAck` is set
may carry RENEW acknowledgements (KIP-1222: the records' locks renewed, `SharePartition.acknowledge`); such a
ShareFetch acquires nothing, and one whose fetch limits are not all 0 is INVALID_REQUEST at the top level, with
Kafka's message. RENEW in any other request is an unknown type (INVALID_REQUEST for the partition).
`current_leader` and `node_endpoints` are left empty (a single node leads every partition it answers for).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.shares.acknowledgements import AcknowledgementBatch
from actors.core.shares.group_share_config import ResolvedShareConfig
from actors.core.shares.share_partition import AcquiredRecords
from actors.core.shares.share_sessions import SessionContext, SharePartitionKey, ShareSessions
from actors.metrics.recorder import NO_METRICS, BrokerMetrics
from cluster.protocol.error_codes import coordinator_error_code, error_code, share_partition_error_code
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_names
from cluster.protocol.handlers.share_version_gate import ShareVersionGate
from cluster.protocol.messages import build, milliseconds
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView
from storage.errors import RaybrokerError

SHARE_FETCH_KEY = 78
SHARE_ACKNOWLEDGE_KEY = 79
# How often a ShareFetch that acquired nothing looks again while its `max_wait` lasts.
POLL_INTERVAL_S = 0.05
_NO_LEADER = {"leader_id": -1, "leader_epoch": -1}
# Kafka's `KafkaApis.isMemberIdValid`: a client-made member id (a UUID's 22 base64 characters) of at most 36.
MAX_MEMBER_ID_LENGTH = 36
INVALID_MEMBER_ID = "Invalid member id in the request."
# ShareFetch v2's `ShareAcquireMode` (KIP-1206): Kafka's `ShareAcquireMode` ids.
BATCH_OPTIMIZED_MODE, RECORD_LIMIT_MODE = 0, 1


def member_id_valid(member_id: str) -> bool:
    """Whether a share request's member id is one Kafka accepts: not empty, at most 36 characters."""
    return 0 < len(member_id) <= MAX_MEMBER_ID_LENGTH


@dataclass(slots=True)
class _Outcome:
    """One partition's part of an answer."""

    error: ErrorCode = ErrorCode.none
    acknowledge_error: ErrorCode | None = None
    acknowledge_message: str | None = None
    records: bytes = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)


class _Begun(NamedTuple):
    """A share request past its checks: its answer's builder, its member, its share session and its group's
    settings."""

    answer: _Answer
    group_id: str
    member_id: str
    context: SessionContext
    settings: ResolvedShareConfig


class _ShareHandler(GuardedHandler[BrokerView]):
    """What ShareFetch and ShareAcknowledge share: the sessions, the group's settings, the acknowledgements."""

    def __init__(
        self,
        view: BrokerView,
        groups: GroupView,
        sessions: ShareSessions,
        access: AccessControl | None = None,
        metrics: BrokerMetrics = NO_METRICS,
        features: FeatureCache | None = None,
    ) -> None:
        super().__init__(view, access)
        self._groups = groups
        self._sessions = sessions
        self._metrics = metrics
        self._gate = ShareVersionGate(features)

    def _count(
        self,
        acknowledging: bool,
        names: Mapping[uuid.UUID, str | ErrorCode],
        outcomes: Iterable[tuple[SharePartitionKey, ErrorCode]],
    ) -> None:
        """Kafka's BrokerTopicMetrics share meters: each named topic among `outcomes` once, as failed once if one of
        its partitions answered an error."""
        topics, failed = set(), set()
        for (topic_id, _), code in outcomes:
            topic = names.get(topic_id)
            if isinstance(topic, str):
                topics.add(topic)
                if code != ErrorCode.none:
                    failed.add(topic)
        if topics:
            self._metrics.share_requested(acknowledging, topics, failed)

    async def _begin(
        self, request: Request, api_key: int, session: Callable[[str, str], SessionContext]
    ) -> _Begun | Any:
        """The request past its checks, its share session found or opened by `session(group_id, member_id)`; else
        the answer refusing it, as Kafka checks: GROUP_AUTHORIZATION_FAILED without READ on the group,
        INVALID_REQUEST for a member id Kafka refuses, then the session's error, then the coordinator's."""
        answer = _Answer(response_schema(api_key, request.api_version))
        group_id, member_id = request.body.group_id or "", request.body.member_id or ""
        if not allows(self._access, request.context, AclOperation.READ, ResourceType.GROUP, group_id):
            return answer(ErrorCode.group_authorization_failed)
        if not member_id_valid(member_id):
            return answer(ErrorCode.invalid_request, INVALID_MEMBER_ID)
        try:
            context = session(group_id, member_id)
        except RaybrokerError as exc:
            return answer(error_code(exc), str(exc))
        try:
            settings = await self._groups.share_group_settings(group_id)
        except RaybrokerError as exc:
            return answer(coordinator_error_code(exc))
        return _Begun(answer, group_id, member_id, context, settings)

    async def _readable(self, request: Request, topic_ids: set[uuid.UUID]) -> dict[uuid.UUID, str | ErrorCode]:
        """Each topic id's name, or the error its partitions answer (unknown id, READ not allowed)."""
        names = await self._view.topic_names_naming(topic_ids)
        known = {topic_id: names[topic_id] for topic_id in topic_ids if topic_id in names}
        allowed = authorized_names(self._access, request.context, AclOperation.READ, ResourceType.TOPIC, known.values())
        return {
            topic_id: ErrorCode.unknown_topic_id
            if topic_id not in known
            else known[topic_id]
            if known[topic_id] in allowed
            else ErrorCode.topic_authorization_failed
            for topic_id in topic_ids
        }

    async def _acknowledge(
        self,
        group_id: str,
        member_id: str,
        settings: ResolvedShareConfig,
        topic: str,
        partition: int,
        batches: list[AcknowledgementBatch],
        renew: bool,
    ) -> tuple[ErrorCode, str | None]:
        try:
            await self._view.share_acknowledge(topic, partition, group_id, member_id, settings, batches, renew)
        except RaybrokerError as exc:
            return share_partition_error_code(exc), str(exc)
        return ErrorCode.none, None

    async def _close(self, group_id: str, member_id: str, names: Mapping[uuid.UUID, str | ErrorCode]) -> None:
        """Forgets the member's session and releases what it holds in its partitions."""
        await _release(self._view, group_id, member_id, self._sessions.close(group_id, member_id), names)


class ShareFetchHandler(_ShareHandler):
    """Answers ShareFetch (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        unserved = self._gate.refusal()
        if unserved is not None:
            return _Answer(response_schema(SHARE_FETCH_KEY, request.api_version))(unserved)
        mode = getattr(body, "share_acquire_mode", BATCH_OPTIMIZED_MODE)
        renew = getattr(body, "is_renew_ack", False)
        refused = _renewal_refused(body) if renew else None
        if mode not in (BATCH_OPTIMIZED_MODE, RECORD_LIMIT_MODE):
            refused = f"Unknown share acquire mode id: {mode}"
        if refused is not None:
            return _Answer(response_schema(SHARE_FETCH_KEY, request.api_version))(ErrorCode.invalid_request, refused)
        named = [(t.topic_id, p.partition_index) for t in body.topics for p in t.partitions]
        acks = {
            (t.topic_id, p.partition_index): _batches(p.acknowledgement_batches)
            for t in body.topics
            for p in t.partitions
            if p.acknowledgement_batches
        }
        forgotten = [(t.topic_id, p) for t in body.forgotten_topics_data for p in t.partitions]
        begun = await self._begin(
            request,
            SHARE_FETCH_KEY,
            lambda group_id, member_id: self._sessions.fetch_context(
                group_id,
                member_id,
                body.share_session_epoch,
                named,
                forgotten,
                acknowledges=bool(acks),
                connection=request.context.connection_id,
            ),
        )
        if not isinstance(begun, _Begun):
            return begun
        answer, group_id, member_id, context, settings = begun
        names = await self._readable(request, {t for t, _ in [*context.partitions, *acks]})
        outcomes: dict[SharePartitionKey, _Outcome] = {key: _Outcome() for key in acks}

        async def acknowledged(which: dict[SharePartitionKey, list[AcknowledgementBatch]]) -> None:
            for key, batches in which.items():
                topic = names[key[0]]
                if isinstance(topic, ErrorCode):
                    outcomes[key].acknowledge_error = topic
                    continue
                outcomes[key].acknowledge_error, outcomes[key].acknowledge_message = await self._acknowledge(
                    group_id, member_id, settings, topic, key[1], batches, renew
                )

        if context.final:
            await acknowledged(acks)
            await self._close(group_id, member_id, names)
        elif renew:
            await acknowledged(acks)
        else:
            carried = _carried(context, acks, names)
            await asyncio.gather(
                acknowledged({key: batches for key, batches in acks.items() if key not in carried}),
                self._acquire(group_id, member_id, settings, context, names, outcomes, body, carried),
            )
            self._count(False, names, [(key, outcomes[key].error) for key in context.partitions if key in outcomes])
        self._count(True, names, [(key, outcomes[key].acknowledge_error or ErrorCode.none) for key in acks])
        return answer(ErrorCode.none, None, settings.record_lock_duration_ms, _responses(context, outcomes))

    async def _acquire(
        self,
        group_id: str,
        member_id: str,
        settings: ResolvedShareConfig,
        context: SessionContext,
        names: Mapping[uuid.UUID, str | ErrorCode],
        outcomes: dict[SharePartitionKey, _Outcome],
        body: Any,
        carried: dict[SharePartitionKey, list[AcknowledgementBatch]],
    ) -> None:
        """Acquires records from the session's partitions into `outcomes`, waiting up to `max_wait` for some: a
        session of one partition at its leader, in one call (the leader answers at once what it can acquire), one of
        several looking again every `POLL_INTERVAL_S`. The `carried` acknowledgements go with their partition's first
        call, their outcome into `outcomes`."""
        deadline = time.monotonic() + milliseconds(body.max_wait) / 1000
        remaining = max(body.max_records, 1)
        record_limit = getattr(body, "share_acquire_mode", BATCH_OPTIMIZED_MODE) == RECORD_LIMIT_MODE
        wait_ms = 0
        if len(context.partitions) == 1:
            wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
        while True:
            for key in context.partitions:
                topic = names.get(key[0], ErrorCode.unknown_topic_id)
                outcome = outcomes.setdefault(key, _Outcome())
                if isinstance(topic, ErrorCode):
                    outcome.error = topic
                    continue
                if remaining <= 0:
                    break
                remaining -= await self._fetch_into(
                    outcome,
                    topic,
                    key[1],
                    group_id,
                    member_id,
                    settings,
                    body.max_bytes,
                    remaining,
                    wait_ms,
                    record_limit,
                    carried.pop(key, None),
                )
            done = any(outcome.acquired or outcome.error != ErrorCode.none for outcome in outcomes.values())
            if done or wait_ms > 0 or time.monotonic() + POLL_INTERVAL_S > deadline:
                return
            if len(context.partitions) == 1:
                wait_ms = max(1, int((deadline - time.monotonic()) * 1000))
            else:
                await asyncio.sleep(POLL_INTERVAL_S)

    async def _fetch_into(
        self,
        outcome: _Outcome,
        topic: str,
        partition: int,
        group_id: str,
        member_id: str,
        settings: ResolvedShareConfig,
        max_bytes: int,
        max_records: int,
        max_wait_ms: int,
        record_limit: bool,
        acknowledgements: list[AcknowledgementBatch] | None,
    ) -> int:
        """One partition's acquisition at its leader (waiting there up to `max_wait_ms` for records) into `outcome`:
        its records, or its error, and the outcome of the `acknowledgements` it carried; the count of records
        acquired (at most `max_records` with `record_limit`, the record-limit acquire mode)."""
        try:
            fetched = await self._view.share_fetch(
                topic,
                partition,
                group_id,
                member_id,
                settings,
                max_bytes,
                max_records,
                max_wait_ms,
                record_limit,
                acknowledgements,
            )
        except RaybrokerError as exc:
            outcome.error = share_partition_error_code(exc)
            if acknowledgements is not None:
                outcome.acknowledge_error, outcome.acknowledge_message = outcome.error, str(exc)
            return 0
        if acknowledgements is not None:
            refused = fetched.acknowledge_error
            outcome.acknowledge_error = ErrorCode.none if refused is None else share_partition_error_code(refused)
            outcome.acknowledge_message = None if refused is None else str(refused)
        if fetched.acquired:
            outcome.records = fetched.records
            outcome.acquired = list(fetched.acquired)
        return sum(r.last_offset - r.first_offset + 1 for r in fetched.acquired)


def _carried(
    context: SessionContext,
    acks: dict[SharePartitionKey, list[AcknowledgementBatch]],
    names: Mapping[uuid.UUID, str | ErrorCode],
) -> dict[SharePartitionKey, list[AcknowledgementBatch]]:
    """The acknowledgements that go with the acquisition's call: those of a session's only partition, whose topic
    may be read (one call to the leader instead of two; it applies them before it acquires)."""
    if len(context.partitions) != 1:
        return {}
    (key,) = context.partitions
    return {key: acks[key]} if key in acks and isinstance(names.get(key[0]), str) else {}


class ShareAcknowledgeHandler(_ShareHandler):
    """Answers ShareAcknowledge (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        unserved = self._gate.refusal()
        if unserved is not None:
            return _Answer(response_schema(SHARE_ACKNOWLEDGE_KEY, request.api_version))(unserved)
        begun = await self._begin(
            request,
            SHARE_ACKNOWLEDGE_KEY,
            lambda group_id, member_id: self._sessions.acknowledge_context(
                group_id, member_id, body.share_session_epoch
            ),
        )
        if not isinstance(begun, _Begun):
            return begun
        answer, group_id, member_id, context, settings = begun
        acks = {
            (t.topic_id, p.partition_index): _batches(p.acknowledgement_batches)
            for t in body.topics
            for p in t.partitions
        }
        names = await self._readable(request, {t for t, _ in [*context.partitions, *acks]})
        renew = getattr(body, "is_renew_ack", False)
        topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
        codes: list[tuple[SharePartitionKey, ErrorCode]] = []
        for (topic_id, partition), batches in acks.items():
            topic = names[topic_id]
            code, message = (
                (topic, None)
                if isinstance(topic, ErrorCode)
                else await self._acknowledge(group_id, member_id, settings, topic, partition, batches, renew)
            )
            codes.append(((topic_id, partition), code))
            topics.setdefault(topic_id, []).append(
                {
                    "partition_index": partition,
                    "error_code": code,
                    "error_message": message,
                    "current_leader": _NO_LEADER,
                }
            )
        self._count(True, names, codes)
        if context.final:
            await self._close(group_id, member_id, names)
        responses = [{"topic_id": topic_id, "partitions": partitions} for topic_id, partitions in topics.items()]
        return answer(ErrorCode.none, None, settings.record_lock_duration_ms, responses)


async def release_disconnected(view: BrokerView, sessions: ShareSessions, connection: int) -> None:
    """Forgets the share sessions the closed client `connection` opened and releases the records their members
    hold, as Kafka 4.2 does when a share consumer's connection goes: the records are delivered again at once rather
    than when their locks expire. A partition whose leader cannot be reached keeps its records until their locks
    expire."""
    for closed in sessions.disconnected(connection):
        try:
            names = await view.topic_names_naming({topic_id for topic_id, _ in closed.partitions})
        except RaybrokerError:
            continue
        await _release(view, closed.group_id, closed.member_id, closed.partitions, names)


async def _release(
    view: BrokerView,
    group_id: str,
    member_id: str,
    partitions: Iterable[SharePartitionKey],
    names: Mapping[uuid.UUID, str | ErrorCode],
) -> None:
    """Releases the records the member holds in `partitions` (those of topics named), each at its leader."""
    for topic_id, partition in partitions:
        topic = names.get(topic_id)
        if isinstance(topic, str):
            with contextlib.suppress(RaybrokerError):
                await view.share_release(topic, partition, group_id, member_id)


class _Answer:
    """Builds a ShareFetch or ShareAcknowledge answer of one request's version (their top levels have the same
    fields)."""

    def __init__(self, response_type: Any) -> None:
        self._response_type = response_type

    def __call__(self, code: ErrorCode, message: str | None = None, lock_ms: int = 0, responses: Any = ()) -> Any:
        return build(
            self._response_type,
            {
                "throttle_time": 0,
                "error_code": code,
                "error_message": message,
                "acquisition_lock_timeout": lock_ms,
                "responses": list(responses),
                "node_endpoints": [],
            },
        )


def _renewal_refused(body: Any) -> str | None:
    """Why a ShareFetch carrying renewals (`IsRenewAck`) is refused, in Kafka's words: it fetches nothing, so each
    of its fetch limits must be 0 (KIP-1222); None when they are."""
    nonzero = [
        f"{name} must be set to 0, "
        for name, value in (
            ("maxBytes", body.max_bytes),
            ("minBytes", body.min_bytes),
            ("maxRecords", body.max_records),
            ("maxWaitMs", milliseconds(body.max_wait)),
        )
        if value != 0
    ]
    return "".join(nonzero) + "if isRenewAck is true." if nonzero else None


def _batches(batches: Any) -> list[AcknowledgementBatch]:
    return [
        AcknowledgementBatch(batch.first_offset, batch.last_offset, tuple(batch.acknowledge_types)) for batch in batches
    ]


def _responses(context: SessionContext, outcomes: Mapping[SharePartitionKey, _Outcome]) -> list[dict[str, Any]]:
    """The answer's partitions, by topic: every partition of an opening request, else those with something to say."""
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    keys = list(dict.fromkeys([*context.partitions, *outcomes])) if context.full else list(outcomes)
    for key in keys:
        outcome = outcomes.get(key, _Outcome())
        said = outcome.acquired or outcome.error != ErrorCode.none or outcome.acknowledge_error is not None
        if not said and not context.full:
            continue
        topics.setdefault(key[0], []).append(
            {
                "partition_index": key[1],
                "error_code": outcome.error,
                "error_message": None,
                "acknowledge_error_code": (outcome.acknowledge_error or ErrorCode.none).value,
                "acknowledge_error_message": outcome.acknowledge_message,
                "current_leader": _NO_LEADER,
                "records": outcome.records,
                "acquired_records": [
                    {"first_offset": r.first_offset, "last_offset": r.last_offset, "delivery_count": r.delivery_count}
                    for r in outcome.acquired
                ],
            }
        )
    return [{"topic_id": topic_id, "partitions": partitions} for topic_id, partitions in topics.items()]

"""Produce (key 0): each partition's record batches go, byte for byte as the client sent them, to its log.

`acks` is 0 (no response at all: the router sends nothing back), 1 (answer after the leader's append) or -1
(answer once every in-sync replica has the records, within the request's `timeout_ms`: NOT_ENOUGH_REPLICAS when
fewer than `min.insync.replicas` are in sync before the append, REQUEST_TIMED_OUT or
NOT_ENOUGH_REPLICAS_AFTER_APPEND after it). Any other value
fails every partition with INVALID_REQUIRED_ACKS (21). Partitions are appended concurrently and fail one by one:
an unknown partition, a corrupt batch or a sequence gap answers that partition's error code and leaves the others
appended. A partition's answer carries the base offset the log assigned, the LogAppendTime it stamped (-1 for
CreateTime topics) and the log start offset.

A request with a `transactional_id` needs WRITE on that id, and one holding a transactional batch needs a
`transactional_id` (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53, as Kafka's). The request's
transactional partitions are checked with the transaction coordinator first, all in one call (KIP-890's verification,
which a broker whose coordinator it reaches directly can always do; batches of more than one producer in one request
answer INVALID_PRODUCER_ID_MAPPING, 49, as Kafka's): a partition its producer did not add to the ongoing transaction
answers TRANSACTION_ABORTABLE (120) to Produce v11+ and INVALID_TXN_STATE (48) to older versions, whose clients do not
know that code, a fenced producer INVALID_PRODUCER_EPOCH (47), a coordinator busy with the id or unreachable
NOT_ENOUGH_REPLICAS (19), which old clients retry without a metadata refresh, as Kafka's `AddPartitionsToTxnManager`
maps them. Produce v11 differs from v10 in nothing else. From v12 the client speaks transactions v2 (KIP-890 part 2):
it adds no partition to its transaction itself, the coordinator adds each transactional partition it sends batches to
(`TransactionCoordinator.add_partitions_implicitly`) where older versions only verify it. v13 names topics by id,
requests and answers alike; an id no topic has answers UNKNOWN_TOPIC_ID (100). The verification runs while the append
keeps its place in the partition's order (`BrokerView.append`'s `admitted`): a client's pipelined batches reach the
log in the order its requests came, as Kafka's broker, which reads one request per connection at a time, appends them,
however long each verification takes.

Authorization: WRITE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29) without being
looked at, whether the topic exists or not, as Kafka's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping
from typing import Any, TypeGuard

from kio.schema.errors import ErrorCode

from actors.core.replication.replica import ACKS
from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.transactions.transaction_metadata import TxnError
from cluster.protocol.error_codes import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.quota_enforcer import QuotaEnforcer
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.transaction_view import TransactionView
from storage.errors import RaybrokerError
from storage.records.layout import NO_TIMESTAMP
from storage.records.record_batch import RecordBatch, iter_batches
from storage.topic_partition import TopicPartition

# KIP-890's mapping of the coordinator's verification answers to Produce codes (AddPartitionsToTxnManager):
# TRANSACTION_ABORTABLE is kept for Produce v11+ (`TRANSACTION_ABORTABLE_VERSION`), older clients get INVALID_TXN_STATE.
_VERIFICATION_CODES = {
    TxnError.TRANSACTION_ABORTABLE: ErrorCode.invalid_txn_state,
    TxnError.PRODUCER_FENCED: ErrorCode.invalid_producer_epoch,
    TxnError.INVALID_PRODUCER_ID_MAPPING: ErrorCode.invalid_producer_id_mapping,
    TxnError.INVALID_REQUEST: ErrorCode.invalid_request,
}

PRODUCE_KEY = 0
TRANSACTION_ABORTABLE_VERSION = 11
# Transactions v2 (KIP-890 part 2): the broker adds a transactional batch's partition to its transaction.
FIRST_IMPLICIT_ADD_VERSION = 12
# Topics named by id rather than by name.
FIRST_TOPIC_ID_VERSION = 13
NO_OFFSET = -1


class ProduceHandler(GuardedHandler[BrokerView]):
    """Answers Produce (see the module docstring); returns None for `acks=0`."""

    def __init__(
        self,
        view: BrokerView,
        transactions: TransactionView,
        access: AccessControl | None = None,
        quotas: QuotaEnforcer | None = None,
    ) -> None:
        super().__init__(view, access)
        self._transactions = transactions
        self._quotas = quotas
        self._arrivals = _Arrivals()

    async def __call__(self, request: Request) -> Any | None:
        body = request.body
        by_id = request.api_version >= FIRST_TOPIC_ID_VERSION
        if not by_id:
            # Nothing to await before the appends are asked for: they take their places as the request came.
            return await self._produce(request, by_id, {}, None)
        previous, mine = self._arrivals.arrive()
        try:
            names = await self._view.topic_names_naming(topic.topic_id for topic in body.topic_data)
            if previous is not None:
                await asyncio.shield(previous)
            return await self._produce(request, by_id, names, mine)
        finally:
            self._arrivals.registered(mine)

    async def _produce(
        self, request: Request, by_id: bool, names: Mapping[uuid.UUID, str], arrival: asyncio.Future[None] | None
    ) -> Any | None:
        """The request's appends, asked for before anything is awaited; `arrival` (a v13 request's) is set once they
        took their places in their partitions' order (see `_Arrivals`)."""
        body = request.body
        # A topic id no topic has: its partitions answer UNKNOWN_TOPIC_ID, under a name no topic can have.
        wanted = [
            (names.get(topic.topic_id, "") if by_id else topic.name, data.index, data.records)
            for topic in body.topic_data
            for data in topic.partition_data
        ]
        allowed = authorized_names(
            self._access, request.context, AclOperation.WRITE, ResourceType.TOPIC, (topic for topic, _, _ in wanted)
        )
        transactional_id = body.transactional_id
        firsts = [_first_batch(records) for _, _, records in wanted]
        if (transactional_id is None and any(_is_transactional(first) for first in firsts)) or (
            transactional_id is not None
            and not allows(
                self._access, request.context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
            )
        ):
            allowed = set()
            answers = [_failed(ErrorCode.transactional_id_authorization_failed)] * len(wanted)
        else:
            answers = [_failed(ErrorCode.topic_authorization_failed)] * len(wanted)
        writable = [index for index, (topic, _, _) in enumerate(wanted) if (topic or not by_id) and topic in allowed]
        for index, (topic, _, _) in enumerate(wanted):
            if by_id and not topic:
                answers[index] = _failed(ErrorCode.unknown_topic_id)
        if body.acks not in ACKS:
            appended = [_failed(ErrorCode.invalid_required_acks) for _ in writable]
        else:
            timeout_ms = int(body.timeout.total_seconds() * 1000)
            transactional = {
                wanted[index][:2]: first for index in writable if _is_transactional(first := firsts[index])
            }
            verifying = self._verification(transactional_id, transactional, request.api_version)
            try:
                appending = asyncio.gather(
                    *(
                        self._append(*wanted[index], firsts[index], body.acks, timeout_ms, verifying)
                        for index in writable
                    )
                )
                # Each append's first step takes its place in its partition's order, before any request behind
                # this one, which `arrival` wakes only now.
                if arrival is not None:
                    self._arrivals.registered(arrival)
                appended = list(await appending)
            finally:
                if verifying is not None:
                    _settle(verifying)
        for index, answer in zip(writable, appended, strict=True):
            answers[index] = answer
        throttle_ms = (
            0 if self._quotas is None else self._quotas.produced(request.context, request.client_id, request.size_bytes)
        )
        if body.acks == 0:
            return None
        keys = [topic.topic_id if by_id else topic.name for topic in body.topic_data for _ in topic.partition_data]
        responses: dict[Any, list[dict[str, Any]]] = {}
        for key, (_, partition, _), answer in zip(keys, wanted, answers, strict=True):
            responses.setdefault(key, []).append({"index": partition, **answer})
        return build(
            response_schema(PRODUCE_KEY, request.api_version),
            {
                "responses": [
                    {"topic_id" if by_id else "name": key, "partition_responses": parts}
                    for key, parts in responses.items()
                ],
                "throttle_time": throttle_ms,
            },
        )

    async def _append(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        first: RecordBatch | RaybrokerError | None,
        acks: int,
        timeout_ms: int,
        verifying: _Verification | None,
    ) -> dict[str, Any]:
        """One partition's append (`first`: its first batch, or why its bytes hold none). Called in the order the
        requests came, it asks the view at once, with no await before: the view keeps a partition's appends in the
        order they are asked for, and a transactional batch's part of the request's verification is what the append
        awaits in its place (`admitted`), so a pipelined batch behind it cannot overtake it (Kafka reads one request
        per connection at a time)."""
        if not records:
            return _failed(ErrorCode.invalid_record, "a produce request must carry record batches")
        if isinstance(first, RaybrokerError):
            return _failed(error_code(first), first.message)
        admitted = None
        if verifying is not None and _is_transactional(first):
            admitted = asyncio.ensure_future(_admitted(verifying, (topic, partition)))
        try:
            info = await self._view.append(topic, partition, bytes(records), acks, timeout_ms, admitted)
        except _Refused as refused:
            return refused.answer
        except RaybrokerError as exc:
            return _failed(error_code(exc), exc.message)
        finally:
            if admitted is not None:
                _settle(admitted)
        return {
            "error_code": ErrorCode.none,
            "base_offset": info.first_offset,
            "log_append_time": info.log_append_time,
            "log_start_offset": info.log_start_offset,
            "record_errors": [],
        }

    def _verification(
        self, transactional_id: str | None, batches: dict[TopicPartition, RecordBatch], version: int
    ) -> _Verification | None:
        """The request's verification, started now: one coordinator call for all its transactional partitions, as
        Kafka's broker verifies a request's partitions together; None if it has none."""
        if transactional_id is None or not batches:
            return None
        return asyncio.ensure_future(self._verify(transactional_id, batches, version))

    async def _verify(
        self, transactional_id: str, batches: dict[TopicPartition, RecordBatch], version: int
    ) -> dict[TopicPartition, dict[str, Any] | None]:
        """Each transactional partition's refusal, None for one whose batches may be appended. Batches of more than
        one producer in one request are refused INVALID_PRODUCER_ID_MAPPING, as Kafka refuses them."""
        producers = {(batch.producer_id, batch.producer_epoch) for batch in batches.values()}
        if len(producers) > 1:
            message = "the transactional batches of one produce request name more than one producer"
            return dict.fromkeys(batches, _failed(ErrorCode.invalid_producer_id_mapping, message))
        ((producer_id, producer_epoch),) = producers
        check = (
            self._transactions.add_partitions_implicitly
            if version >= FIRST_IMPLICIT_ADD_VERSION
            else self._transactions.verify_partitions
        )
        try:
            verified = await check(transactional_id, producer_id, producer_epoch, list(batches))
        except RaybrokerError as exc:
            return dict.fromkeys(batches, _failed(ErrorCode.not_enough_replicas, exc.message))
        return {tp: _refusal(verified[tp], tp, transactional_id, version) for tp in batches}


class _Arrivals:
    """The order Produce requests naming topics by id (v13) came in, kept until each one's appends took their places
    in their partitions' order. Such a request may wait for the topics' names (a controller round trip) before it can
    ask for its appends; the v13 requests that came after it wait for it, so that a producer's pipelined batches still
    reach each partition in the order they were sent. Older versions await nothing first and are not kept here (a
    producer uses one version per connection)."""

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None

    def arrive(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """(the previous request's future, or None once done; this one's): take before anything is awaited."""
        previous = self._last if self._last is not None and not self._last.done() else None
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last = mine
        return previous, mine

    def registered(self, mine: asyncio.Future[None]) -> None:
        """The request's appends took their places (or it asks for none): the next request may go."""
        if not mine.done():
            mine.set_result(None)
        if self._last is mine:
            self._last = None


# A produce request's verification: each transactional partition's refusal, None where the coordinator agreed.
_Verification = asyncio.Future[dict[TopicPartition, dict[str, Any] | None]]


def _refusal(answer: TxnError, tp: TopicPartition, transactional_id: str, version: int) -> dict[str, Any] | None:
    """The partition's Produce answer for the coordinator's verification answer; None for NONE."""
    if answer == TxnError.NONE:
        return None
    code = _VERIFICATION_CODES.get(answer, ErrorCode.not_enough_replicas)
    if answer == TxnError.TRANSACTION_ABORTABLE and version >= TRANSACTION_ABORTABLE_VERSION:
        code = ErrorCode.transaction_abortable
    return _failed(code, f"{tp[0]}-{tp[1]} is not part of the ongoing transaction of {transactional_id!r}")


async def _admitted(verifying: _Verification, tp: TopicPartition) -> None:
    """Returns once the request's verification let the partition's batches in, else raises `_Refused`. Shielded:
    one partition's append ending early must not cancel the others' verification."""
    refusal = (await asyncio.shield(verifying))[tp]
    if refusal is not None:
        raise _Refused(refusal)


class _Refused(Exception):
    """A transactional batch the coordinator's verification refused: the partition's answer, the batch unsent."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("error_message"))
        self.answer = answer


def _settle(verifying: asyncio.Future[Any]) -> None:
    """Cancels a verification nobody waited for (its request ended first) and marks its outcome as seen, so that
    asyncio reports no error of a task nobody awaits."""
    if not verifying.done():
        verifying.cancel()
    elif not verifying.cancelled():
        verifying.exception()


def _first_batch(records: bytes | None) -> RecordBatch | RaybrokerError | None:
    """The partition's first batch, None if its bytes hold none, or why they cannot be read (its append answers
    that)."""
    try:
        return next(iter_batches(bytes(records or b"")), None)
    except RaybrokerError as exc:
        return exc


def _is_transactional(first: RecordBatch | RaybrokerError | None) -> TypeGuard[RecordBatch]:
    """Whether a partition's first batch is a transactional one."""
    return isinstance(first, RecordBatch) and first.is_transactional


def _failed(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "base_offset": NO_OFFSET,
        "log_append_time": NO_TIMESTAMP,
        "log_start_offset": NO_OFFSET,
        "record_errors": [],
        "error_message": message,
    }

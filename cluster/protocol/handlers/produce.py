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
`transactional_id` (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53, as Kafka's). Each
transactional batch is checked with the transaction coordinator first (KIP-890's verification, which a broker whose
coordinator it reaches directly can always do): a partition its producer did not add to the ongoing transaction answers
TRANSACTION_ABORTABLE (120) to Produce v11+ and INVALID_TXN_STATE (48) to older versions, whose clients do not know
that code, a fenced producer INVALID_PRODUCER_EPOCH (47), a coordinator busy with the id or unreachable
NOT_ENOUGH_REPLICAS (19), which old clients retry without a metadata refresh, as Kafka's `AddPartitionsToTxnManager`
maps them. Produce v11 differs from v10 in nothing else. The verification runs while the append keeps its place in
the partition's order (`BrokerView.append`'s `admitted`): a client's pipelined batches reach the log in the order its
requests came, as Kafka's broker, which reads one request per connection at a time, appends them, however long each
verification takes.

Authorization: WRITE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (29) without being
looked at, whether the topic exists or not, as Kafka's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.replication.replica import ACKS
from actors.core.security.acls import AclOperation, ResourceType
from actors.core.transactions.transaction_metadata import TxnError
from cluster.protocol.broker_view import BrokerView
from cluster.protocol.errors import error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import allows, authorized_names
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.transaction_view import TransactionView
from storage.errors import RaybrokerError
from storage.records.layout import NO_TIMESTAMP
from storage.records.record_batch import RecordBatch, iter_batches

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
NO_OFFSET = -1


class ProduceHandler:
    """Answers Produce (see the module docstring); returns None for `acks=0`."""

    def __init__(self, view: BrokerView, transactions: TransactionView, access: AccessControl | None = None) -> None:
        self._view = view
        self._transactions = transactions
        self._access = access

    async def __call__(self, request: Request) -> Any | None:
        body = request.body
        wanted = [(topic.name, data.index, data.records) for topic in body.topic_data for data in topic.partition_data]
        allowed = authorized_names(
            self._access, request.context, AclOperation.WRITE, ResourceType.TOPIC, (topic for topic, _, _ in wanted)
        )
        transactional_id = body.transactional_id
        if (transactional_id is None and any(_is_transactional(records) for _, _, records in wanted)) or (
            transactional_id is not None
            and not allows(
                self._access, request.context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
            )
        ):
            allowed = set()
            answers = [_failed(ErrorCode.transactional_id_authorization_failed)] * len(wanted)
        else:
            answers = [_failed(ErrorCode.topic_authorization_failed)] * len(wanted)
        writable = [index for index, (topic, _, _) in enumerate(wanted) if topic in allowed]
        if body.acks not in ACKS:
            appended = [_failed(ErrorCode.invalid_required_acks) for _ in writable]
        else:
            timeout_ms = int(body.timeout.total_seconds() * 1000)
            appended = list(
                await asyncio.gather(
                    *(
                        self._append(*wanted[index], body.acks, timeout_ms, transactional_id, request.api_version)
                        for index in writable
                    )
                )
            )
        for index, answer in zip(writable, appended, strict=True):
            answers[index] = answer
        if body.acks == 0:
            return None
        responses: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition, _), answer in zip(wanted, answers, strict=True):
            responses.setdefault(topic, []).append({"index": partition, **answer})
        return build(
            response_schema(PRODUCE_KEY, request.api_version),
            {
                "responses": [{"name": name, "partition_responses": parts} for name, parts in responses.items()],
                "throttle_time": 0,
            },
        )

    async def _append(
        self,
        topic: str,
        partition: int,
        records: bytes | None,
        acks: int,
        timeout_ms: int,
        transactional_id: str | None,
        version: int,
    ) -> dict[str, Any]:
        """One partition's append. Called in the order the requests came, it asks the view at once, with no await
        before: the view keeps a partition's appends in the order they are asked for, and a transactional batch's
        verification, started here, is what the append awaits in its place (`admitted`), so a pipelined batch
        behind it cannot overtake it (Kafka reads one request per connection at a time)."""
        if not records:
            return _failed(ErrorCode.invalid_record, "a produce request must carry record batches")
        verifying = None
        if transactional_id is not None:
            try:
                first = next(iter_batches(bytes(records)), None)
            except RaybrokerError as exc:
                return _failed(error_code(exc), exc.message)
            if first is not None and first.is_transactional:
                verifying = asyncio.ensure_future(self._verify(transactional_id, topic, partition, first, version))
        try:
            info = await self._view.append(topic, partition, bytes(records), acks, timeout_ms, verifying)
        except _Refused as refused:
            return refused.answer
        except RaybrokerError as exc:
            return _failed(error_code(exc), exc.message)
        finally:
            if verifying is not None:
                _settle(verifying)
        return {
            "error_code": ErrorCode.none,
            "base_offset": info.first_offset,
            "log_append_time": info.log_append_time,
            "log_start_offset": info.log_start_offset,
            "record_errors": [],
        }

    async def _verify(
        self, transactional_id: str, topic: str, partition: int, first: RecordBatch, version: int
    ) -> None:
        """Returns if the partition's transactional batches may be appended, else raises `_Refused` with the
        partition's answer."""
        try:
            verified = await self._transactions.verify_partitions(
                transactional_id, first.producer_id, first.producer_epoch, [(topic, partition)]
            )
        except RaybrokerError as exc:
            raise _Refused(_failed(ErrorCode.not_enough_replicas, exc.message)) from None
        answer = verified[(topic, partition)]
        if answer == TxnError.NONE:
            return
        code = _VERIFICATION_CODES.get(answer, ErrorCode.not_enough_replicas)
        if answer == TxnError.TRANSACTION_ABORTABLE and version >= TRANSACTION_ABORTABLE_VERSION:
            code = ErrorCode.transaction_abortable
        raise _Refused(
            _failed(code, f"{topic}-{partition} is not part of the ongoing transaction of {transactional_id!r}")
        )


class _Refused(Exception):
    """A transactional batch the coordinator's verification refused: the partition's answer, the batch unsent."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(answer.get("error_message"))
        self.answer = answer


def _settle(verifying: asyncio.Future[None]) -> None:
    """Cancels a verification the append never waited for (its request ended first) and marks its outcome as
    seen, so that asyncio reports no error of a task nobody awaits."""
    if not verifying.done():
        verifying.cancel()
    elif not verifying.cancelled():
        verifying.exception()


def _is_transactional(records: bytes | None) -> bool:
    """Whether the partition's first batch is transactional; bytes that hold no batch are not (their append
    answers why)."""
    try:
        first = next(iter_batches(bytes(records or b"")), None)
    except RaybrokerError:
        return False
    return first is not None and first.is_transactional


def _failed(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "base_offset": NO_OFFSET,
        "log_append_time": NO_TIMESTAMP,
        "log_start_offset": NO_OFFSET,
        "record_errors": [],
        "error_message": message,
    }

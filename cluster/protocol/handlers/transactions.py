"""The transaction APIs of a transactional producer, of brokers and of Kafka's admin tools: AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61),
DescribeTransactions (65) and ListTransactions (66). The coordinator's answers (`TxnError`) map to Kafka's codes by
name; PRODUCER_FENCED (90) is sent only to the versions that know it (AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
v2+), older ones get INVALID_PRODUCER_EPOCH (47), as Kafka's `KafkaApis` does.

AddPartitionsToTxn v0-3 is a producer's: one transaction, its partitions added. v4-5 is a broker's (KIP-890, a
partition leader verifying a transactional Produce): a batch of transactions, each with `verify_only`; verifying adds
nothing and answers per partition NONE (in the transaction) or TRANSACTION_ABORTABLE (not in it), or the id's error
for all of them (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS while Prepare*); without
`verify_only` the partitions are added as v3 adds them. Each transaction's answer is in `results_by_transaction`, and
the request's own in the top-level error code. Either form checks the topics first: a topic the principal may not
WRITE (v0-3; nor an internal topic, which a producer never writes) answers TOPIC_AUTHORIZATION_FAILED (29), a
partition that does not exist UNKNOWN_TOPIC_OR_PARTITION (3), and then every other partition of that transaction
OPERATION_NOT_ATTEMPTED (55), nothing being added (partition counts found are trusted for a second, as Kafka's brokers
trust their metadata cache: `cluster.protocol.handlers.partition_counts`, which TxnOffsetCommit uses too).
AddOffsetsToTxn adds the group's `__consumer_offsets` partition. Transactions v2 (KIP-890 part 2, Kafka 4 clients):
EndTxn v5 ends every transaction with the producer's epoch bumped and answers the producer id and epoch to go on with
(`TransactionCoordinator.end_transaction_v2`), and TxnOffsetCommit v5 adds the group's partition to the transaction
itself, where older versions require AddOffsetsToTxn to have added it. TxnOffsetCommit goes to the group coordinator,
which holds the offsets pending until the COMMIT marker of the transaction reaches that partition; it is refused
unless that partition is in the producer's transaction (TRANSACTION_ABORTABLE to v4+, INVALID_TXN_STATE before;
INVALID_PRODUCER_EPOCH for a fenced producer, INVALID_PRODUCER_ID_MAPPING for an unknown one). With member information
it is checked against the group's member and generation, whatever the group's state (UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION). Each partition's offset, leader epoch (v2+, -1 before) and metadata are kept, and OffsetFetch
answers them once the transaction commits; past the transaction's and the group's checks, a partition whose metadata
is over `offset.metadata.max.bytes` answers OFFSET_METADATA_TOO_LARGE (12) and is not written, as in Kafka 4.2's
`OffsetMetadataManager.commitTransactionalOffset`.

Authorization, as Kafka's: CLUSTER_ACTION on the cluster for AddPartitionsToTxn v4+, a broker's request (else the
top-level code is CLUSTER_AUTHORIZATION_FAILED, 31, and no transaction is answered); WRITE on the transactional id for
AddPartitionsToTxn v0-3, AddOffsetsToTxn, EndTxn and TxnOffsetCommit (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53);
READ on the group for AddOffsetsToTxn and TxnOffsetCommit (GROUP_AUTHORIZATION_FAILED, 30) and READ on each topic
committed (TOPIC_AUTHORIZATION_FAILED); DESCRIBE on each id for DescribeTransactions (an id it may not see answers 53;
an empty id is INVALID_REQUEST) and ListTransactions (ids it may not see are left out); CLUSTER_ACTION on the cluster
for WriteTxnMarkers, whose markers a coordinator sends to partition leaders (else every partition answers
CLUSTER_AUTHORIZATION_FAILED, 31); READ on each topic for DescribeProducers (else TOPIC_AUTHORIZATION_FAILED; an
empty topic name is INVALID_TOPIC_EXCEPTION, a partition that does not exist UNKNOWN_TOPIC_OR_PARTITION).
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC, INTERNAL_TOPICS
from actors.core.security.acl_bindings import AclOperation, ResourceType
from actors.core.transactions.markers import TransactionMarker
from actors.core.transactions.transaction_coordinator import TransactionDescription
from actors.core.transactions.transaction_metadata import TransactionState, TxnError
from cluster.protocol.error_codes import coordinator_error_code, error_code, group_error_code, txn_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, allows_cluster, authorized_names
from cluster.protocol.handlers.group_offsets import metadata_too_large
from cluster.protocol.handlers.partition_counts import PartitionCounts
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.transaction_view import TransactionView
from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import RaybrokerError
from storage.records.consumer_offsets import NO_LEADER_EPOCH, OffsetAndMetadata
from storage.records.layout import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, ControlRecordType
from storage.topic_partition import TopicPartition

ADD_PARTITIONS_TO_TXN_KEY = 24
ADD_OFFSETS_TO_TXN_KEY = 25
END_TXN_KEY = 26
WRITE_TXN_MARKERS_KEY = 27
TXN_OFFSET_COMMIT_KEY = 28
DESCRIBE_PRODUCERS_KEY = 61
DESCRIBE_TRANSACTIONS_KEY = 65
LIST_TRANSACTIONS_KEY = 66
# The first versions answered PRODUCER_FENCED rather than INVALID_PRODUCER_EPOCH (KafkaApis).
FIRST_PRODUCER_FENCED_VERSION = 2
# AddPartitionsToTxn v4+ is the brokers' form (KIP-890): a batch of transactions, authorized by CLUSTER_ACTION.
FIRST_BROKER_ADD_PARTITIONS_VERSION = 4
# The first TxnOffsetCommit answered TRANSACTION_ABORTABLE rather than INVALID_TXN_STATE (KIP-890).
FIRST_TRANSACTION_ABORTABLE_COMMIT = 4
# Transactions v2 (KIP-890 part 2): EndTxn v5 ends with the producer's epoch bumped and answers it; TxnOffsetCommit v5
# adds the group's `__consumer_offsets` partition to the transaction (no AddOffsetsToTxn).
FIRST_EPOCH_BUMP_END_TXN = 5
FIRST_IMPLICIT_ADD_COMMIT = 5


def timeout_ms(value: datetime.timedelta | int) -> int:
    """A request's `i32Timedelta` field in whole milliseconds."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


async def _coordinator_call(call: Any) -> ErrorCode | TxnError:
    """The coordinator's answer, or the code of a coordinator that cannot be reached now."""
    try:
        answer: TxnError = await call
    except RaybrokerError as exc:
        return coordinator_error_code(exc)
    return answer


def _code(answer: ErrorCode | TxnError, api_version: int) -> ErrorCode:
    if isinstance(answer, ErrorCode):
        return answer
    return txn_error_code(answer, producer_fenced=api_version >= FIRST_PRODUCER_FENCED_VERSION)


class AddPartitionsToTxnHandler(GuardedHandler[BrokerView]):
    """Answers AddPartitionsToTxn: v0-3, a producer's one transaction; v4-5, a broker's batch of transactions, each
    added or only verified (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        transactions: TransactionView,
        access: AccessControl | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(view, access)
        self._transactions = transactions
        self._counts = PartitionCounts(view, clock)

    async def __call__(self, request: Request) -> Any:
        response_type = response_schema(ADD_PARTITIONS_TO_TXN_KEY, request.api_version)
        body = request.body
        if request.api_version < FIRST_BROKER_ADD_PARTITIONS_VERSION:
            wanted = _partitions(body.v3_and_below_topics)
            codes = await self._codes(
                request,
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
                wanted,
                verify_only=False,
            )
            return build(response_type, {"throttle_time": 0, "results_by_topic_v3_and_below": _by_topic(codes)})
        if not allows_cluster(self._access, request.context, AclOperation.CLUSTER_ACTION):
            return build(
                response_type,
                {
                    "throttle_time": 0,
                    "error_code": ErrorCode.cluster_authorization_failed,
                    "results_by_transaction": [],
                },
            )
        results = []
        for transaction in body.transactions:
            codes = await self._codes(
                request,
                transaction.transactional_id,
                transaction.producer_id,
                transaction.producer_epoch,
                _partitions(transaction.topics),
                verify_only=transaction.verify_only,
            )
            results.append({"transactional_id": transaction.transactional_id, "topic_results": _by_topic(codes)})
        return build(
            response_type, {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results}
        )

    async def _codes(
        self,
        request: Request,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        wanted: list[TopicPartition],
        *,
        verify_only: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's code. A producer (v0-3) needs WRITE on the id and on each topic; a broker (v4+) was
        authorized for the whole request."""
        context = request.context
        from_client = request.api_version < FIRST_BROKER_ADD_PARTITIONS_VERSION
        if from_client and not allows(
            self._access, context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        topics = {topic for topic, _ in wanted}
        writable = (
            authorized_names(self._access, context, AclOperation.WRITE, ResourceType.TOPIC, topics - INTERNAL_TOPICS)
            if from_client
            else topics
        )
        try:
            counts = await self._counts.covering(wanted)
        except RaybrokerError as exc:
            return dict.fromkeys(wanted, coordinator_error_code(exc))
        refused = {
            (topic, partition): ErrorCode.topic_authorization_failed
            if topic not in writable
            else ErrorCode.unknown_topic_or_partition
            for topic, partition in wanted
            if topic not in writable or not 0 <= partition < counts.get(topic, 0)
        }
        if refused:
            return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
        if verify_only:
            try:
                verified = await self._transactions.verify_partitions(
                    transactional_id, producer_id, producer_epoch, wanted
                )
            except RaybrokerError as exc:
                return dict.fromkeys(wanted, coordinator_error_code(exc))
            return {tp: txn_error_code(error) for tp, error in verified.items()}
        answer = await _coordinator_call(
            self._transactions.add_partitions(transactional_id, producer_id, producer_epoch, wanted)
        )
        return dict.fromkeys(wanted, _code(answer, request.api_version))


def _partitions(topics: Any) -> list[TopicPartition]:
    """A request's (topic, partition) pairs, each once, in the request's order."""
    return list(dict.fromkeys((topic.name, partition) for topic in topics for partition in topic.partitions))


def _by_topic(codes: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return [{"name": name, "results_by_partition": results} for name, results in by_topic.items()]


class AddOffsetsToTxnHandler(GuardedHandler[TransactionView]):
    """Answers AddOffsetsToTxn (see the module docstring)."""

    def __init__(self, transactions: TransactionView, groups: GroupView, access: AccessControl | None = None) -> None:
        super().__init__(transactions, access)
        self._groups = groups

    async def __call__(self, request: Request) -> Any:
        return build(
            response_schema(ADD_OFFSETS_TO_TXN_KEY, request.api_version),
            {"throttle_time": 0, "error_code": await self._code(request)},
        )

    async def _code(self, request: Request) -> ErrorCode:
        body = request.body
        context = request.context
        if not allows(self._access, context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            return ErrorCode.transactional_id_authorization_failed
        if not allows(self._access, context, AclOperation.READ, ResourceType.GROUP, body.group_id):
            return ErrorCode.group_authorization_failed
        try:
            partition = await self._groups.offsets_partition_for(body.group_id)
        except RaybrokerError as exc:
            return coordinator_error_code(exc)
        answer = await _coordinator_call(
            self._view.add_partitions(
                body.transactional_id, body.producer_id, body.producer_epoch, [(CONSUMER_OFFSETS_TOPIC, partition)]
            )
        )
        return _code(answer, request.api_version)


class EndTxnHandler(GuardedHandler[TransactionView]):
    """Answers EndTxn (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        values: dict[str, Any] = {
            "throttle_time": 0,
            "producer_id": NO_PRODUCER_ID,
            "producer_epoch": NO_PRODUCER_EPOCH,
        }
        if not allows(
            self._access, request.context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
        ):
            code = ErrorCode.transactional_id_authorization_failed
        elif request.api_version >= FIRST_EPOCH_BUMP_END_TXN:
            try:
                ended = await self._view.end_transaction_v2(
                    body.transactional_id, body.producer_id, body.producer_epoch, body.committed
                )
            except RaybrokerError as exc:
                code = coordinator_error_code(exc)
            else:
                values.update(producer_id=ended.producer_id, producer_epoch=ended.producer_epoch)
                code = _code(ended.error, request.api_version)
        else:
            answer = await _coordinator_call(
                self._view.end_transaction(body.transactional_id, body.producer_id, body.producer_epoch, body.committed)
            )
            code = _code(answer, request.api_version)
        return build(response_schema(END_TXN_KEY, request.api_version), {**values, "error_code": code})


class TxnOffsetCommitHandler(GuardedHandler[BrokerView]):
    """Answers TxnOffsetCommit (see the module docstring)."""

    def __init__(
        self,
        view: BrokerView,
        groups: GroupView,
        transactions: TransactionView,
        access: AccessControl | None = None,
    ) -> None:
        super().__init__(view, access)
        self._groups = groups
        self._transactions = transactions
        self._counts = PartitionCounts(view)

    async def __call__(self, request: Request) -> Any:
        body = request.body
        wanted = [(topic.name, partition) for topic in body.topics for partition in topic.partitions]
        codes = await self._commit(request, wanted)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in zip(wanted, codes, strict=True):
            by_topic.setdefault(topic, []).append({"partition_index": partition.partition_index, "error_code": code})
        return build(
            response_schema(TXN_OFFSET_COMMIT_KEY, request.api_version),
            {"throttle_time": 0, "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]},
        )

    async def _commit(self, request: Request, wanted: list[tuple[str, Any]]) -> list[ErrorCode]:
        body = request.body
        context = request.context
        if not allows(self._access, context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id):
            return [ErrorCode.transactional_id_authorization_failed] * len(wanted)
        if not allows(self._access, context, AclOperation.READ, ResourceType.GROUP, body.group_id):
            return [ErrorCode.group_authorization_failed] * len(wanted)
        readable = authorized_names(
            self._access, context, AclOperation.READ, ResourceType.TOPIC, (topic for topic, _ in wanted)
        )
        try:
            counts = await self._counts.covering((topic, p.partition_index) for topic, p in wanted)
            partition = await self._groups.offsets_partition_for(body.group_id)
        except RaybrokerError as exc:
            return [coordinator_error_code(exc)] * len(wanted)
        codes: list[ErrorCode | None] = [
            ErrorCode.topic_authorization_failed
            if topic not in readable
            else ErrorCode.unknown_topic_or_partition
            if not 0 <= p.partition_index < counts.get(topic, 0)
            else ErrorCode.invalid_request
            if p.committed_offset < 0
            else None
            for topic, p in wanted
        ]
        offsets = {
            (topic, p.partition_index): OffsetAndMetadata(
                p.committed_offset,
                getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                p.committed_metadata or "",
            )
            for (topic, p), code in zip(wanted, codes, strict=True)
            if code is None and not metadata_too_large(p.committed_metadata or "")
        }
        if any(code is None for code in codes):
            verdict = await self._commit_offsets(request, partition, offsets)
            codes = [
                code
                if code is not None
                else verdict
                if verdict != ErrorCode.none or (topic, p.partition_index) in offsets
                else ErrorCode.offset_metadata_too_large
                for (topic, p), code in zip(wanted, codes, strict=True)
            ]
        return [ErrorCode.none if code is None else code for code in codes]

    async def _commit_offsets(
        self, request: Request, partition: int, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> ErrorCode:
        body = request.body
        offsets_partition = (CONSUMER_OFFSETS_TOPIC, partition)
        check = (
            self._transactions.add_partitions_implicitly
            if request.api_version >= FIRST_IMPLICIT_ADD_COMMIT
            else self._transactions.verify_partitions
        )
        try:
            verified = await check(body.transactional_id, body.producer_id, body.producer_epoch, [offsets_partition])
        except RaybrokerError as exc:
            return coordinator_error_code(exc)
        answer = verified[offsets_partition]
        if answer == TxnError.TRANSACTION_ABORTABLE and request.api_version < FIRST_TRANSACTION_ABORTABLE_COMMIT:
            return ErrorCode.invalid_txn_state
        if answer != TxnError.NONE:
            # TxnOffsetCommit never knew PRODUCER_FENCED: a fenced producer gets INVALID_PRODUCER_EPOCH.
            return _code(answer, api_version=0)
        try:
            verdict = await self._groups.commit_transactional_offsets(
                body.group_id,
                body.producer_id,
                body.producer_epoch,
                getattr(body, "member_id", ""),
                getattr(body, "generation_id", -1),
                offsets,
            )
        except RaybrokerError as exc:
            return coordinator_error_code(exc)
        return group_error_code(verdict)


class WriteTxnMarkersHandler(GuardedHandler[TransactionView]):
    """Answers WriteTxnMarkers (see the module docstring): each marker written on each partition's leader."""

    async def __call__(self, request: Request) -> Any:
        allowed = allows_cluster(self._access, request.context, AclOperation.CLUSTER_ACTION)
        results = []
        for entry in request.body.markers:
            result = ControlRecordType.COMMIT if entry.transaction_result else ControlRecordType.ABORT
            marker = TransactionMarker(entry.producer_id, entry.producer_epoch, entry.coordinator_epoch, result)
            topics = []
            for topic in entry.topics:
                partitions = []
                for partition in topic.partition_indexes:
                    code = ErrorCode.cluster_authorization_failed
                    if allowed:
                        code = await self._write(topic.name, partition, marker)
                    partitions.append({"partition_index": partition, "error_code": code})
                topics.append({"name": topic.name, "partitions": partitions})
            results.append({"producer_id": entry.producer_id, "topics": topics})
        return build(response_schema(WRITE_TXN_MARKERS_KEY, request.api_version), {"markers": results})

    async def _write(self, topic: str, partition: int, marker: TransactionMarker) -> ErrorCode:
        try:
            await self._view.write_marker(topic, partition, marker)
        except RaybrokerError as exc:
            return error_code(exc)
        return ErrorCode.none


class DescribeTransactionsHandler(GuardedHandler[TransactionView]):
    """Answers DescribeTransactions (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        states = [
            await self._describe(request, transactional_id) for transactional_id in request.body.transactional_ids
        ]
        return build(
            response_schema(DESCRIBE_TRANSACTIONS_KEY, request.api_version),
            {"throttle_time": 0, "transaction_states": states},
        )

    async def _describe(self, request: Request, transactional_id: str) -> dict[str, Any]:
        empty = {
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout": 0,
            "transaction_start_time": 0,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        context = request.context
        if not transactional_id:
            return {**empty, "error_code": ErrorCode.invalid_request}
        if not allows(self._access, context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return {**empty, "error_code": ErrorCode.transactional_id_authorization_failed}
        try:
            found = await self._view.describe(transactional_id)
        except RaybrokerError as exc:
            return {**empty, "error_code": coordinator_error_code(exc)}
        if found is None:
            return {**empty, "error_code": ErrorCode.transactional_id_not_found}
        visible = authorized_names(
            self._access, context, AclOperation.DESCRIBE, ResourceType.TOPIC, (topic for topic, _ in found.partitions)
        )
        by_topic: dict[str, list[int]] = {}
        for topic, partition in found.partitions:
            if topic in visible:
                by_topic.setdefault(topic, []).append(partition)
        return {
            "error_code": ErrorCode.none,
            "transactional_id": transactional_id,
            "transaction_state": found.state,
            "transaction_timeout": found.timeout_ms,
            "transaction_start_time": found.start_ms,
            "producer_id": found.producer_id,
            "producer_epoch": found.producer_epoch,
            "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
        }


class ListTransactionsHandler(GuardedHandler[TransactionView]):
    """Answers ListTransactions (see the module docstring)."""

    async def __call__(self, request: Request) -> Any:
        body = request.body
        response_type = response_schema(LIST_TRANSACTIONS_KEY, request.api_version)
        unknown = [name for name in body.state_filters if TransactionState.from_kafka_name(name) is None]
        known = [name for name in body.state_filters if name not in unknown]
        listed: list[TransactionDescription] = []
        code = ErrorCode.none
        if not body.state_filters or known:
            try:
                listed = await self._view.list_transactions(
                    known, body.producer_id_filters, getattr(body, "duration_filter", -1)
                )
            except RaybrokerError as exc:
                code = coordinator_error_code(exc)
        visible = authorized_names(
            self._access,
            request.context,
            AclOperation.DESCRIBE,
            ResourceType.TRANSACTIONAL_ID,
            (found.transactional_id for found in listed),
        )
        return build(
            response_type,
            {
                "throttle_time": 0,
                "error_code": code,
                "unknown_state_filters": unknown,
                "transaction_states": [
                    {
                        "transactional_id": found.transactional_id,
                        "producer_id": found.producer_id,
                        "transaction_state": found.state,
                    }
                    for found in listed
                    if found.transactional_id in visible
                ],
            },
        )


class DescribeProducersHandler(GuardedHandler[BrokerView]):
    """Answers DescribeProducers (see the module docstring): each partition leader's producers and the start offset
    of each one's open transaction, what kafka-transactions.sh's `find-hanging` and `abort` read."""

    async def __call__(self, request: Request) -> Any:
        topics = request.body.topics
        readable = authorized_names(
            self._access, request.context, AclOperation.READ, ResourceType.TOPIC, (topic.name for topic in topics)
        )
        try:
            counts = {name: info.partition_count for name, info in (await self._view.topics()).items()}
        except RaybrokerError as exc:
            counts, failure = {}, error_code(exc)
        else:
            failure = ErrorCode.unknown_topic_or_partition
        answers = []
        for topic in topics:
            partitions = []
            for partition in topic.partition_indexes:
                if not topic.name:
                    found = _no_producers(partition, ErrorCode.invalid_topic_exception)
                elif topic.name not in readable:
                    found = _no_producers(partition, ErrorCode.topic_authorization_failed)
                elif not 0 <= partition < counts.get(topic.name, 0):
                    found = _no_producers(partition, failure)
                else:
                    found = await self._describe(topic.name, partition)
                partitions.append(found)
            answers.append({"name": topic.name, "partitions": partitions})
        return build(
            response_schema(DESCRIBE_PRODUCERS_KEY, request.api_version), {"throttle_time": 0, "topics": answers}
        )

    async def _describe(self, topic: str, partition: int) -> dict[str, Any]:
        try:
            producers = await self._view.describe_producers(topic, partition)
        except RaybrokerError as exc:
            return _no_producers(partition, error_code(exc))
        return {
            "partition_index": partition,
            "error_code": ErrorCode.none,
            "active_producers": [
                {
                    "producer_id": producer.producer_id,
                    "producer_epoch": producer.producer_epoch,
                    "last_sequence": producer.last_sequence,
                    "last_timestamp": producer.last_timestamp,
                    "coordinator_epoch": producer.coordinator_epoch,
                    "current_txn_start_offset": producer.current_txn_start_offset,
                }
                for producer in producers
            ],
        }


def _no_producers(partition: int, code: ErrorCode) -> dict[str, Any]:
    return {"partition_index": partition, "error_code": code, "active_producers": []}

"""InitProducerId (key 22): an idempotent producer's id, unique in the cluster, with epoch 0; or a transactional
producer's id and epoch from the transaction coordinator.

Ids come from the controller, which hands them out durably (the same allocator raybroker's Python producer uses),
so two producers never share one, whichever listener they asked. Every idempotent request gets a fresh id: a client
that names its current id and epoch (v3+, after its sequence state was lost) continues under the new id, as
raybroker's Python producer does, rather than under a bumped epoch, which would need a registry of each id's epoch.
A request with a `transactional_id` goes to the transaction coordinator (`actors.core.transactions`), which bumps
the id's epoch (fencing an older producer of the same id, aborting its open transaction) and checks
`transaction_timeout_ms` against `transaction.max.timeout.ms` (INVALID_TRANSACTION_TIMEOUT, 50); PRODUCER_FENCED
(90) is answered to v4+ only, INVALID_PRODUCER_EPOCH (47) to older versions. A request naming a producer id without
its epoch, or an epoch without an id, is INVALID_REQUEST (42), as Kafka's `KafkaApis` answers it.

Authorization, as Kafka's: a transactional id needs WRITE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53,
before the refusal above); an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(any topic: the producer's id is not tied to one), else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from actors.core.security.acl_bindings import AclOperation, ResourceType
from cluster.protocol.error_codes import coordinator_error_code, error_code, txn_error_code
from cluster.protocol.framing import Request, response_schema
from cluster.protocol.handlers.authorization import GuardedHandler, allows, allows_any, allows_cluster
from cluster.protocol.handlers.transactions import timeout_ms
from cluster.protocol.messages import build
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerView
from cluster.protocol.views.transaction_view import TransactionView
from storage.errors import RaybrokerError
from storage.records.layout import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

INIT_PRODUCER_ID_KEY = 22
FIRST_EPOCH = 0
# InitProducerId answered PRODUCER_FENCED from v4 (KafkaApis), INVALID_PRODUCER_EPOCH before.
FIRST_PRODUCER_FENCED_VERSION = 4


class InitProducerIdHandler(GuardedHandler[BrokerView]):
    """Answers InitProducerId (see the module docstring)."""

    def __init__(self, view: BrokerView, transactions: TransactionView, access: AccessControl | None = None) -> None:
        super().__init__(view, access)
        self._transactions = transactions

    async def __call__(self, request: Request) -> Any:
        response_type = response_schema(INIT_PRODUCER_ID_KEY, request.api_version)
        failed = {"throttle_time": 0, "producer_id": NO_PRODUCER_ID, "producer_epoch": NO_PRODUCER_EPOCH}
        context = request.context
        body = request.body
        transactional_id = body.transactional_id
        named = (getattr(body, "producer_id", NO_PRODUCER_ID), getattr(body, "producer_epoch", NO_PRODUCER_EPOCH))
        if transactional_id is not None:
            if not allows(self._access, context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
                return build(response_type, {**failed, "error_code": ErrorCode.transactional_id_authorization_failed})
            if _half_named(*named):
                return build(response_type, {**failed, "error_code": ErrorCode.invalid_request})
            try:
                answer = await self._transactions.init_producer_id(
                    transactional_id, timeout_ms(body.transaction_timeout), *named
                )
            except RaybrokerError as exc:
                return build(response_type, {**failed, "error_code": coordinator_error_code(exc)})
            code = txn_error_code(answer.error, producer_fenced=request.api_version >= FIRST_PRODUCER_FENCED_VERSION)
            return build(
                response_type,
                {
                    "throttle_time": 0,
                    "error_code": code,
                    "producer_id": answer.producer_id,
                    "producer_epoch": answer.producer_epoch,
                },
            )
        if not (
            allows_cluster(self._access, context, AclOperation.IDEMPOTENT_WRITE)
            or allows_any(self._access, context, AclOperation.WRITE, ResourceType.TOPIC)
        ):
            return build(response_type, {**failed, "error_code": ErrorCode.cluster_authorization_failed})
        if _half_named(*named):
            return build(response_type, {**failed, "error_code": ErrorCode.invalid_request})
        try:
            producer_id = await self._view.allocate_producer_id()
        except RaybrokerError as exc:
            return build(response_type, {**failed, "error_code": error_code(exc)})
        return build(
            response_type,
            {
                "throttle_time": 0,
                "error_code": ErrorCode.none,
                "producer_id": producer_id,
                "producer_epoch": FIRST_EPOCH,
            },
        )


def _half_named(producer_id: int, producer_epoch: int) -> bool:
    """A v3+ request naming a producer id without its epoch, or an epoch without an id (INVALID_REQUEST)."""
    return (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH)

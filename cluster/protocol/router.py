"""From a request frame's payload to its response frame: decode, dispatch to the API's handler, encode.

This is the seam between the socket layer (`cluster.protocol.server`, which only moves frames) and the handlers
(`cluster.protocol.handlers`, one module per API family, which only see decoded requests), in the place Kafka's
`RequestChannel` holds between its `SocketServer` and its API handlers. `SERVED` is the one table of the APIs and
versions this server implements; ApiVersions advertises exactly it, and the decoder refuses anything outside it.

Version floors are those of kio's schemas (Kafka 4's minimum versions: Produce v3, Fetch v4, ListOffsets v1).
Ceilings are what the handlers implement, as Apache Kafka 4.0 serves them: Fetch v17 (v13 names topics by topic id,
v7+ keeps fetch sessions; v18 is post-4.0 and for KRaft followers); Produce v11 (v11 answers TRANSACTION_ABORTABLE;
v12 is TV2, which adds the partition to the transaction itself, and Produce v13 names topics by id, post-4.0);
ListOffsets v9 (v8's -4, earliest local offset, is the earliest offset without tiered storage; v9's -5, latest
tiered offset, answers offset -1; v10 only lets a broker answer later, for tiered storage); Metadata v12 (the last
without a top-level error; v10+ carries topic ids, v12 may name topics by id); InitProducerId v5 is the last before
two-phase-commit transactions (v6). The admin APIs (CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
AlterConfigs, IncrementalAlterConfigs, DeleteRecords, DescribeCluster, OffsetForLeaderEpoch, ElectLeaders) are served
from kio's floor to its ceiling: their later versions only add fields the handlers fill (CreateTopics v7 answers the
topic id, DeleteTopics v6 deletes by topic id, `is_fenced` is false). So are the security APIs:
DescribeAcls (29), CreateAcls (30), DeleteAcls (31) v1-3 (v0 could not name PREFIXED patterns, and Kafka 4 dropped
it), DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) v0, and the client quota APIs
DescribeClientQuotas (48) and AlterClientQuotas (49) v0-1 (v1 is v0 made flexible), and UpdateFeatures (57) v0-2
(v2 answers no per-feature results). DescribeLogDirs (35) is served v1-4
(kio has no v0; v4 adds the file system's bytes, v5 is post-4.0), AlterReplicaLogDirs (34) v1-2 (v0 is
deprecated). DescribeTopicPartitions (75) v0, which Kafka 3.7+'s Admin client prefers to Metadata for
`describeTopics`. Share groups (KIP-932) as Kafka 4.2 serves them: ShareGroupHeartbeat (76) v1, ShareGroupDescribe
(77) v1, ShareFetch (78) v1-2 and ShareAcknowledge (79) v1-2 (v0 was 4.0's early access); their offsets' admin APIs
DescribeShareGroupOffsets (90) v0-1, AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0.
The transaction APIs serve the TV1 protocol every client speaks to a broker finalizing no `transaction.version` feature,
and the brokers' verification: AddPartitionsToTxn v0-3 (the client form) and v4-5 (KIP-890's broker form,
`verify_only`), AddOffsetsToTxn v0-4, EndTxn v0-5 and TxnOffsetCommit v0-5 (v5 of each is transactions v2, which
Kafka 4 clients send once the cluster finalizes `transaction.version` 2), WriteTxnMarkers v1
(Kafka 4 dropped v0; v2 is post-4.1), DescribeTransactions v0, ListTransactions v0-1 (v2's id pattern is post-4.0) and
DescribeProducers v0.
The group APIs are served from kio's floor to its ceiling: FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete, and OffsetCommit and OffsetFetch up to v10, which
name topics by topic id (KIP-848, stable in Kafka 4.2) where v9 named them. Clients use the highest
version both sides serve; `docs/clients.md` lists the versions the tested clients were measured sending.

Every handler that guards a resource gets the listener's `AccessControl` and asks it before it acts
(`cluster.protocol.handlers.authorization`); ApiVersions, SaslHandshake and SaslAuthenticate need no permission.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any

from kio.index import load_request_schema

from actors.core.shares.share_sessions import ShareSessions
from actors.metrics.recorder import NO_METRICS, BrokerMetrics
from cluster.protocol.config_entries import ConfigDescriber
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.error_codes import AuthenticationFailedError, ProtocolError, SaslFailure
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.fetch_session import FetchSessionCache
from cluster.protocol.framing import (
    API_VERSIONS_KEY,
    FIXED_HEADER,
    ApiRange,
    Request,
    SplicedFrame,
    decode_request,
    encode_response,
)
from cluster.protocol.handlers.acls import (
    CREATE_ACLS_KEY,
    DELETE_ACLS_KEY,
    DESCRIBE_ACLS_KEY,
    CreateAclsHandler,
    DeleteAclsHandler,
    DescribeAclsHandler,
)
from cluster.protocol.handlers.alter_replica_log_dirs import ALTER_REPLICA_LOG_DIRS_KEY, AlterReplicaLogDirsHandler
from cluster.protocol.handlers.api_versions import ApiVersionsHandler
from cluster.protocol.handlers.cluster import DESCRIBE_CLUSTER_KEY, DescribeClusterHandler
from cluster.protocol.handlers.configs import (
    ALTER_CONFIGS_KEY,
    DESCRIBE_CONFIGS_KEY,
    INCREMENTAL_ALTER_CONFIGS_KEY,
    LIST_CONFIG_RESOURCES_KEY,
    AlterConfigsHandler,
    DescribeConfigsHandler,
    ListConfigResourcesHandler,
)
from cluster.protocol.handlers.consumer_group_apis import (
    CONSUMER_GROUP_DESCRIBE_KEY,
    CONSUMER_GROUP_HEARTBEAT_KEY,
    ConsumerGroupDescribeHandler,
    ConsumerGroupHeartbeatHandler,
)
from cluster.protocol.handlers.delete_records import DELETE_RECORDS_KEY, DeleteRecordsHandler
from cluster.protocol.handlers.describe_log_dirs import DESCRIBE_LOG_DIRS_KEY, DescribeLogDirsHandler
from cluster.protocol.handlers.describe_topic_partitions import (
    DESCRIBE_TOPIC_PARTITIONS_KEY,
    DescribeTopicPartitionsHandler,
)
from cluster.protocol.handlers.elect_leaders import ELECT_LEADERS_KEY, ElectLeadersHandler
from cluster.protocol.handlers.features import UPDATE_FEATURES_KEY, UpdateFeaturesHandler
from cluster.protocol.handlers.fetch import FETCH_KEY, FetchHandler
from cluster.protocol.handlers.find_coordinator import FIND_COORDINATOR_KEY, FindCoordinatorHandler
from cluster.protocol.handlers.group_admin import (
    DELETE_GROUPS_KEY,
    DESCRIBE_GROUPS_KEY,
    LIST_GROUPS_KEY,
    DeleteGroupsHandler,
    DescribeGroupsHandler,
    ListGroupsHandler,
)
from cluster.protocol.handlers.group_offsets import (
    OFFSET_COMMIT_KEY,
    OFFSET_FETCH_KEY,
    OffsetCommitHandler,
    OffsetFetchHandler,
)
from cluster.protocol.handlers.groups import (
    HEARTBEAT_KEY,
    JOIN_GROUP_KEY,
    LEAVE_GROUP_KEY,
    SYNC_GROUP_KEY,
    HeartbeatHandler,
    JoinGroupHandler,
    LeaveGroupHandler,
    SyncGroupHandler,
)
from cluster.protocol.handlers.leader_epoch import OFFSET_FOR_LEADER_EPOCH_KEY, OffsetForLeaderEpochHandler
from cluster.protocol.handlers.list_offsets import LIST_OFFSETS_KEY, ListOffsetsHandler
from cluster.protocol.handlers.metadata import METADATA_KEY, MetadataHandler
from cluster.protocol.handlers.offset_delete import OFFSET_DELETE_KEY, OffsetDeleteHandler
from cluster.protocol.handlers.produce import PRODUCE_KEY, ProduceHandler
from cluster.protocol.handlers.producer_id import INIT_PRODUCER_ID_KEY, InitProducerIdHandler
from cluster.protocol.handlers.quota_admin import (
    ALTER_CLIENT_QUOTAS_KEY,
    DESCRIBE_CLIENT_QUOTAS_KEY,
    AlterClientQuotasHandler,
    DescribeClientQuotasHandler,
)
from cluster.protocol.handlers.reassignments import (
    ALTER_PARTITION_REASSIGNMENTS_KEY,
    LIST_PARTITION_REASSIGNMENTS_KEY,
    AlterPartitionReassignmentsHandler,
    ListPartitionReassignmentsHandler,
)
from cluster.protocol.handlers.sasl_handlers import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SaslAuthenticateHandler,
    SaslHandshakeHandler,
)
from cluster.protocol.handlers.scram_credentials import (
    ALTER_USER_SCRAM_CREDENTIALS_KEY,
    DESCRIBE_USER_SCRAM_CREDENTIALS_KEY,
    AlterUserScramCredentialsHandler,
    DescribeUserScramCredentialsHandler,
)
from cluster.protocol.handlers.share_fetch import (
    SHARE_ACKNOWLEDGE_KEY,
    SHARE_FETCH_KEY,
    ShareAcknowledgeHandler,
    ShareFetchHandler,
    release_disconnected,
)
from cluster.protocol.handlers.share_group_apis import (
    SHARE_GROUP_DESCRIBE_KEY,
    SHARE_GROUP_HEARTBEAT_KEY,
    ShareGroupDescribeHandler,
    ShareGroupHeartbeatHandler,
)
from cluster.protocol.handlers.share_group_offsets import (
    ALTER_SHARE_GROUP_OFFSETS_KEY,
    DELETE_SHARE_GROUP_OFFSETS_KEY,
    DESCRIBE_SHARE_GROUP_OFFSETS_KEY,
    AlterShareGroupOffsetsHandler,
    DeleteShareGroupOffsetsHandler,
    DescribeShareGroupOffsetsHandler,
)
from cluster.protocol.handlers.topics import (
    CREATE_PARTITIONS_KEY,
    CREATE_TOPICS_KEY,
    DELETE_TOPICS_KEY,
    CreatePartitionsHandler,
    CreateTopicsHandler,
    DeleteTopicsHandler,
)
from cluster.protocol.handlers.transactions import (
    ADD_OFFSETS_TO_TXN_KEY,
    ADD_PARTITIONS_TO_TXN_KEY,
    DESCRIBE_PRODUCERS_KEY,
    DESCRIBE_TRANSACTIONS_KEY,
    END_TXN_KEY,
    LIST_TRANSACTIONS_KEY,
    TXN_OFFSET_COMMIT_KEY,
    WRITE_TXN_MARKERS_KEY,
    AddOffsetsToTxnHandler,
    AddPartitionsToTxnHandler,
    DescribeProducersHandler,
    DescribeTransactionsHandler,
    EndTxnHandler,
    ListTransactionsHandler,
    TxnOffsetCommitHandler,
    WriteTxnMarkersHandler,
)
from cluster.protocol.messages import milliseconds
from cluster.protocol.quota_enforcer import QuotaEnforcer
from cluster.protocol.request_time import TimedCoroutine
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint, BrokerView
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.clock import SYSTEM_CLOCK
from storage.config.broker_config import BrokerConfig

SERVED: Mapping[int, ApiRange] = MappingProxyType(
    {
        PRODUCE_KEY: ApiRange(3, 13),
        FETCH_KEY: ApiRange(4, 17),
        LIST_OFFSETS_KEY: ApiRange(1, 9),
        METADATA_KEY: ApiRange(0, 12),
        DESCRIBE_TOPIC_PARTITIONS_KEY: ApiRange(0, 0),
        API_VERSIONS_KEY: ApiRange(0, 4),
        INIT_PRODUCER_ID_KEY: ApiRange(0, 5),
        FIND_COORDINATOR_KEY: ApiRange(0, 6),
        JOIN_GROUP_KEY: ApiRange(0, 9),
        SYNC_GROUP_KEY: ApiRange(0, 5),
        HEARTBEAT_KEY: ApiRange(0, 4),
        LEAVE_GROUP_KEY: ApiRange(0, 5),
        OFFSET_COMMIT_KEY: ApiRange(2, 10),
        OFFSET_FETCH_KEY: ApiRange(1, 10),
        LIST_GROUPS_KEY: ApiRange(0, 5),
        DESCRIBE_GROUPS_KEY: ApiRange(0, 6),
        DELETE_GROUPS_KEY: ApiRange(0, 2),
        OFFSET_DELETE_KEY: ApiRange(0, 0),
        ELECT_LEADERS_KEY: ApiRange(0, 2),
        ALTER_REPLICA_LOG_DIRS_KEY: ApiRange(1, 2),
        DESCRIBE_LOG_DIRS_KEY: ApiRange(1, 4),
        ALTER_PARTITION_REASSIGNMENTS_KEY: ApiRange(0, 1),
        LIST_PARTITION_REASSIGNMENTS_KEY: ApiRange(0, 0),
        CREATE_TOPICS_KEY: ApiRange(2, 7),
        DELETE_TOPICS_KEY: ApiRange(1, 6),
        CREATE_PARTITIONS_KEY: ApiRange(0, 3),
        DESCRIBE_CONFIGS_KEY: ApiRange(1, 4),
        ALTER_CONFIGS_KEY: ApiRange(0, 2),
        INCREMENTAL_ALTER_CONFIGS_KEY: ApiRange(0, 1),
        LIST_CONFIG_RESOURCES_KEY: ApiRange(0, 1),
        DELETE_RECORDS_KEY: ApiRange(0, 2),
        DESCRIBE_CLUSTER_KEY: ApiRange(0, 2),
        OFFSET_FOR_LEADER_EPOCH_KEY: ApiRange(2, 4),
        SASL_HANDSHAKE_KEY: ApiRange(1, 1),
        SASL_AUTHENTICATE_KEY: ApiRange(0, 2),
        DESCRIBE_ACLS_KEY: ApiRange(1, 3),
        DESCRIBE_CLIENT_QUOTAS_KEY: ApiRange(0, 1),
        ALTER_CLIENT_QUOTAS_KEY: ApiRange(0, 1),
        UPDATE_FEATURES_KEY: ApiRange(0, 2),
        CREATE_ACLS_KEY: ApiRange(1, 3),
        DELETE_ACLS_KEY: ApiRange(1, 3),
        DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: ApiRange(0, 0),
        ALTER_USER_SCRAM_CREDENTIALS_KEY: ApiRange(0, 0),
        ADD_PARTITIONS_TO_TXN_KEY: ApiRange(0, 5),
        ADD_OFFSETS_TO_TXN_KEY: ApiRange(0, 4),
        END_TXN_KEY: ApiRange(0, 5),
        WRITE_TXN_MARKERS_KEY: ApiRange(1, 1),
        TXN_OFFSET_COMMIT_KEY: ApiRange(0, 5),
        DESCRIBE_PRODUCERS_KEY: ApiRange(0, 0),
        DESCRIBE_TRANSACTIONS_KEY: ApiRange(0, 0),
        LIST_TRANSACTIONS_KEY: ApiRange(0, 1),
        CONSUMER_GROUP_HEARTBEAT_KEY: ApiRange(0, 1),
        CONSUMER_GROUP_DESCRIBE_KEY: ApiRange(0, 1),
        SHARE_GROUP_HEARTBEAT_KEY: ApiRange(1, 1),
        SHARE_GROUP_DESCRIBE_KEY: ApiRange(1, 1),
        SHARE_FETCH_KEY: ApiRange(1, 2),
        SHARE_ACKNOWLEDGE_KEY: ApiRange(1, 2),
        DESCRIBE_SHARE_GROUP_OFFSETS_KEY: ApiRange(0, 1),
        ALTER_SHARE_GROUP_OFFSETS_KEY: ApiRange(0, 0),
        DELETE_SHARE_GROUP_OFFSETS_KEY: ApiRange(0, 0),
    }
)
# Served only while `group.coordinator.rebalance.protocols` lists the consumer protocol.
CONSUMER_PROTOCOL_KEYS = frozenset({CONSUMER_GROUP_HEARTBEAT_KEY, CONSUMER_GROUP_DESCRIBE_KEY})
# What a connection of a SASL listener may send before it has authenticated.
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})

# The requests a connection may have in flight together (see `Router.overlaps`).
OVERLAPPING = frozenset({PRODUCE_KEY, FETCH_KEY, LIST_OFFSETS_KEY})

Handler = Callable[[Request], Awaitable[Any | None]]


@functools.cache
def _api_names() -> dict[int, str]:
    """Kafka's name of each served API (`ApiKeys.name`: `Produce`, `OffsetForLeaderEpoch`, ...), from kio's classes."""
    return {
        key: load_request_schema(key, served.max_version).__name__.removesuffix("Request")
        for key, served in SERVED.items()
    }


def request_name(payload: bytes) -> tuple[str, int] | None:
    """A request payload's API name and version, as Kafka's request metrics label them; None for a payload too
    short to hold a header, or of an API this server does not serve."""
    if len(payload) < FIXED_HEADER.size:
        return None
    api_key, api_version, _ = FIXED_HEADER.unpack_from(payload)
    name = _api_names().get(api_key)
    return None if name is None else (name, api_version)


class Router:
    """Decodes a request, runs its API's handler, and encodes the answer (None when the API sends none, as
    Produce with acks=0). Raises `ProtocolError` for a payload that is no request it serves."""

    def __init__(
        self,
        view: BrokerView,
        endpoint: BrokerEndpoint,
        *,
        broker_config: BrokerConfig,
        static_broker_keys: Collection[str],
        groups: GroupView,
        transactions: TransactionView,
        security: SecurityView,
        access: AccessControl,
        quotas: QuotaEnforcer | None = None,
        features: FeatureCache | None = None,
        metrics: BrokerMetrics = NO_METRICS,
    ) -> None:
        """`broker_config` is the broker's config and `static_broker_keys` the keys its properties set, for the
        admin APIs (defaults, sources, `delete.topic.enable`, `num.partitions`) and Metadata
        (`auto.create.topics.enable`); `security` holds the SCRAM credentials and ACLs, `access` answers the
        handlers' authorization questions, `quotas` (by default a copy of `security`'s) throttles Produce, Fetch
        and, with `request_percentage`, every request; `features` (by default a copy of `security`'s) is what
        ApiVersions tells of the cluster's features; `metrics` counts the bytes Fetch answers carry. Fetch sessions
        are kept here, `max.incremental.fetch.session.cache.slots` of them: one router serves a listener
        process."""
        describer = ConfigDescriber(broker_config, static_broker_keys)
        quotas = self._quotas = quotas if quotas is not None else QuotaEnforcer(security)
        features = features if features is not None else FeatureCache(security)
        node_id = endpoint.node_id
        self._served = MappingProxyType(
            {
                key: served
                for key, served in SERVED.items()
                if key not in CONSUMER_PROTOCOL_KEYS or broker_config.group_protocol_config.consumer_protocol_enabled
            }
        )
        num_partitions = broker_config.num_partitions
        self._view = view
        share_sessions = self._share_sessions = ShareSessions()
        self._handlers: dict[int, Handler] = {
            PRODUCE_KEY: ProduceHandler(view, transactions, access, quotas),
            FETCH_KEY: FetchHandler(
                view,
                access,
                metrics,
                FetchSessionCache(broker_config.max_incremental_fetch_session_cache_slots, SYSTEM_CLOCK),
                quotas,
            ),
            LIST_OFFSETS_KEY: ListOffsetsHandler(view, access),
            METADATA_KEY: MetadataHandler(
                view, endpoint, broker_config.auto_create_topics_enable, num_partitions, access
            ),
            DESCRIBE_TOPIC_PARTITIONS_KEY: DescribeTopicPartitionsHandler(view, endpoint, broker_config, access),
            API_VERSIONS_KEY: ApiVersionsHandler(self._served, features),
            INIT_PRODUCER_ID_KEY: InitProducerIdHandler(view, transactions, access),
            FIND_COORDINATOR_KEY: FindCoordinatorHandler(endpoint, access),
            JOIN_GROUP_KEY: JoinGroupHandler(groups, access),
            SYNC_GROUP_KEY: SyncGroupHandler(groups, access),
            HEARTBEAT_KEY: HeartbeatHandler(groups, access),
            LEAVE_GROUP_KEY: LeaveGroupHandler(groups, access),
            OFFSET_COMMIT_KEY: OffsetCommitHandler(view, groups, access),
            OFFSET_FETCH_KEY: OffsetFetchHandler(view, groups, access),
            LIST_GROUPS_KEY: ListGroupsHandler(groups, access),
            DESCRIBE_GROUPS_KEY: DescribeGroupsHandler(groups, access),
            DELETE_GROUPS_KEY: DeleteGroupsHandler(groups, view, access),
            OFFSET_DELETE_KEY: OffsetDeleteHandler(view, groups, access),
            ELECT_LEADERS_KEY: ElectLeadersHandler(view, access),
            ALTER_REPLICA_LOG_DIRS_KEY: AlterReplicaLogDirsHandler(view, access),
            DESCRIBE_LOG_DIRS_KEY: DescribeLogDirsHandler(view, access),
            ALTER_PARTITION_REASSIGNMENTS_KEY: AlterPartitionReassignmentsHandler(view, access),
            LIST_PARTITION_REASSIGNMENTS_KEY: ListPartitionReassignmentsHandler(view, access),
            CREATE_TOPICS_KEY: CreateTopicsHandler(view, describer, num_partitions, access, quotas),
            DELETE_TOPICS_KEY: DeleteTopicsHandler(view, broker_config.delete_topic_enable, access, quotas),
            CREATE_PARTITIONS_KEY: CreatePartitionsHandler(view, access, quotas),
            DESCRIBE_CONFIGS_KEY: DescribeConfigsHandler(view, describer, node_id, access),
            ALTER_CONFIGS_KEY: AlterConfigsHandler(
                view, node_id, broker_config.log_config, incremental=False, access=access
            ),
            INCREMENTAL_ALTER_CONFIGS_KEY: AlterConfigsHandler(
                view, node_id, broker_config.log_config, incremental=True, access=access
            ),
            LIST_CONFIG_RESOURCES_KEY: ListConfigResourcesHandler(view, access),
            DELETE_RECORDS_KEY: DeleteRecordsHandler(view, access),
            DESCRIBE_CLUSTER_KEY: DescribeClusterHandler(view, endpoint, access),
            OFFSET_FOR_LEADER_EPOCH_KEY: OffsetForLeaderEpochHandler(view, access),
            SASL_HANDSHAKE_KEY: SaslHandshakeHandler(
                broker_config.security_config.sasl_enabled_mechanisms, security.scram_credential
            ),
            SASL_AUTHENTICATE_KEY: SaslAuthenticateHandler(),
            DESCRIBE_ACLS_KEY: DescribeAclsHandler(security, access),
            DESCRIBE_CLIENT_QUOTAS_KEY: DescribeClientQuotasHandler(security, access),
            ALTER_CLIENT_QUOTAS_KEY: AlterClientQuotasHandler(security, quotas, access),
            UPDATE_FEATURES_KEY: UpdateFeaturesHandler(security, features, node_id, access),
            CREATE_ACLS_KEY: CreateAclsHandler(security, access),
            DELETE_ACLS_KEY: DeleteAclsHandler(security, access),
            DESCRIBE_USER_SCRAM_CREDENTIALS_KEY: DescribeUserScramCredentialsHandler(security, access),
            ALTER_USER_SCRAM_CREDENTIALS_KEY: AlterUserScramCredentialsHandler(security, access),
            ADD_PARTITIONS_TO_TXN_KEY: AddPartitionsToTxnHandler(view, transactions, access),
            ADD_OFFSETS_TO_TXN_KEY: AddOffsetsToTxnHandler(transactions, groups, access),
            END_TXN_KEY: EndTxnHandler(transactions, access),
            WRITE_TXN_MARKERS_KEY: WriteTxnMarkersHandler(transactions, access),
            TXN_OFFSET_COMMIT_KEY: TxnOffsetCommitHandler(view, groups, transactions, access),
            DESCRIBE_PRODUCERS_KEY: DescribeProducersHandler(view, access),
            DESCRIBE_TRANSACTIONS_KEY: DescribeTransactionsHandler(transactions, access),
            LIST_TRANSACTIONS_KEY: ListTransactionsHandler(transactions, access),
            CONSUMER_GROUP_HEARTBEAT_KEY: ConsumerGroupHeartbeatHandler(groups, features, access),
            CONSUMER_GROUP_DESCRIBE_KEY: ConsumerGroupDescribeHandler(groups, features, access),
            SHARE_GROUP_HEARTBEAT_KEY: ShareGroupHeartbeatHandler(groups, access, features),
            SHARE_GROUP_DESCRIBE_KEY: ShareGroupDescribeHandler(groups, view, access, features),
            SHARE_FETCH_KEY: ShareFetchHandler(view, groups, share_sessions, access, metrics, features),
            SHARE_ACKNOWLEDGE_KEY: ShareAcknowledgeHandler(view, groups, share_sessions, access, metrics, features),
            DESCRIBE_SHARE_GROUP_OFFSETS_KEY: DescribeShareGroupOffsetsHandler(view, access, features),
            ALTER_SHARE_GROUP_OFFSETS_KEY: AlterShareGroupOffsetsHandler(view, groups, access, features),
            DELETE_SHARE_GROUP_OFFSETS_KEY: DeleteShareGroupOffsetsHandler(view, groups, access, features),
        }
        for key in SERVED.keys() - self._served.keys():
            del self._handlers[key]
        assert self._handlers.keys() == self._served.keys(), "every served API has exactly one handler"

    def close(self) -> None:
        """The listener stops: its fetch sessions' gauges are no longer reported."""
        fetch = self._handlers[FETCH_KEY]
        assert isinstance(fetch, FetchHandler)
        fetch.close()

    async def disconnected(self, context: ConnectionContext) -> None:
        """A client connection closed: the share sessions it opened end, their members' records released."""
        await release_disconnected(self._view, self._share_sessions, context.connection_id)

    @staticmethod
    def overlaps(payload: bytes) -> bool:
        """Whether the request may be handled while earlier requests of its connection still are: Produce, Fetch and
        ListOffsets, the requests clients pipeline (librdkafka resets each partition's offset with a ListOffsets of
        its own: thousands at a consumer's first contact with a topic); everything else runs alone."""
        return len(payload) >= FIXED_HEADER.size and FIXED_HEADER.unpack_from(payload)[0] in OVERLAPPING

    async def handle(self, payload: bytes, context: ConnectionContext) -> bytes | SplicedFrame | None:
        """The answer to one request of the connection `context` describes. Before a SASL connection has
        authenticated, any request but ApiVersions, SaslHandshake and SaslAuthenticate closes it (`ProtocolError`),
        as Kafka's broker closes it; a failed authentication raises `AuthenticationFailedError` with its answer."""
        decoding_ns = time.perf_counter_ns()
        request = decode_request(payload, self._served, context)
        decoding_ns = time.perf_counter_ns() - decoding_ns
        if not context.authenticated and request.api_key not in BEFORE_AUTHENTICATION:
            raise ProtocolError(f"api key {request.api_key} sent before SASL authentication completed")
        handling = self._handlers[request.api_key](request)
        timed = request.api_key not in BEFORE_AUTHENTICATION and self._quotas.limits_request_time
        try:
            if timed:
                timer: TimedCoroutine[Any] = TimedCoroutine(handling)
                response = await timer
                response = self._throttled(request, response, decoding_ns + timer.elapsed_ns)
            else:
                response = await handling
        except SaslFailure as failure:
            frame = encode_response(request.correlation_id, failure.response)
            assert isinstance(frame, bytes), "a SASL answer holds no file region"
            raise AuthenticationFailedError(failure.reason, frame) from None
        return None if response is None else encode_response(request.correlation_id, response)

    def _throttled(self, request: Request, response: Any, elapsed_ns: int) -> Any:
        """`response` with the throttle time a `request_percentage` quota gives the request's `elapsed_ns` of
        decoding and handling, if longer than the one it carries (Kafka answers the longer of its quotas' throttle
        times)."""
        throttle_ms = self._quotas.requested(request.context, request.client_id, elapsed_ns)
        if response is None or throttle_ms <= 0 or not hasattr(response, "throttle_time"):
            return response
        carried = response.throttle_time
        if throttle_ms <= milliseconds(carried):
            return response
        return dataclasses.replace(response, throttle_time=datetime.timedelta(milliseconds=throttle_ms))

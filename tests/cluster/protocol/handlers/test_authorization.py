"""Every handler's authorization, without sockets: each API allowed and refused with Kafka's exact code, and the
order Kafka keeps (a principal without DESCRIBE learns nothing of a topic, not even that it does not exist).

The access control is the listener's own (`AccessControl`, StandardAuthorizer semantics) over the controller's real
ACL store in the in-process broker's controller (`SecurityView.in_process`, its ACLs replaced for each check); requests
come from `User:alice` on 127.0.0.1, with no ACL applying meaning "refused" (`allow.everyone.if.no.acl.found=false`,
Kafka's default).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode

from actors.core.in_process_broker import InProcessBroker
from actors.core.security.acl_bindings import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from cluster.protocol.config_entries import ConfigDescriber
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.feature_cache import FeatureCache
from cluster.protocol.framing import Request, decode_response, encode_response
from cluster.protocol.handlers.authorization import AUTHORIZED_OPERATIONS_OMITTED
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
from cluster.protocol.handlers.produce import PRODUCE_KEY, ProduceHandler
from cluster.protocol.handlers.producer_id import INIT_PRODUCER_ID_KEY, InitProducerIdHandler
from cluster.protocol.handlers.topics import (
    CREATE_PARTITIONS_KEY,
    CREATE_TOPICS_KEY,
    DELETE_TOPICS_KEY,
    CreatePartitionsHandler,
    CreateTopicsHandler,
    DeleteTopicsHandler,
)
from cluster.protocol.messages import build
from cluster.protocol.router import SERVED
from cluster.protocol.security.access import AccessControl
from cluster.protocol.views.broker_view import BrokerEndpoint
from cluster.protocol.views.group_view import GroupView
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from cluster.protocol.views.transaction_view import TransactionView
from storage.config.broker_config import BrokerConfig
from storage.config.security_config import SecurityConfig
from tests.cluster.protocol.helpers import batch, commit_offsets, committed_offsets, leader_log, run

ALICE = "User:alice"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ENDPOINT = BrokerEndpoint(0, "127.0.0.1", 9092, (("PLAINTEXT", "127.0.0.1", 9092),))
DENIED_TOPIC = ErrorCode.topic_authorization_failed
DENIED_GROUP = ErrorCode.group_authorization_failed
DENIED_CLUSTER = ErrorCode.cluster_authorization_failed
# The last OffsetCommit and OffsetFetch version naming topics by name (v10 names them by topic id).
BY_NAME = 9


def acl(
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern: PatternType = PatternType.LITERAL,
    principal: str = ALICE,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, "*", operation, permission)


def on_topic(name: str, operation: AclOperation, **options: Any) -> AclBinding:
    return acl(ResourceType.TOPIC, name, operation, **options)


def on_group(name: str, operation: AclOperation, **options: Any) -> AclBinding:
    return acl(ResourceType.GROUP, name, operation, **options)


def on_cluster(operation: AclOperation, **options: Any) -> AclBinding:
    return acl(ResourceType.CLUSTER, CLUSTER_NAME, operation, **options)


def access_with(security: SecurityView, *bindings: AclBinding, authorizer: str = STANDARD_AUTHORIZER) -> AccessControl:
    """The listener's access control over exactly `bindings` (the controller's ACLs are replaced by them), loaded."""
    run(security.delete_acls([AclBindingFilter.ANY]))
    run(security.create_acls(list(bindings)))
    access = AccessControl(SecurityConfig.from_properties({"authorizer.class.name": authorizer}), security)
    run(access.refresh())
    return access


def ask(handler: Any, api_key: int, values: dict[str, Any], version: int | None = None) -> Any:
    """`handler`'s decoded answer to alice's request of `api_key` (its highest served version unless given)."""
    version = SERVED[api_key].max_version if version is None else version
    body = build(load_request_schema(api_key, version), values)
    context = ConnectionContext("PLAINTEXT", "PLAINTEXT", "127.0.0.1", ALICE)
    response = run(handler(Request(api_key, version, 1, "test", body, context)))
    return decode_response(encode_response(1, response)[4:], load_response_schema(api_key, version))[1]


def bits(*operations: AclOperation) -> int:
    return sum(1 << operation for operation in operations)


# Topics and partitions


def produce(view: InProcessBrokerView, access: AccessControl, *topics: str) -> dict[str, ErrorCode]:
    records = batch([(b"k", b"v", 1000)])
    # v12, the last naming topics by name: a principal without DESCRIBE learns nothing of a name.
    answer = ask(
        ProduceHandler(view, TransactionView.in_process(view.broker), access),
        PRODUCE_KEY,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": records}]} for name in topics],
        },
        12,
    )
    return {topic.name: topic.partition_responses[0].error_code for topic in answer.responses}


def test_produce_needs_write_on_the_topic_even_to_learn_it_does_not_exist(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    run(view.create_topic("paid", 1))
    run(view.create_topic("secret", 1))
    access = access_with(security, on_topic("paid", AclOperation.WRITE), on_topic("ghost", AclOperation.WRITE))
    assert produce(view, access, "paid", "secret", "nowhere", "ghost") == {
        "paid": ErrorCode.none,
        "secret": DENIED_TOPIC,
        "nowhere": DENIED_TOPIC,
        "ghost": ErrorCode.unknown_topic_or_partition,
    }
    assert leader_log(view, "secret", 0).log_end_offset == 0


def test_produce_allowed_by_a_prefixed_acl_and_refused_by_a_deny(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    run(view.create_topic("orders-eu", 1))
    run(view.create_topic("orders-us", 1))
    access = access_with(
        security,
        on_topic("orders-", AclOperation.WRITE, pattern=PatternType.PREFIXED),
        on_topic("orders-us", AclOperation.WRITE, permission=AclPermissionType.DENY),
    )
    assert produce(view, access, "orders-eu", "orders-us") == {"orders-eu": ErrorCode.none, "orders-us": DENIED_TOPIC}


def test_every_request_is_allowed_without_an_authorizer(view: InProcessBrokerView, security: SecurityView) -> None:
    run(view.create_topic("open", 1))
    assert produce(view, access_with(security, authorizer=""), "open") == {"open": ErrorCode.none}


def fetch_codes(
    view: InProcessBrokerView, access: AccessControl, *topics: str, version: int = 12
) -> dict[str, ErrorCode]:
    """Each topic's error code in alice's Fetch of partition 0 of `topics`: by name up to v12, by topic id from v13
    (every topic must then exist)."""
    names = {topic_id: name for topic_id, name in run(view.topic_names()).items() if name in topics}
    ids = {name: topic_id for topic_id, name in names.items()}
    partitions = [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]
    answer = ask(
        FetchHandler(view, access),
        FETCH_KEY,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "topics": [{"topic": name, "topic_id": ids.get(name), "partitions": partitions} for name in topics],
            "forgotten_topics_data": [],
        },
        version,
    )
    if version >= 13:
        return {names[topic.topic_id]: topic.partitions[0].error_code for topic in answer.responses}
    return {topic.topic: topic.partitions[0].error_code for topic in answer.responses}


def test_fetch_needs_read_on_the_topic(view: InProcessBrokerView, security: SecurityView) -> None:
    run(view.create_topic("public", 1))
    run(view.create_topic("private", 1))
    access = access_with(security, on_topic("public", AclOperation.READ), on_topic("private", AclOperation.DESCRIBE))
    assert fetch_codes(view, access, "public", "private", "nowhere") == {
        "public": ErrorCode.none,
        "private": DENIED_TOPIC,
        "nowhere": DENIED_TOPIC,
    }
    assert fetch_codes(view, access, "public", "private", version=SERVED[FETCH_KEY].max_version) == {
        "public": ErrorCode.none,
        "private": DENIED_TOPIC,
    }


def test_list_offsets_needs_describe_on_the_topic(view: InProcessBrokerView, security: SecurityView) -> None:
    run(view.create_topic("seen", 1))
    run(view.create_topic("hidden", 1))
    answer = ask(
        ListOffsetsHandler(view, access_with(security, on_topic("seen", AclOperation.READ))),
        LIST_OFFSETS_KEY,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]} for name in ("seen", "hidden")
            ],
        },
    )
    codes = {topic.name: (topic.partitions[0].error_code, topic.partitions[0].offset) for topic in answer.topics}
    assert codes == {"seen": (ErrorCode.none, 0), "hidden": (DENIED_TOPIC, -1)}


def leader_epoch_codes(view: InProcessBrokerView, access: AccessControl) -> dict[str, ErrorCode]:
    answer = ask(
        OffsetForLeaderEpochHandler(view, access),
        OFFSET_FOR_LEADER_EPOCH_KEY,
        {
            "topics": [
                {"topic": name, "partitions": [{"partition": 0, "leader_epoch": 0}]} for name in ("seen", "hidden")
            ]
        },
    )
    return {topic.topic: topic.partitions[0].error_code for topic in answer.topics}


def test_offset_for_leader_epoch_needs_describe_on_the_topic_or_cluster_action(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    run(view.create_topic("seen", 1))
    run(view.create_topic("hidden", 1))
    by_topic = access_with(security, on_topic("seen", AclOperation.DESCRIBE))
    assert leader_epoch_codes(view, by_topic) == {"seen": ErrorCode.none, "hidden": DENIED_TOPIC}
    follower = access_with(security, on_cluster(AclOperation.CLUSTER_ACTION))
    assert leader_epoch_codes(view, follower) == {"seen": ErrorCode.none, "hidden": ErrorCode.none}


def test_delete_records_needs_delete_on_the_topic(view: InProcessBrokerView, security: SecurityView) -> None:
    run(view.create_topic("purged", 1))
    run(view.create_topic("kept", 1))
    answer = ask(
        DeleteRecordsHandler(view, access_with(security, on_topic("purged", AclOperation.DELETE))),
        DELETE_RECORDS_KEY,
        {
            "topics": [
                {"name": name, "partitions": [{"partition_index": 0, "offset": -1}]} for name in ("purged", "kept")
            ],
            "timeout": 1000,
        },
    )
    assert {topic.name: topic.partitions[0].error_code for topic in answer.topics} == {
        "purged": ErrorCode.none,
        "kept": DENIED_TOPIC,
    }


# Metadata


def metadata(
    view: InProcessBrokerView, access: AccessControl, topics: list[str] | None, version: int = 12, **flags: bool
) -> Any:
    handler = MetadataHandler(view, ENDPOINT, True, 1, access)
    named = None if topics is None else [{"topic_id": None, "name": name} for name in topics]
    values = {"topics": named, "allow_auto_topic_creation": True, "include_topic_authorized_operations": False}
    return ask(handler, METADATA_KEY, {**values, **flags}, version)


def test_metadata_lists_only_describable_topics_and_hides_whether_others_exist(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    for name in ("seen", "hidden"):
        run(view.create_topic(name, 1))
    access = access_with(
        security,
        on_topic("seen", AclOperation.READ),
        on_topic("hidden", AclOperation.WRITE, permission=AclPermissionType.DENY),
    )
    assert [topic.name for topic in metadata(view, access, None).topics] == ["seen"]
    named = metadata(view, access, ["seen", "hidden", "nowhere"]).topics
    assert {topic.name: topic.error_code for topic in named} == {
        "seen": ErrorCode.none,
        "hidden": DENIED_TOPIC,
        "nowhere": DENIED_TOPIC,
    }
    assert not run(view.topics()).keys() - {"seen", "hidden"}


def test_metadata_auto_creation_needs_create_on_the_cluster_or_the_topic(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    describe_all = on_topic("*", AclOperation.DESCRIBE)
    refused = metadata(view, access_with(security, describe_all), ["auto-refused"]).topics
    assert [(topic.name, topic.error_code) for topic in refused] == [("auto-refused", DENIED_TOPIC)]
    by_prefix = access_with(
        security, describe_all, on_topic("auto-", AclOperation.CREATE, pattern=PatternType.PREFIXED)
    )
    assert metadata(view, by_prefix, ["auto-made"]).topics[0].error_code == ErrorCode.none
    by_cluster = access_with(security, describe_all, on_cluster(AclOperation.CREATE))
    assert metadata(view, by_cluster, ["anything"]).topics[0].error_code == ErrorCode.none
    not_asked = metadata(view, access_with(security, describe_all), ["absent"], allow_auto_topic_creation=False).topics
    assert not_asked[0].error_code == ErrorCode.unknown_topic_or_partition
    assert set(run(view.topics())) == {"auto-made", "anything"}


def test_metadata_fills_authorized_operations_when_asked(view: InProcessBrokerView, security: SecurityView) -> None:
    run(view.create_topic("seen", 1))
    access = access_with(security, on_topic("seen", AclOperation.READ), on_topic("seen", AclOperation.ALTER_CONFIGS))
    answer = metadata(
        view,
        access,
        ["seen"],
        version=10,
        include_topic_authorized_operations=True,
        include_cluster_authorized_operations=True,
    )
    expected = bits(AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS)
    assert answer.topics[0].topic_authorized_operations == expected
    assert answer.cluster_authorized_operations == 0
    cluster_ops = access_with(security, on_cluster(AclOperation.ALTER), on_topic("seen", AclOperation.READ))
    answer = metadata(view, cluster_ops, ["seen"], version=10, include_cluster_authorized_operations=True)
    assert answer.cluster_authorized_operations == bits(AclOperation.ALTER, AclOperation.DESCRIBE)
    assert answer.topics[0].topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


def test_describe_cluster_needs_nothing_and_reports_cluster_operations_when_asked(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    values = {"include_cluster_authorized_operations": True, "include_fenced_brokers": False}
    answer = ask(DescribeClusterHandler(view, ENDPOINT, access_with(security)), DESCRIBE_CLUSTER_KEY, values)
    assert (answer.error_code, answer.cluster_authorized_operations) == (ErrorCode.none, 0)
    access = access_with(security, on_cluster(AclOperation.DESCRIBE), on_cluster(AclOperation.IDEMPOTENT_WRITE))
    answer = ask(DescribeClusterHandler(view, ENDPOINT, access), DESCRIBE_CLUSTER_KEY, values)
    assert answer.cluster_authorized_operations == bits(AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE)


# Producer ids


def init_producer_id(
    view: InProcessBrokerView, access: AccessControl, transactional_id: str | None = None
) -> ErrorCode:
    values = {"transactional_id": transactional_id, "transaction_timeout": 60_000}
    handler = InitProducerIdHandler(view, TransactionView.in_process(view.broker), access)
    code: ErrorCode = ask(handler, INIT_PRODUCER_ID_KEY, values).error_code
    return code


def test_init_producer_id_needs_idempotent_write_on_the_cluster_or_write_on_some_topic(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    assert init_producer_id(view, access_with(security, on_topic("t", AclOperation.READ))) == DENIED_CLUSTER
    assert init_producer_id(view, access_with(security, on_cluster(AclOperation.IDEMPOTENT_WRITE))) == ErrorCode.none
    assert init_producer_id(view, access_with(security, on_topic("any", AclOperation.WRITE))) == ErrorCode.none


def test_init_producer_id_needs_write_on_the_transactional_id(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    denied = ErrorCode.transactional_id_authorization_failed
    assert init_producer_id(view, access_with(security), "tx") == denied
    described = access_with(security, acl(ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.DESCRIBE))
    assert init_producer_id(view, described, "tx") == denied
    allowed = access_with(security, acl(ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.WRITE))
    assert init_producer_id(view, allowed, "tx") == ErrorCode.none


# Topic administration


def create_topics(view: InProcessBrokerView, access: AccessControl, *names: str) -> dict[str, Any]:
    handler = CreateTopicsHandler(view, ConfigDescriber(BrokerConfig(), frozenset()), 1, access)
    topics = [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []} for name in names
    ]
    answer = ask(handler, CREATE_TOPICS_KEY, {"topics": topics, "timeout": 1000, "validate_only": False})
    return {topic.name: topic for topic in answer.topics}


def test_create_topics_needs_create_on_the_cluster_or_the_topic(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    access = access_with(
        security,
        on_topic("mine", AclOperation.CREATE),
        on_topic("shown", AclOperation.CREATE),
        on_topic("shown", AclOperation.DESCRIBE_CONFIGS),
    )
    answers = create_topics(view, access, "mine", "shown", "theirs")
    assert {name: answer.error_code for name, answer in answers.items()} == {
        "mine": ErrorCode.none,
        "shown": ErrorCode.none,
        "theirs": DENIED_TOPIC,
    }
    # Created, but its configs are withheld from a principal that may not DESCRIBE_CONFIGS it.
    assert (answers["mine"].topic_config_error_code, answers["mine"].configs) == (DENIED_TOPIC, ())
    assert (answers["shown"].topic_config_error_code, answers["shown"].num_partitions) == (0, 1)
    assert answers["shown"].configs
    assert set(run(view.topics())) == {"mine", "shown"}
    everything = access_with(security, on_cluster(AclOperation.CREATE))
    assert create_topics(view, everything, "theirs")["theirs"].error_code == ErrorCode.none


def delete_topics(view: InProcessBrokerView, access: AccessControl, *names: str) -> dict[str, ErrorCode]:
    handler = DeleteTopicsHandler(view, True, access)
    answer = ask(handler, DELETE_TOPICS_KEY, {"topics": [{"name": n, "topic_id": None} for n in names], "timeout": 1})
    return {response.name: response.error_code for response in answer.responses}


def test_delete_topics_needs_delete_and_describe_on_the_topic_or_delete_on_the_cluster(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    for name in ("doomed", "guarded", "shy", "other"):
        run(view.create_topic(name, 1))
    access = access_with(
        security,
        on_topic("doomed", AclOperation.DELETE),
        on_topic("ghost", AclOperation.DELETE),
        on_topic("shy", AclOperation.DELETE),
        on_topic("shy", AclOperation.DESCRIBE, permission=AclPermissionType.DENY),
    )
    assert delete_topics(view, access, "doomed", "guarded", "shy", "ghost", "nowhere") == {
        "doomed": ErrorCode.none,
        "guarded": DENIED_TOPIC,
        "shy": DENIED_TOPIC,
        "ghost": ErrorCode.unknown_topic_or_partition,
        "nowhere": DENIED_TOPIC,
    }
    assert delete_topics(view, access_with(security, on_cluster(AclOperation.DELETE)), "other") == {
        "other": ErrorCode.none
    }
    assert set(run(view.topics())) == {"guarded", "shy"}


def test_create_partitions_needs_alter_on_the_topic(view: InProcessBrokerView, security: SecurityView) -> None:
    for name in ("grown", "fixed"):
        run(view.create_topic(name, 1))
    handler = CreatePartitionsHandler(view, access_with(security, on_topic("grown", AclOperation.ALTER)))
    topics = [{"name": name, "count": 2, "assignments": None} for name in ("grown", "fixed")]
    answer = ask(handler, CREATE_PARTITIONS_KEY, {"topics": topics, "timeout": 1000, "validate_only": False})
    assert {result.name: result.error_code for result in answer.results} == {
        "grown": ErrorCode.none,
        "fixed": DENIED_TOPIC,
    }
    assert (run(view.topic("grown")).partition_count, run(view.topic("fixed")).partition_count) == (2, 1)


def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    for name in ("seen", "hidden"):
        run(view.create_topic(name, 1))
    resources = [
        {"resource_type": 2, "resource_name": "seen", "configuration_keys": None},
        {"resource_type": 2, "resource_name": "hidden", "configuration_keys": None},
        {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
    ]
    describer = ConfigDescriber(BrokerConfig(), frozenset())
    topic_only = access_with(security, on_topic("seen", AclOperation.ALTER_CONFIGS))
    answer = ask(DescribeConfigsHandler(view, describer, 0, topic_only), DESCRIBE_CONFIGS_KEY, {"resources": resources})
    assert [(result.resource_name, result.error_code) for result in answer.results] == [
        ("seen", ErrorCode.none),
        ("hidden", DENIED_TOPIC),
        ("0", DENIED_CLUSTER),
    ]
    cluster = access_with(security, on_cluster(AclOperation.DESCRIBE_CONFIGS))
    answer = ask(DescribeConfigsHandler(view, describer, 0, cluster), DESCRIBE_CONFIGS_KEY, {"resources": resources})
    assert [result.error_code for result in answer.results] == [DENIED_TOPIC, DENIED_TOPIC, ErrorCode.none]


@pytest.mark.parametrize("incremental", [False, True])
def test_alter_configs_need_alter_configs_on_the_topic_or_the_cluster(
    view: InProcessBrokerView, incremental: bool, security: SecurityView
) -> None:
    for name in ("tuned", "fixed"):
        run(view.create_topic(name, 1))
    config = {"name": "retention.ms", "value": "60000", "config_operation": 0}
    resources = [
        {"resource_type": 2, "resource_name": "tuned", "configs": [config]},
        {"resource_type": 2, "resource_name": "fixed", "configs": [config]},
        {"resource_type": 4, "resource_name": "0", "configs": [config]},
    ]
    access = access_with(security, on_topic("tuned", AclOperation.ALTER_CONFIGS))
    handler = AlterConfigsHandler(view, 0, BrokerConfig().log_config, incremental, access)
    api_key = INCREMENTAL_ALTER_CONFIGS_KEY if incremental else ALTER_CONFIGS_KEY
    answer = ask(handler, api_key, {"resources": resources, "validate_only": False})
    assert [(response.resource_name, response.error_code) for response in answer.responses] == [
        ("tuned", ErrorCode.none),
        ("fixed", DENIED_TOPIC),
        ("0", DENIED_CLUSTER),
    ]
    assert (run(view.topic_config("tuned")), run(view.topic_config("fixed"))) == ({"retention.ms": "60000"}, {})


# Groups


def test_find_coordinator_needs_describe_on_the_group(security: SecurityView) -> None:
    access = access_with(security, on_group("mine", AclOperation.DESCRIBE))
    answer = ask(FindCoordinatorHandler(ENDPOINT, access), FIND_COORDINATOR_KEY, {"coordinator_keys": ["mine", "x"]})
    assert [(c.key, c.error_code, c.node_id) for c in answer.coordinators] == [
        ("mine", ErrorCode.none, 0),
        ("x", DENIED_GROUP, -1),
    ]
    old = ask(FindCoordinatorHandler(ENDPOINT, access), FIND_COORDINATOR_KEY, {"key": "x", "key_type": 0}, 3)
    assert old.error_code == DENIED_GROUP
    transactional = {"key_type": 1, "coordinator_keys": ["tx"]}
    answer = ask(FindCoordinatorHandler(ENDPOINT, access), FIND_COORDINATOR_KEY, transactional)
    assert answer.coordinators[0].error_code == ErrorCode.transactional_id_authorization_failed
    described = access_with(security, acl(ResourceType.TRANSACTIONAL_ID, "tx", AclOperation.DESCRIBE))
    answer = ask(FindCoordinatorHandler(ENDPOINT, described), FIND_COORDINATOR_KEY, transactional)
    assert (answer.coordinators[0].error_code, answer.coordinators[0].node_id) == (ErrorCode.none, 0)


JOIN = {
    "session_timeout": 10_000,
    "rebalance_timeout": 10_000,
    "member_id": "",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocols": [{"name": "range", "metadata": b""}],
}


def test_the_group_protocol_needs_read_on_the_group(groups: GroupView, security: SecurityView) -> None:
    refused = access_with(security, on_group("g", AclOperation.DESCRIBE))
    member = {"group_id": "g", "generation_id": 1, "member_id": "m"}
    answers = [
        ask(JoinGroupHandler(groups, refused), JOIN_GROUP_KEY, {"group_id": "g", **JOIN}),
        ask(SyncGroupHandler(groups, refused), SYNC_GROUP_KEY, {**member, "assignments": []}),
        ask(HeartbeatHandler(groups, refused), HEARTBEAT_KEY, member),
        ask(LeaveGroupHandler(groups, refused), LEAVE_GROUP_KEY, {"group_id": "g", "members": [{"member_id": "m"}]}),
    ]
    assert [answer.error_code for answer in answers] == [DENIED_GROUP] * 4
    assert (answers[0].member_id, answers[0].generation_id, answers[3].members) == ("", -1, ())
    assert run(groups.list_groups()) == []
    allowed = access_with(security, on_group("g", AclOperation.READ))
    joined = ask(JoinGroupHandler(groups, allowed), JOIN_GROUP_KEY, {"group_id": "g", **JOIN})
    assert joined.error_code == ErrorCode.member_id_required


def heartbeat(groups: GroupView, features: FeatureCache, access: AccessControl, topics: list[str]) -> Any:
    """Alice's first ConsumerGroupHeartbeat into group "g", subscribing to `topics`."""
    values = {
        "group_id": "g",
        "member_id": "m1",
        "member_epoch": 0,
        "rebalance_timeout": 30000,
        "subscribed_topic_names": topics,
        "topic_partitions": [],
    }
    return ask(ConsumerGroupHeartbeatHandler(groups, features, access), CONSUMER_GROUP_HEARTBEAT_KEY, values)


def test_the_consumer_protocol_needs_read_on_the_group_and_describe_on_its_topics(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView, features: FeatureCache
) -> None:
    run(view.create_topic("seen", 1))
    run(view.create_topic("hidden", 1))
    no_read = access_with(security, on_group("g", AclOperation.DESCRIBE), on_topic("seen", AclOperation.DESCRIBE))
    assert heartbeat(groups, features, no_read, ["seen"]).error_code == DENIED_GROUP
    readers = access_with(
        security,
        on_group("g", AclOperation.READ),
        on_group("g", AclOperation.DESCRIBE),
        on_topic("seen", AclOperation.DESCRIBE),
    )
    assert heartbeat(groups, features, readers, ["seen", "hidden"]).error_code == DENIED_TOPIC
    describe = {"group_ids": ["g"], "include_authorized_operations": True}
    assert (
        ask(ConsumerGroupDescribeHandler(groups, features, readers), CONSUMER_GROUP_DESCRIBE_KEY, describe)
        .groups[0]
        .error_code
        == ErrorCode.group_id_not_found
    )
    joined = heartbeat(groups, features, readers, ["seen"])
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    (described,) = ask(
        ConsumerGroupDescribeHandler(groups, features, readers), CONSUMER_GROUP_DESCRIBE_KEY, describe
    ).groups
    assert described.error_code == ErrorCode.none
    assert described.authorized_operations == bits(AclOperation.READ, AclOperation.DESCRIBE)
    # READ implies DESCRIBE (Kafka's authorizer): only a principal with neither is refused.
    blind = access_with(security, on_group("other", AclOperation.READ))
    (refused,) = ask(
        ConsumerGroupDescribeHandler(groups, features, blind), CONSUMER_GROUP_DESCRIBE_KEY, describe
    ).groups
    assert (refused.error_code, refused.members) == (DENIED_GROUP, ())


def commit(view: InProcessBrokerView, groups: GroupView, access: AccessControl) -> dict[str, ErrorCode]:
    values = {
        "group_id": "g",
        "member_id": "",
        "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}
            for name in ("read", "unread", "nowhere")
        ],
    }
    answer = ask(OffsetCommitHandler(view, groups, access), OFFSET_COMMIT_KEY, values, BY_NAME)
    return {topic.name: topic.partitions[0].error_code for topic in answer.topics}


def test_offset_commit_needs_read_on_the_group_then_on_each_topic(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    for name in ("read", "unread"):
        run(view.create_topic(name, 1))
    read_topic = on_topic("read", AclOperation.READ)
    assert commit(view, groups, access_with(security, read_topic)) == dict.fromkeys(
        ("read", "unread", "nowhere"), DENIED_GROUP
    )
    assert commit(view, groups, access_with(security, read_topic, on_group("g", AclOperation.READ))) == {
        "read": ErrorCode.none,
        "unread": DENIED_TOPIC,
        "nowhere": DENIED_TOPIC,
    }
    assert committed_offsets(view.broker) == {("g", "read", 0): 5}


def test_offset_fetch_needs_describe_on_the_group_and_hides_undescribable_topics(
    broker: InProcessBroker, groups: GroupView, security: SecurityView
) -> None:
    commit_offsets(broker, {("g", "seen", 0): 3, ("g", "hidden", 0): 7})
    handler = OffsetFetchHandler(
        InProcessBrokerView(broker),
        groups,
        access_with(security, on_group("g", AclOperation.DESCRIBE), on_topic("seen", AclOperation.DESCRIBE)),
    )
    named = [{"name": name, "partition_indexes": [0]} for name in ("seen", "hidden")]
    answer = ask(
        handler,
        OFFSET_FETCH_KEY,
        {"groups": [{"group_id": "g", "topics": named}, {"group_id": "other", "topics": None}]},
        BY_NAME,
    )
    mine, other = answer.groups
    assert other.error_code == DENIED_GROUP
    assert [(t.name, t.partitions[0].committed_offset, t.partitions[0].error_code) for t in mine.topics] == [
        ("seen", 3, ErrorCode.none),
        ("hidden", -1, DENIED_TOPIC),
    ]
    every = ask(handler, OFFSET_FETCH_KEY, {"groups": [{"group_id": "g", "topics": None}]}, BY_NAME).groups[0]
    assert [(t.name, t.partitions[0].committed_offset) for t in every.topics] == [("seen", 3)]
    single = ask(handler, OFFSET_FETCH_KEY, {"group_id": "other", "topics": None}, 7)
    assert single.error_code == DENIED_GROUP


def test_offset_commit_and_fetch_v10_check_the_topic_its_id_names_after_finding_it(
    view: InProcessBrokerView, groups: GroupView, security: SecurityView
) -> None:
    ids = {name: run(view.create_topic(name, 1)).topic_id for name in ("read", "unread")}
    nowhere = uuid.uuid4()
    access = access_with(
        security,
        on_group("g", AclOperation.READ),
        on_topic("read", AclOperation.READ),
    )
    named = [ids["read"], ids["unread"], nowhere]
    committed = ask(
        OffsetCommitHandler(view, groups, access),
        OFFSET_COMMIT_KEY,
        {
            "group_id": "g",
            "member_id": "",
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}],
                }
                for topic_id in named
            ],
        },
    )
    # An id no topic has is refused before any topic is authorized; the refused come first, as Kafka 4.2 answers.
    assert [(t.topic_id, t.partitions[0].error_code) for t in committed.topics] == [
        (ids["unread"], DENIED_TOPIC),
        (nowhere, ErrorCode.unknown_topic_id),
        (ids["read"], ErrorCode.none),
    ]
    fetched = ask(
        OffsetFetchHandler(view, groups, access),
        OFFSET_FETCH_KEY,
        {"groups": [{"group_id": "g", "topics": [{"topic_id": t, "partition_indexes": [0]} for t in named]}]},
    ).groups[0]
    assert [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code) for t in fetched.topics] == [
        (ids["read"], 5, ErrorCode.none),
        (ids["unread"], -1, DENIED_TOPIC),
        (nowhere, -1, ErrorCode.unknown_topic_id),
    ]


def test_list_groups_lists_every_group_to_cluster_describe_and_describable_ones_otherwise(
    broker: InProcessBroker, groups: GroupView, security: SecurityView
) -> None:
    commit_offsets(broker, {("mine", "t", 0): 1, ("theirs", "t", 0): 1})
    listed = ask(
        ListGroupsHandler(groups, access_with(security, on_group("mine", AclOperation.READ))), LIST_GROUPS_KEY, {}
    )
    assert [group.group_id for group in listed.groups] == ["mine"]
    everything = ask(
        ListGroupsHandler(groups, access_with(security, on_cluster(AclOperation.DESCRIBE))), LIST_GROUPS_KEY, {}
    )
    assert [group.group_id for group in everything.groups] == ["mine", "theirs"]


def test_describe_groups_needs_describe_and_delete_groups_delete_on_each_group(
    broker: InProcessBroker, groups: GroupView, view: InProcessBrokerView, security: SecurityView
) -> None:
    commit_offsets(broker, {("mine", "t", 0): 1, ("theirs", "t", 0): 1})
    access = access_with(security, on_group("mine", AclOperation.DELETE))
    described = ask(
        DescribeGroupsHandler(groups, access),
        DESCRIBE_GROUPS_KEY,
        {"groups": ["mine", "theirs"], "include_authorized_operations": True},
    )
    assert [(group.group_id, group.error_code) for group in described.groups] == [
        ("mine", ErrorCode.none),
        ("theirs", DENIED_GROUP),
    ]
    assert described.groups[0].authorized_operations == bits(AclOperation.DELETE, AclOperation.DESCRIBE)
    assert (described.groups[1].group_state, described.groups[1].authorized_operations) == (
        "",
        AUTHORIZED_OPERATIONS_OMITTED,
    )
    deleted = ask(DeleteGroupsHandler(groups, view, access), DELETE_GROUPS_KEY, {"groups_names": ["mine", "theirs"]})
    assert [(result.group_id, result.error_code) for result in deleted.results] == [
        ("mine", ErrorCode.none),
        ("theirs", DENIED_GROUP),
    ]
    assert set(committed_offsets(broker)) == {("theirs", "t", 0)}


def test_group_configs_need_describe_configs_or_alter_configs_on_the_group(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    access = access_with(security, on_group("mine", AclOperation.ALTER_CONFIGS))
    config = {"name": "share.auto.offset.reset", "value": "earliest", "config_operation": 0}
    resources = [{"resource_type": 32, "resource_name": name, "configs": [config]} for name in ("mine", "other")]
    handler = AlterConfigsHandler(view, 0, BrokerConfig().log_config, True, access)
    answer = ask(handler, INCREMENTAL_ALTER_CONFIGS_KEY, {"resources": resources, "validate_only": False})
    assert [response.error_code for response in answer.responses] == [ErrorCode.none, DENIED_GROUP]
    assert run(view.group_config("mine"))[0] == {"share.auto.offset.reset": "earliest"}
    assert run(view.group_config("other"))[0] == {}
    described = [{"resource_type": 32, "resource_name": name, "configuration_keys": None} for name in ("mine", "other")]
    describer = ConfigDescriber(BrokerConfig(), frozenset())
    answer = ask(DescribeConfigsHandler(view, describer, 0, access), DESCRIBE_CONFIGS_KEY, {"resources": described})
    assert [result.error_code for result in answer.results] == [ErrorCode.none, DENIED_GROUP]
    assert [c.value for c in answer.results[0].configs if c.name == "share.auto.offset.reset"] == ["earliest"]


def test_list_config_resources_needs_describe_configs_on_the_cluster(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    run(view.set_group_config("set", {"share.auto.offset.reset": "earliest"}))
    for allowed, expected in (
        (on_group("set", AclOperation.ALTER_CONFIGS), DENIED_CLUSTER),
        (on_cluster(AclOperation.DESCRIBE_CONFIGS), ErrorCode.none),
    ):
        handler = ListConfigResourcesHandler(view, access_with(security, allowed))
        answer = ask(handler, LIST_CONFIG_RESOURCES_KEY, {"resource_types": [32]})
        assert answer.error_code == expected
        assert [r.resource_name for r in answer.config_resources] == ([] if expected == DENIED_CLUSTER else ["set"])

"""ACLs and SCRAM credentials managed by real admin clients over 127.0.0.1, and enforced on real clients.

confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient create, describe and delete ACLs and
alter and describe SCRAM credentials; the oracle is the in-process controller's stores (`SecurityView.in_process`),
which must hold exactly what the clients were told. Then, on a listener with the authorizer on, no super user and
`allow.everyone.if.no.acl.found=false`: ACLs granted to User:ANONYMOUS (what a PLAINTEXT connection is) through the
AdminClient let a consumer read a topic a producer may not write to, a PREFIXED grant lets it write to every topic
under the prefix, a DENY beats it, and Metadata hides a topic the principal may not DESCRIBE. No Ray: the listener
serves an `InProcessBrokerView` over the in-process broker.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, KafkaAdminClient
from kafka.admin import ResourcePattern as KafkaPythonPattern
from kafka.admin import ResourcePatternFilter as KafkaPythonPatternFilter
from kafka.admin import ResourceType as KafkaPythonResourceType
from kafka.admin import ScramMechanism as KafkaPythonScramMechanism
from kafka.admin import UserScramCredentialDeletion as KafkaPythonDeletion
from kafka.admin import UserScramCredentialUpsertion as KafkaPythonUpsertion

from actors.core.security import acl_bindings as acls
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.helpers import add_acls, batch, leader_log, run, start_broker

ANONYMOUS = "User:ANONYMOUS"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TIMEOUT_S = 15.0
RECORDS = 5


@contextlib.contextmanager
def serving(
    root: Path, grants: Sequence[acls.AclBinding] = (), **properties: str
) -> Iterator[tuple[KafkaListener, InProcessBrokerView, SecurityView]]:
    """A PLAINTEXT listener with the authorizer on over a fresh in-process broker under `root`, which holds `grants`
    before the listener starts; `properties` with `_` for `.`."""
    broker = start_broker(root)
    add_acls(broker.controller, *grants)
    view = InProcessBrokerView(broker)
    security = SecurityView.in_process(broker.controller)
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        **{key.replace("_", "."): value for key, value in properties.items()},
    }
    try:
        with KafkaListener(settings, view, security) as listener:
            yield listener, view, security
    finally:
        broker.close()


@pytest.fixture(scope="module")
def admin_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaListener, SecurityView]]:
    """A listener where the PLAINTEXT principal is a super user: the operator's own admin connection."""
    with serving(tmp_path_factory.mktemp("admin"), super_users=ANONYMOUS) as (listener, _, security):
        yield listener, security


@pytest.fixture(scope="module")
def admin_security(admin_served: tuple[KafkaListener, SecurityView]) -> SecurityView:
    return admin_served[1]


@pytest.fixture(scope="module")
def admin_listener(admin_served: tuple[KafkaListener, SecurityView]) -> KafkaListener:
    return admin_served[0]


def stored(security: SecurityView) -> set[acls.AclBinding]:
    return set(run(security.acls())[1])


def ours(binding: AclBinding) -> acls.AclBinding:
    """A confluent-kafka binding as raybroker's (both enums carry Kafka's wire codes; confluent names CLUSTER
    BROKER)."""
    return acls.AclBinding(
        acls.ResourceType(binding.restype.value),
        binding.name,
        acls.PatternType(binding.resource_pattern_type.value),
        binding.principal,
        binding.host,
        acls.AclOperation(binding.operation.value),
        acls.AclPermissionType(binding.permission_type.value),
    )


def confluent_binding(
    name: str,
    operation: AclOperation,
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    restype: ResourceType = ResourceType.TOPIC,
    principal: str = ANONYMOUS,
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", operation, permission)


def everything_filter() -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )


def results(futures: dict[Any, Any]) -> dict[Any, Any]:
    return {key: future.result(TIMEOUT_S) for key, future in futures.items()}


def test_confluent_admin_creates_describes_and_deletes_acls(
    admin_listener: KafkaListener, admin_security: SecurityView
) -> None:
    admin = AdminClient({"bootstrap.servers": admin_listener.bootstrap_servers})
    created = [
        confluent_binding("ck-orders", AclOperation.READ, principal="User:alice"),
        confluent_binding("ck-pay-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED, principal="User:bob"),
        confluent_binding("ck-group", AclOperation.READ, AclPermissionType.DENY, restype=ResourceType.GROUP),
    ]
    assert results(admin.create_acls(created)) == dict.fromkeys(created)
    assert {ours(binding) for binding in created} <= stored(admin_security)

    described = admin.describe_acls(everything_filter()).result(TIMEOUT_S)
    assert {ours(binding) for binding in described} == stored(admin_security)
    by_match = AclBindingFilter(
        ResourceType.TOPIC, "ck-pay-eu", ResourcePatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    assert [ours(binding) for binding in admin.describe_acls(by_match).result(TIMEOUT_S)] == [ours(created[1])]

    alice_only = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY, AclPermissionType.ANY
    )
    deleted = results(admin.delete_acls([alice_only]))
    assert [ours(binding) for binding in deleted[alice_only]] == [ours(created[0])]
    assert ours(created[0]) not in stored(admin_security)

    invalid = AclBinding(
        ResourceType.BROKER,
        "not-the-cluster",
        ResourcePatternType.LITERAL,
        "User:x",
        "*",
        AclOperation.ALTER,
        AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([invalid])[invalid].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_kafka_python_admin_creates_describes_and_deletes_acls(
    admin_listener: KafkaListener, admin_security: SecurityView
) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=admin_listener.bootstrap_servers, request_timeout_ms=int(TIMEOUT_S * 1000)
    )
    try:
        pattern = KafkaPythonPattern(KafkaPythonResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED)
        acl = ACL("User:carol", "*", ACLOperation.DESCRIBE, ACLPermissionType.ALLOW, pattern)
        assert admin.create_acls([acl]) == {"succeeded": [acl], "failed": []}
        expected = acls.AclBinding(
            acls.ResourceType.TOPIC,
            "kp-",
            acls.PatternType.PREFIXED,
            "User:carol",
            "*",
            acls.AclOperation.DESCRIBE,
            acls.AclPermissionType.ALLOW,
        )
        assert expected in stored(admin_security)
        carol = ACLFilter(
            "User:carol",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            KafkaPythonPatternFilter(KafkaPythonResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        described, _ = admin.describe_acls(carol)
        assert [(a.principal, a.resource_pattern.resource_name) for a in described] == [("User:carol", "kp-")]
        ((_, matched, _),) = admin.delete_acls([carol])
        assert [(a.principal, a.operation) for a in matched] == [("User:carol", ACLOperation.DESCRIBE)]
        assert expected not in stored(admin_security)
    finally:
        admin.close()


def test_confluent_admin_alters_and_describes_scram_credentials(
    admin_listener: KafkaListener, admin_security: SecurityView
) -> None:
    admin = AdminClient({"bootstrap.servers": admin_listener.bootstrap_servers})
    upserted = [
        UserScramCredentialUpsertion("dora", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dora-pw"),
        UserScramCredentialUpsertion("ed", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"ed-pw"),
    ]
    assert results(admin.alter_user_scram_credentials(upserted)) == {"dora": None, "ed": None}
    dora = run(admin_security.scram_credential("dora", "SCRAM-SHA-256"))
    ed = run(admin_security.scram_credential("ed", "SCRAM-SHA-512"))
    assert dora is not None and dora.verify_password("dora-pw") and dora.iterations == 4096
    assert ed is not None and ed.verify_password("ed-pw") and not ed.verify_password("dora-pw")

    described = results(admin.describe_user_scram_credentials(["dora", "ed"]))
    infos = {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for user, d in described.items()}
    assert infos == {"dora": [(ScramMechanism.SCRAM_SHA_256, 4096)], "ed": [(ScramMechanism.SCRAM_SHA_512, 8192)]}
    every = admin.describe_user_scram_credentials().result(TIMEOUT_S)
    assert set(every) == set(run(admin_security.scram_credentials())) == {"dora", "ed"}

    deleted = admin.alter_user_scram_credentials([UserScramCredentialDeletion("ed", ScramMechanism.SCRAM_SHA_512)])
    assert results(deleted) == {"ed": None}
    assert set(run(admin_security.scram_credentials())) == {"dora"}
    with pytest.raises(KafkaException) as missing:
        admin.describe_user_scram_credentials(["ed"])["ed"].result(TIMEOUT_S)
    assert missing.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    too_few = UserScramCredentialUpsertion("fay", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    with pytest.raises(KafkaException) as refused:
        admin.alter_user_scram_credentials([too_few])["fay"].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL


def test_kafka_python_admin_alters_and_describes_scram_credentials(
    admin_listener: KafkaListener, admin_security: SecurityView
) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=admin_listener.bootstrap_servers, request_timeout_ms=int(TIMEOUT_S * 1000)
    )
    try:
        upsert = KafkaPythonUpsertion("gus", KafkaPythonScramMechanism.SCRAM_SHA_512, "gus-pw", iterations=4500)
        assert admin.alter_user_scram_credentials([upsert]) == {"gus": None}
        gus = run(admin_security.scram_credential("gus", "SCRAM-SHA-512"))
        assert gus is not None and gus.verify_password("gus-pw") and gus.iterations == 4500
        described = admin.describe_user_scram_credentials(["gus"])["gus"]
        assert described["error"] is None
        assert described["credential_infos"] == [
            {"mechanism": KafkaPythonScramMechanism.SCRAM_SHA_512, "iterations": 4500}
        ]
        deletion = KafkaPythonDeletion("gus", KafkaPythonScramMechanism.SCRAM_SHA_512)
        assert admin.alter_user_scram_credentials([deletion]) == {"gus": None}
        assert run(admin_security.scram_credential("gus", "SCRAM-SHA-512")) is None
    finally:
        admin.close()


# Enforcement: no super user, nothing allowed without an ACL.


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaListener, InProcessBrokerView]]:
    # The operator's first grant (e.g. with the CLI): the PLAINTEXT principal may manage ACLs, nothing else.
    first_grant = [
        acls.AclBinding(
            acls.ResourceType.CLUSTER,
            acls.CLUSTER_NAME,
            acls.PatternType.LITERAL,
            ANONYMOUS,
            "*",
            operation,
            acls.AclPermissionType.ALLOW,
        )
        for operation in (acls.AclOperation.ALTER, acls.AclOperation.DESCRIBE)
    ]
    root = tmp_path_factory.mktemp("restricted")
    with serving(root, first_grant, allow_everyone_if_no_acl_found="false") as (listener, view, _):
        yield listener, view


def produce_errors(listener: KafkaListener, topic: str) -> list[int]:
    """The error code of each of RECORDS records a confluent producer sends to `topic` (0 when delivered)."""
    producer = Producer(
        {
            "bootstrap.servers": listener.bootstrap_servers,
            "message.timeout.ms": str(int(TIMEOUT_S * 1000)),
            "topic.metadata.refresh.interval.ms": "200",
        }
    )
    codes: list[int] = []
    for index in range(RECORDS):
        producer.produce(
            topic,
            f"{topic}-{index}".encode(),
            partition=0,
            on_delivery=lambda e, _m: codes.append(e.code() if e else 0),
        )
    assert producer.flush(TIMEOUT_S) == 0
    return codes


def consume(listener: KafkaListener, topic: str) -> list[bytes]:
    consumer = Consumer(
        {"bootstrap.servers": listener.bootstrap_servers, "group.id": "readers", "enable.auto.commit": "false"}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        received: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=RECORDS, timeout=0.2):
                assert message.error() is None, message.error()
                received.append(message.value())
        return received
    finally:
        consumer.close()


def test_acls_granted_through_the_admin_client_are_enforced(
    restricted: tuple[KafkaListener, InProcessBrokerView],
) -> None:
    listener, view = restricted
    for topic in ("audit", "pay-eu", "pay-secret", "hidden"):
        run(view.create_topic(topic, 1))
    leader_log(view, "audit", 0).append(
        batch([(None, f"audit-{index}".encode(), 1000 + index) for index in range(RECORDS)])
    )
    admin = AdminClient({"bootstrap.servers": listener.bootstrap_servers})
    granted = [
        confluent_binding("audit", AclOperation.READ),
        confluent_binding("readers", AclOperation.READ, restype=ResourceType.GROUP),
        confluent_binding("pay-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        confluent_binding("pay-secret", AclOperation.WRITE, AclPermissionType.DENY),
    ]
    assert results(admin.create_acls(granted)) == dict.fromkeys(granted)

    # WRITE implies DESCRIBE (a DENY of WRITE does not deny DESCRIBE): only "hidden" is left out.
    assert set(admin.list_topics(timeout=TIMEOUT_S).topics) == {"audit", "pay-eu", "pay-secret"}
    assert produce_errors(listener, "audit") == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * RECORDS
    assert consume(listener, "audit") == [f"audit-{index}".encode() for index in range(RECORDS)]
    assert produce_errors(listener, "pay-eu") == [0] * RECORDS
    assert leader_log(view, "pay-eu", 0).log_end_offset == RECORDS
    assert produce_errors(listener, "pay-secret") == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * RECORDS
    assert leader_log(view, "pay-secret", 0).log_end_offset == 0

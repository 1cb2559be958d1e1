"""TLS and SASL with real clients over real sockets on 127.0.0.1: librdkafka (confluent-kafka) and kafka-python
produce and consume over SSL (server and client certificates from a `trustme` CA), SASL_SSL with SCRAM-SHA-256 and
SCRAM-SHA-512, and SASL_PLAINTEXT with PLAIN; wrong credentials and missing client certificates are refused; a
login failure is answered only after `connection.failed.authentication.delay.ms`; no password reaches a log line.

The broker side is a listener over the in-process broker (`InProcessBrokerView`) and its controller's credential store
(`SecurityView.in_process`); the oracle is what the producers sent, read back record for record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors.core.in_process_broker import InProcessBroker
from cluster.protocol.listener import KafkaListener
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.helpers import TlsFiles, add_user, make_tls_files, run, start_broker

ALICE_PASSWORD = "alice-pa55-Secret"
PLAIN_PASSWORD = "plain-only-pa55"
RECORDS = 25
DEADLINE_S = 20.0
FAILED_LOGIN_DELAY_MS = 300


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    running = start_broker(tmp_path_factory.mktemp("broker"))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def security(module_broker: InProcessBroker) -> SecurityView:
    add_user(module_broker.controller, "alice", ALICE_PASSWORD, "SCRAM-SHA-256")
    add_user(module_broker.controller, "alice", ALICE_PASSWORD, "SCRAM-SHA-512")
    add_user(module_broker.controller, "carol", PLAIN_PASSWORD, "SCRAM-SHA-512")
    return SecurityView.in_process(module_broker.controller)


@pytest.fixture(scope="module")
def listener(module_broker: InProcessBroker, tls: TlsFiles, security: SecurityView) -> Iterator[KafkaListener]:
    view = InProcessBrokerView(module_broker)
    properties = {
        "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,CERTS://127.0.0.1:0",
        "listener.security.protocol.map": "SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,CERTS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca),
        "ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "connection.failed.authentication.delay.ms": str(FAILED_LOGIN_DELAY_MS),
    }
    with KafkaListener(properties, view, security) as started:
        yield started


def client_config(listener: KafkaListener, listener_name: str, tls: TlsFiles, **extra: str) -> dict[str, str]:
    """librdkafka settings for one listener: its port, its protocol, the CA for TLS ones."""
    protocol = "SSL" if listener_name == "CERTS" else listener_name
    config = {"bootstrap.servers": f"127.0.0.1:{listener.ports[listener_name]}", "security.protocol": protocol}
    if "SSL" in protocol:
        config["ssl.ca.location"] = str(tls.ca)
    return {**config, **extra}


def produce_and_consume(config: dict[str, str], topic: str) -> None:
    """Sends RECORDS records with a confluent producer and reads them back with a confluent consumer."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    sent = [(f"k{index}".encode(), f"{topic}-{index}".encode()) for index in range(RECORDS)]
    errors: list[Any] = []
    producer = Producer({**config, "message.timeout.ms": str(int(DEADLINE_S * 1000))})
    for key, value in sent:
        producer.produce(topic, value=value, key=key, partition=0, on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(DEADLINE_S) == 0
    assert errors == [None] * RECORDS
    consumer = Consumer({**config, "group.id": "unused", "enable.auto.commit": "false"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        received: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                received.append((message.key(), message.value()))
        assert received == sent
    finally:
        consumer.close()


def login_error(config: dict[str, str]) -> Any:
    """The first error a confluent producer reports while it tries to connect (None if none within the deadline)."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({**config, "error_cb": errors.append, "reconnect.backoff.ms": "1000"})
    deadline = time.monotonic() + DEADLINE_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.flush(0)
    return errors[0] if errors else None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_over_sasl_ssl_with_scram(listener: KafkaListener, tls: TlsFiles, mechanism: str) -> None:
    config = client_config(
        listener,
        "SASL_SSL",
        tls,
        **{"sasl.mechanism": mechanism, "sasl.username": "alice", "sasl.password": ALICE_PASSWORD},
    )
    produce_and_consume(config, f"scram-{mechanism.lower()}")


def test_confluent_over_sasl_plaintext_with_plain_checks_the_scram_store(
    listener: KafkaListener, tls: TlsFiles
) -> None:
    config = client_config(
        listener,
        "SASL_PLAINTEXT",
        tls,
        **{"sasl.mechanism": "PLAIN", "sasl.username": "carol", "sasl.password": PLAIN_PASSWORD},
    )
    produce_and_consume(config, "plain")


def test_confluent_over_ssl_with_a_client_certificate(listener: KafkaListener, tls: TlsFiles) -> None:
    certificate = {"ssl.certificate.location": str(tls.alice), "ssl.key.location": str(tls.alice)}
    produce_and_consume(client_config(listener, "SSL", tls, **certificate), "ssl")
    produce_and_consume(client_config(listener, "CERTS", tls, **certificate), "ssl-custom-listener-name")


@pytest.mark.parametrize(
    ("listener_name", "credentials"),
    [
        ("SASL_SSL", {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "wrong"}),
        ("SASL_SSL", {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "nobody", "sasl.password": ALICE_PASSWORD}),
        ("SASL_SSL", {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "wrong"}),
        ("SASL_PLAINTEXT", {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "wrong"}),
    ],
)
def test_wrong_credentials_fail_with_sasl_authentication_failed(
    listener: KafkaListener, tls: TlsFiles, listener_name: str, credentials: dict[str, str]
) -> None:
    from confluent_kafka import KafkaError

    error = login_error(client_config(listener, listener_name, tls, **credentials))
    assert error is not None and error.code() == KafkaError._AUTHENTICATION, error
    assert "invalid credentials" in error.str()


def test_a_client_without_a_certificate_is_refused_where_one_is_required(
    listener: KafkaListener, tls: TlsFiles
) -> None:
    from confluent_kafka import KafkaError

    error = login_error(client_config(listener, "SSL", tls))
    assert error is not None and error.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def test_kafka_python_over_ssl_sasl_ssl_and_sasl_plaintext(listener: KafkaListener, tls: TlsFiles) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    settings: list[tuple[str, dict[str, Any]]] = [
        ("SSL", {"ssl_cafile": str(tls.ca), "ssl_certfile": str(tls.bob), "ssl_keyfile": str(tls.bob)}),
        (
            "SASL_SSL",
            {
                "ssl_cafile": str(tls.ca),
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice",
                "sasl_plain_password": ALICE_PASSWORD,
            },
        ),
        (
            "SASL_PLAINTEXT",
            {"sasl_mechanism": "PLAIN", "sasl_plain_username": "carol", "sasl_plain_password": PLAIN_PASSWORD},
        ),
    ]
    for protocol, extra in settings:
        common = {"bootstrap_servers": f"127.0.0.1:{listener.ports[protocol]}", "security_protocol": protocol, **extra}
        topic = f"kafka-python-{protocol.lower()}"
        producer = KafkaProducer(**common)
        sent = [f"{protocol}-{index}".encode() for index in range(RECORDS)]
        for value in sent:
            producer.send(topic, value=value, partition=0)
        producer.flush(DEADLINE_S)
        producer.close()
        consumer = KafkaConsumer(**common, enable_auto_commit=False)
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        received: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                received.extend(record.value for record in records)
        consumer.close()
        assert received == sent, protocol


def test_kafka_python_with_a_wrong_password_never_gets_past_the_login(listener: KafkaListener) -> None:
    """kafka-python retries a failed bootstrap until its timeout; the listener counts each refused login."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    before = listener.statistics().authentication_failures
    with pytest.raises(KafkaTimeoutError):
        KafkaProducer(
            bootstrap_servers=f"127.0.0.1:{listener.ports['SASL_PLAINTEXT']}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password="wrong",
            bootstrap_timeout_ms=3000,
        )
    assert listener.statistics().authentication_failures > before


def test_a_failed_login_is_answered_after_the_delay_and_never_logs_the_password(
    listener: KafkaListener, tls: TlsFiles, caplog: pytest.LogCaptureFixture
) -> None:
    attempted = "never-logged-Pa55word"
    before = listener.statistics().authentication_failures
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    error = login_error(
        client_config(
            listener,
            "SASL_PLAINTEXT",
            tls,
            **{"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": attempted},
        )
    )
    elapsed_ms = (time.monotonic() - started) * 1000
    assert error is not None
    assert elapsed_ms >= FAILED_LOGIN_DELAY_MS
    assert listener.statistics().authentication_failures > before
    assert attempted not in caplog.text
    assert ALICE_PASSWORD not in caplog.text
    assert "alice" in caplog.text


def test_large_fetches_over_tls_come_back_byte_for_byte(listener: KafkaListener, tls: TlsFiles) -> None:
    """Segment bytes the listener would `sendfile` on PLAINTEXT are read and encrypted instead: 4 MiB of 64 KiB
    values, each over the 16 KiB region threshold, read back whole."""
    import os

    from confluent_kafka import Consumer, Producer, TopicPartition

    config = client_config(
        listener,
        "SASL_SSL",
        tls,
        **{"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": ALICE_PASSWORD},
    )
    values = [os.urandom(64 << 10) for _ in range(64)]
    producer = Producer({**config, "linger.ms": "20"})
    for value in values:
        producer.produce("tls-large", value=value, partition=0)
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer({**config, "group.id": "unused", "enable.auto.commit": "false"})
    try:
        consumer.assign([TopicPartition("tls-large", 0, 0)])
        received: list[bytes | None] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(values) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=100, timeout=0.5):
                assert message.error() is None, message.error()
                received.append(message.value())
    finally:
        consumer.close()
    assert received == values
    assert listener.statistics().file_bytes_sent == 0, "no segment byte may leave unencrypted"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaListener, SecurityView]]:
    """A SASL_PLAINTEXT listener with the authorizer on, `admin` a super user and no ACL yet."""
    broker = start_broker(tmp_path_factory.mktemp("guarded"))
    security = SecurityView.in_process(broker.controller)
    for user in ("admin", "alice", "bob"):
        add_user(broker.controller, user, f"{user}-{ALICE_PASSWORD}")
    view = InProcessBrokerView(broker)
    properties = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": "0",
    }
    try:
        with KafkaListener(properties, view, security) as started:
            yield started, security
    finally:
        broker.close()


def login(listener: KafkaListener, user: str, password: str | None = None, **extra: str) -> dict[str, str]:
    return {
        "bootstrap.servers": f"127.0.0.1:{listener.port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password if password is not None else f"{user}-{ALICE_PASSWORD}",
        **extra,
    }


def test_principals_from_sasl_logins_are_authorized_by_acls_and_a_super_user_needs_none(
    guarded: tuple[KafkaListener, SecurityView],
) -> None:
    """`admin` (super user) writes with no ACL; alice, granted READ, consumes but may not produce; bob, granted
    nothing, does not even see the topic in Metadata."""
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    listener, _ = guarded
    produce_and_consume(login(listener, "admin"), "ledger")
    admin = AdminClient(login(listener, "admin"))
    grants = [
        AclBinding(
            ResourceType.TOPIC,
            "ledger",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        ),
        AclBinding(
            ResourceType.GROUP,
            "*",
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        ),
    ]
    for future in admin.create_acls(grants).values():
        future.result(timeout=DEADLINE_S)

    alice = login(listener, "alice")
    consumer = Consumer({**alice, "group.id": "alice-reads", "enable.auto.commit": "false"})
    try:
        consumer.assign([TopicPartition("ledger", 0, 0)])
        received: list[bytes | None] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < RECORDS and time.monotonic() < deadline:
            received += [message.value() for message in consumer.consume(100, 0.5) if message.error() is None]
        assert len(received) == RECORDS
    finally:
        consumer.close()

    reports: list[Any] = []
    producer = Producer({**alice, "message.timeout.ms": "5000"})
    producer.produce("ledger", b"not allowed", partition=0, on_delivery=lambda error, _m: reports.append(error))
    producer.flush(DEADLINE_S)
    assert [error.code() for error in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    visible = AdminClient(login(listener, "bob")).list_topics(timeout=DEADLINE_S).topics
    assert "ledger" not in visible
    assert "ledger" in AdminClient(alice).list_topics(timeout=DEADLINE_S).topics


def test_a_password_changed_over_the_wire_applies_to_the_next_login(
    guarded: tuple[KafkaListener, SecurityView],
) -> None:
    """AlterUserScramCredentials from a super user's AdminClient: the new password logs in, the old one fails."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    listener, security = guarded
    before = run(security.scram_credential("bob", "SCRAM-SHA-256"))
    admin = AdminClient(login(listener, "admin"))
    upsertion = UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"bob-new-Pa55"
    )
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(timeout=DEADLINE_S)
    after = run(security.scram_credential("bob", "SCRAM-SHA-256"))
    assert after is not None and before is not None
    assert after.iterations == 8192 and after.stored_key != before.stored_key
    assert AdminClient(login(listener, "bob", "bob-new-Pa55")).list_topics(timeout=DEADLINE_S) is not None
    error = login_error(login(listener, "bob"))
    assert error is not None and error.code() == KafkaError._AUTHENTICATION

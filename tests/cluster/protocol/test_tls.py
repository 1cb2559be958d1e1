"""TLS contexts from PEM files and the principal a client certificate names, over real sockets on 127.0.0.1.

A key encrypted with `ssl.key.password` loads; a wrong password or a missing file fails at start naming the key,
never the password. A client certificate's subject, written as Java's `X500Principal.getName()` writes it (RFC
2253, most specific first), is the principal ACLs name: with the authorizer on, the certificate ACLs allow may
produce and another certificate of the same CA may not.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from actors.core.security.acl_bindings import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from cluster.protocol.listener import KafkaListener
from cluster.protocol.security.tls import server_context
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from storage.config.config_values import Password
from storage.config.security_config import SecurityConfig
from storage.errors import InvalidConfigError
from tests.cluster.protocol.helpers import TlsFiles, add_acls, make_tls_files, start_broker

KEY_PASSWORD = "key-Pa55phrase"
DEADLINE_S = 15.0


def encrypted_keystore(folder: Path) -> Path:
    """A PEM keystore whose private key is encrypted with KEY_PASSWORD."""
    issued = trustme.CA().issue_cert("127.0.0.1")
    key = serialization.load_pem_private_key(issued.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    )
    path = folder / "encrypted.pem"
    path.write_bytes(encrypted + b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    return path


def test_an_encrypted_key_loads_with_its_password_and_fails_without_showing_it(tmp_path: Path) -> None:
    keystore = str(encrypted_keystore(tmp_path))
    settings = {"ssl_keystore_type": "PEM", "ssl_keystore_location": keystore}
    server_context(SecurityConfig(**settings, ssl_key_password=Password(KEY_PASSWORD)), "SSL")
    wrong = "not-the-" + KEY_PASSWORD
    with pytest.raises(InvalidConfigError, match=r"ssl\.keystore\.location") as raised:
        server_context(SecurityConfig(**settings, ssl_key_password=Password(wrong)), "SSL")
    assert wrong not in str(raised.value) and KEY_PASSWORD not in str(raised.value)
    with pytest.raises(InvalidConfigError, match=r"ssl\.truststore\.location"):
        server_context(
            SecurityConfig(
                **settings, ssl_key_password=Password(KEY_PASSWORD), ssl_truststore_location=str(tmp_path / "none.pem")
            ),
            "SSL",
        )


def subject_principal(certificate_file: Path) -> str:
    """`User:` and the certificate's subject in RFC 2253 order, as Kafka's default principal builder names it."""
    certificate = x509.load_pem_x509_certificate(certificate_file.read_bytes())
    return "User:" + certificate.subject.rfc4514_string()


@pytest.fixture
def authorized(tmp_path: Path) -> Iterator[tuple[KafkaListener, TlsFiles]]:
    tls = make_tls_files(tmp_path)
    broker = start_broker(tmp_path / "logs")
    security = SecurityView.in_process(broker.controller)
    alice = subject_principal(tls.alice)
    assert alice.startswith("User:CN=alice,")
    add_acls(
        broker.controller,
        *(
            AclBinding(ResourceType.TOPIC, "*", PatternType.LITERAL, alice, "*", operation, AclPermissionType.ALLOW)
            for operation in (AclOperation.WRITE, AclOperation.CREATE)
        ),
    )
    view = InProcessBrokerView(broker)
    properties = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.server),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca),
        "ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
    try:
        with KafkaListener(properties, view, security) as started:
            yield started, tls
    finally:
        broker.close()


def produce_as(listener: KafkaListener, tls: TlsFiles, certificate: Path) -> Any:
    """What the delivery report of one record says, produced with `certificate` as the client's."""
    from confluent_kafka import Producer

    reports: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{listener.port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(tls.ca),
            "ssl.certificate.location": str(certificate),
            "ssl.key.location": str(certificate),
            "message.timeout.ms": "5000",
        }
    )
    producer.produce("certified", b"value", partition=0, on_delivery=lambda error, _m: reports.append(error))
    deadline = time.monotonic() + DEADLINE_S
    while not reports and time.monotonic() < deadline:
        producer.poll(0.1)
    return reports[0] if reports else "no report"


def test_the_certificate_subject_is_the_principal_acls_name(authorized: tuple[KafkaListener, TlsFiles]) -> None:
    from confluent_kafka import KafkaError

    listener, tls = authorized
    assert produce_as(listener, tls, tls.alice) is None
    refused = produce_as(listener, tls, tls.bob)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

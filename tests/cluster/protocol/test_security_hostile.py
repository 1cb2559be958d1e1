"""Hostile input against TLS and SASL listeners, over raw sockets: a TLS handshake of garbage, a SASL exchange cut
in the middle, a SCRAM proof replayed on another connection, an oversized token before login, and a request sent
before login each close only their own connection, while a client that logs in properly keeps being served.

SCRAM is spoken with `scramp`'s client, the same library the listener uses for its server side, so the bytes are
RFC 5802's; the oracle for "served" is an ApiVersions answer and a completed login on a fresh connection.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from cluster.protocol.framing import SIZE, decode_response, encode_request
from cluster.protocol.handlers.api_versions import API_VERSIONS_KEY
from cluster.protocol.handlers.metadata import METADATA_KEY
from cluster.protocol.handlers.sasl_handlers import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from tests.cluster.protocol.helpers import (
    TlsFiles,
    add_user,
    is_closed_by_server,
    make_tls_files,
    read_frame,
    start_broker,
)

PASSWORD = "hostile-test-Pa55"
MAX_RECEIVE = 4096
TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory, tls: TlsFiles) -> Iterator[KafkaListener]:
    broker = start_broker(tmp_path_factory.mktemp("logs"))
    security = SecurityView.in_process(broker.controller)
    add_user(broker.controller, "alice", PASSWORD)
    view = InProcessBrokerView(broker)
    properties = {
        "listeners": "SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.server),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.server.max.receive.size": str(MAX_RECEIVE),
        "connection.failed.authentication.delay.ms": "0",
    }
    try:
        with KafkaListener(properties, view, security) as started:
            yield started
    finally:
        broker.close()


def call(sock: socket.socket, api_key: int, version: int, values: dict[str, Any], correlation_id: int = 1) -> Any:
    """Sends one request and returns the decoded answer's body."""
    body = build(load_request_schema(api_key, version), values)
    sock.sendall(encode_request(api_key, correlation_id, "hostile", body))
    answered_id, answer = decode_response(read_frame(sock), load_response_schema(api_key, version))
    assert answered_id == correlation_id
    return answer


def api_versions(sock: socket.socket) -> bool:
    answer = call(sock, API_VERSIONS_KEY, 3, {"client_software_name": "t", "client_software_version": "1"})
    return bool(answer.error_code == ErrorCode.none)


def authenticate(sock: socket.socket, token: bytes) -> Any:
    return call(sock, SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token})


def sasl_connection(listener: KafkaListener) -> socket.socket:
    """A connection to the SASL listener that has done ApiVersions and a SCRAM-SHA-256 SaslHandshake."""
    sock = socket.create_connection(("127.0.0.1", listener.ports["SASL_PLAINTEXT"]), timeout=TIMEOUT_S)
    assert api_versions(sock)
    assert call(sock, SASL_HANDSHAKE_KEY, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == ErrorCode.none
    return sock


def logs_in(listener: KafkaListener) -> bool:
    """A full SCRAM login on a new connection, then a Metadata request it may now send."""
    with sasl_connection(listener) as sock:
        client = ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
        first = authenticate(sock, client.get_client_first().encode())
        client.set_server_first(first.auth_bytes.decode())
        final = authenticate(sock, client.get_client_final().encode())
        assert final.error_code == ErrorCode.none
        client.set_server_final(final.auth_bytes.decode())
        answer = call(
            sock,
            METADATA_KEY,
            12,
            {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
            correlation_id=9,
        )
        return answer.cluster_id is not None


def test_a_tls_handshake_of_garbage_closes_only_that_connection(listener: KafkaListener, tls: TlsFiles) -> None:
    with socket.create_connection(("127.0.0.1", listener.ports["SSL"]), timeout=TIMEOUT_S) as bad:
        bad.sendall(b"\x16\x03\x01\x02\x00" + b"\xff" * 600)
        assert is_closed_by_server(bad)
    with socket.create_connection(("127.0.0.1", listener.ports["SSL"]), timeout=TIMEOUT_S) as plain:
        plain.sendall(SIZE.pack(10) + b"not tls!!!")
        assert is_closed_by_server(plain)
    context = ssl.create_default_context(cafile=str(tls.ca))
    with (
        socket.create_connection(("127.0.0.1", listener.ports["SSL"]), timeout=TIMEOUT_S) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as good,
    ):
        assert api_versions(good)
    assert logs_in(listener)


def test_a_sasl_exchange_cut_in_the_middle_leaves_the_listener_serving(listener: KafkaListener) -> None:
    with sasl_connection(listener) as cut:
        client = ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
        assert authenticate(cut, client.get_client_first().encode()).error_code == ErrorCode.none
    with sasl_connection(listener) as half_frame:
        half_frame.sendall(SIZE.pack(200) + b"\x00\x24\x00\x02")
    assert logs_in(listener)


def test_a_replayed_scram_proof_fails_and_closes_the_connection(listener: KafkaListener) -> None:
    client = ScramClient(["SCRAM-SHA-256"], "alice", PASSWORD)
    client_first = client.get_client_first().encode()
    with sasl_connection(listener) as recorded:
        client.set_server_first(authenticate(recorded, client_first).auth_bytes.decode())
        client_final = client.get_client_final().encode()
        assert authenticate(recorded, client_final).error_code == ErrorCode.none
    with sasl_connection(listener) as replay:
        assert authenticate(replay, client_first).error_code == ErrorCode.none
        answer = authenticate(replay, client_final)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert PASSWORD not in (answer.error_message or "")
        assert is_closed_by_server(replay)
    assert logs_in(listener)


def test_an_oversized_token_before_login_closes_the_connection_unread(listener: KafkaListener) -> None:
    before = listener.statistics().connections_closed_for_errors
    with sasl_connection(listener) as big:
        big.sendall(SIZE.pack(MAX_RECEIVE + 1))
        assert is_closed_by_server(big)
    assert listener.statistics().connections_closed_for_errors == before + 1
    assert logs_in(listener)


def test_a_request_before_login_and_an_unknown_mechanism_close_the_connection(listener: KafkaListener) -> None:
    with socket.create_connection(("127.0.0.1", listener.ports["SASL_PLAINTEXT"]), timeout=TIMEOUT_S) as early:
        body = build(
            load_request_schema(METADATA_KEY, 12),
            {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
        )
        early.sendall(encode_request(METADATA_KEY, 1, "hostile", body))
        assert is_closed_by_server(early)
    with socket.create_connection(("127.0.0.1", listener.ports["SASL_PLAINTEXT"]), timeout=TIMEOUT_S) as wrong:
        answer = call(wrong, SASL_HANDSHAKE_KEY, 1, {"mechanism": "GSSAPI"})
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(answer.mechanisms) == ["SCRAM-SHA-256"]
        assert is_closed_by_server(wrong)
    with socket.create_connection(("127.0.0.1", listener.ports["SASL_PLAINTEXT"]), timeout=TIMEOUT_S) as skipped:
        answer = authenticate(skipped, b"n,,n=alice,r=abc")
        assert answer.error_code == ErrorCode.illegal_sasl_state
        assert is_closed_by_server(skipped)
    assert logs_in(listener)

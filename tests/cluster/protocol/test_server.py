"""The socket layer over real sockets on 127.0.0.1: every bad input closes only its own connection while another
client keeps being answered; limits use Kafka's names; requests on one connection are answered in order; a
connection over its address's `connection_creation_rate` is closed unread after its throttle time."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.index import load_request_schema, load_response_schema

from actors.core.quotas.client_quotas import CONNECTION_CREATION_RATE, IP, QuotaAlteration
from cluster.protocol.connection import ConnectionContext
from cluster.protocol.file_region import FileRegion
from cluster.protocol.framing import FIXED_HEADER, SIZE, SplicedFrame, decode_response, encode_request
from cluster.protocol.handlers.api_versions import API_VERSIONS_KEY
from cluster.protocol.handlers.produce import PRODUCE_KEY
from cluster.protocol.listener import KafkaListener
from cluster.protocol.messages import build
from cluster.protocol.server import KafkaServer
from cluster.protocol.views.in_process_broker_view import InProcessBrokerView
from cluster.protocol.views.security_view import SecurityView
from storage.config.listener_config import ListenerConfig
from tests.cluster.protocol.helpers import batch, is_closed_by_server, leader_log, read_frame, run

TIMEOUT_S = 5.0
API_VERSIONS_REQUEST = build(
    load_request_schema(API_VERSIONS_KEY, 3), {"client_software_name": "t", "client_software_version": "1"}
)


@pytest.fixture
def listen(view: InProcessBrokerView) -> Iterator[Callable[..., KafkaListener]]:
    started: list[KafkaListener] = []

    def start(**properties: str) -> KafkaListener:
        listener = KafkaListener(
            {"listeners": "PLAINTEXT://127.0.0.1:0", **{k.replace("_", "."): v for k, v in properties.items()}}, view
        )
        started.append(listener)
        return listener

    yield start
    for listener in started:
        listener.stop()


def connect(listener: KafkaListener) -> socket.socket:
    return socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT_S)


def api_versions(sock: socket.socket, correlation_id: int = 1) -> int:
    """Sends ApiVersions v3 and returns the answer's correlation id."""
    sock.sendall(encode_request(API_VERSIONS_KEY, correlation_id, "t", API_VERSIONS_REQUEST))
    return decode_response(read_frame(sock), load_response_schema(API_VERSIONS_KEY, 3))[0]


@pytest.mark.parametrize(
    "bad_bytes",
    [
        pytest.param(SIZE.pack(5) + b"hello", id="garbage"),
        pytest.param(SIZE.pack(8) + FIXED_HEADER.pack(99, 0, 1), id="unknown-api-key"),
        pytest.param(SIZE.pack(8) + FIXED_HEADER.pack(3, 99, 1), id="unsupported-version"),
        pytest.param(SIZE.pack(104857601), id="over-socket-request-max-bytes"),
        pytest.param(SIZE.pack(-1), id="negative-size"),
        pytest.param(SIZE.pack(2**31 - 1) + b"x" * 100, id="huge-size"),
    ],
)
def test_bad_input_closes_only_its_connection(listen: Callable[..., KafkaListener], bad_bytes: bytes) -> None:
    listener = listen()
    with connect(listener) as good, connect(listener) as bad:
        assert api_versions(good, 1) == 1
        bad.sendall(bad_bytes)
        assert is_closed_by_server(bad)
        assert api_versions(good, 2) == 2
    with connect(listener) as later:
        assert api_versions(later, 3) == 3
    assert listener.statistics().connections_closed_for_errors == 1


def test_a_truncated_frame_closes_its_connection_when_the_peer_stops(listen: Callable[..., KafkaListener]) -> None:
    listener = listen()
    with connect(listener) as good, connect(listener) as bad:
        bad.sendall(SIZE.pack(100) + b"x" * 10)
        bad.shutdown(socket.SHUT_WR)
        assert is_closed_by_server(bad)
        assert api_versions(good) == 1


def test_a_frame_at_socket_request_max_bytes_is_read_one_above_closes(listen: Callable[..., KafkaListener]) -> None:
    listener = listen(socket_request_max_bytes="64")
    request = encode_request(API_VERSIONS_KEY, 1, "t", API_VERSIONS_REQUEST)
    padded = SIZE.pack(64) + request[4:] + b"\x00" * (64 - len(request) + 4)  # trailing bytes are ignored
    with connect(listener) as sock:
        sock.sendall(padded)
        assert decode_response(read_frame(sock), load_response_schema(API_VERSIONS_KEY, 3))[0] == 1
        sock.sendall(SIZE.pack(65))
        assert is_closed_by_server(sock)


def test_idle_connections_are_closed_after_connections_max_idle_ms(listen: Callable[..., KafkaListener]) -> None:
    listener = listen(connections_max_idle_ms="300")
    with connect(listener) as sock:
        assert api_versions(sock) == 1
        started = time.monotonic()
        assert is_closed_by_server(sock)
        assert 0.25 <= time.monotonic() - started < TIMEOUT_S
    assert listener.statistics().connections_closed_idle == 1


def test_max_connections_per_ip_refuses_the_extra_connection(listen: Callable[..., KafkaListener]) -> None:
    listener = listen(max_connections_per_ip="1")
    with connect(listener) as first:
        assert api_versions(first) == 1
        with connect(listener) as second:
            assert is_closed_by_server(second)
        assert api_versions(first, 2) == 2
    assert listener.statistics().connections_refused == 1


@pytest.mark.parametrize("queued_max_requests", ["500", "1"])
def test_pipelined_requests_are_answered_in_order_and_acks_zero_gets_no_answer(
    listen: Callable[..., KafkaListener], view: InProcessBrokerView, queued_max_requests: str
) -> None:
    """Produce and the ApiVersions around it, pipelined; also with `queued.max.requests` at 1, where each frame is
    read only once the one before is answered."""
    run(view.create_topic("t", 1))
    listener = listen(queued_max_requests=queued_max_requests)
    produce = build(
        load_request_schema(PRODUCE_KEY, 9),
        {
            "transactional_id": None,
            "acks": 0,
            "timeout": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch([(b"k", b"v", 1)])}]}],
        },
    )
    with connect(listener) as sock:
        sock.sendall(
            encode_request(API_VERSIONS_KEY, 10, "t", API_VERSIONS_REQUEST)
            + encode_request(PRODUCE_KEY, 11, "t", produce)
            + encode_request(API_VERSIONS_KEY, 12, "t", API_VERSIONS_REQUEST)
            + encode_request(API_VERSIONS_KEY, 13, "t", API_VERSIONS_REQUEST)
        )
        answers = [decode_response(read_frame(sock), load_response_schema(API_VERSIONS_KEY, 3))[0] for _ in range(3)]
    assert answers == [10, 12, 13]
    assert leader_log(view, "t", 0).log_end_offset == 1


def test_a_too_new_api_versions_request_is_answered_in_v0_format(listen: Callable[..., KafkaListener]) -> None:
    listener = listen()
    with connect(listener) as sock:
        payload = FIXED_HEADER.pack(API_VERSIONS_KEY, 200, 4) + b"\x00\x01c" + b"\x00\x00"
        sock.sendall(SIZE.pack(len(payload)) + payload)
        correlation_id, answer = decode_response(read_frame(sock), load_response_schema(API_VERSIONS_KEY, 0))
        assert (correlation_id, answer.error_code) == (4, 35)
        assert api_versions(sock, 5) == 5


def test_stop_closes_open_connections(listen: Callable[..., KafkaListener]) -> None:
    listener = listen()
    with connect(listener) as sock:
        assert api_versions(sock) == 1
        listener.stop()
        assert is_closed_by_server(sock)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT_S)
    assert struct.calcsize(">i") == SIZE.size


def test_stop_does_not_wait_for_a_client_that_reads_no_answers(listen: Callable[..., KafkaListener]) -> None:
    """A client that pipelines requests and never reads their answers fills the socket buffers both ways; `stop`
    drops its connection with the answers still unsent rather than waiting for it to read them (a broker shutting
    down does not wait on its slowest client)."""
    listener = listen()
    request = encode_request(API_VERSIONS_KEY, 1, "t", API_VERSIONS_REQUEST)
    with connect(listener) as sock:
        sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + TIMEOUT_S
        # Until the kernel takes no more: the server has stopped reading, its answers back up unread.
        while time.monotonic() < deadline:
            try:
                sent += sock.send(request * 64)
            except BlockingIOError:
                time.sleep(0.2)
                try:
                    sent += sock.send(request * 64)
                except BlockingIOError:
                    break
        assert sent > 1 << 20, "the socket took every request: no backlog to test"
        started = time.monotonic()
        listener.stop()
        assert time.monotonic() - started < 2.0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT_S)


def test_file_regions_are_sent_whole_past_the_socket_buffer_and_a_region_cut_short_closes_the_connection(
    tmp_path: Path,
) -> None:
    """A spliced answer's bytes and file regions arrive byte for byte, in order, also when a region is larger than the
    socket takes at once (its rest waits for the reader, who starts late here); a region whose file is shorter than
    the region ends the connection rather than leaving the frame torn."""
    content = os.urandom(24 << 20)
    path = tmp_path / "segment.log"
    path.write_bytes(content)
    short = tmp_path / "short.log"
    short.write_bytes(content[:1000])
    large = 20 << 20

    async def handle(payload: bytes, _context: ConnectionContext) -> SplicedFrame:
        if payload == b"short":
            return SplicedFrame((SIZE.pack(4 + 4000) + b"head", FileRegion(io.FileIO(short, "rb"), 0, 4000)))
        first, second = FileRegion(io.FileIO(path, "rb"), 100, large), FileRegion(io.FileIO(path, "rb"), 7, 9)
        return SplicedFrame((SIZE.pack(4 + large + 4 + 9) + b"head", first, b"tail", second))

    def receive_all(sock: socket.socket) -> bytes:
        received = bytearray()
        while chunk := sock.recv(1 << 20):
            received += chunk
        return bytes(received)

    def client(port: int) -> tuple[bytes, bytes]:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
            sock.sendall(SIZE.pack(4) + b"full")
            time.sleep(0.3)  # the socket's buffer fills meanwhile: the rest of the region waits for this reader
            sock.shutdown(socket.SHUT_WR)  # the server closes once it answered
            whole = receive_all(sock)
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
            sock.sendall(SIZE.pack(5) + b"short")
            torn = receive_all(sock)
        return whole, torn

    async def scenario() -> tuple[bytes, bytes]:
        server = KafkaServer(handle, ListenerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0"}))
        port = next(iter((await server.start()).values()))
        try:
            return await asyncio.to_thread(client, port)
        finally:
            await server.stop()

    whole, torn = asyncio.run(scenario())
    assert whole == SIZE.pack(4 + large + 4 + 9) + b"head" + content[100 : 100 + large] + b"tail" + content[7:16]
    assert torn == SIZE.pack(4 + 4000) + b"head" + content[:1000], "cut at the file's end, then closed"


def connect_from(listener: KafkaListener, source: str) -> socket.socket:
    """A connection to the listener from the local address `source` (any of 127.0.0.0/8)."""
    return socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT_S, source_address=(source, 0))


def served(sock: socket.socket) -> bool:
    """Whether the connection answers an ApiVersions (False: the server closed it unread)."""
    try:
        return api_versions(sock) == 1
    except (ConnectionError, OSError, struct.error, EOFError):
        return False


def test_a_connection_over_its_ip_connection_creation_rate_is_closed_unread_after_its_throttle_time(
    view: InProcessBrokerView, security: SecurityView
) -> None:
    """With `connection_creation_rate` 2 for 127.0.0.1 over two one-second windows, the third connection within a
    second is held, then closed with no answer, while 127.0.0.2's connections are served."""
    listener = KafkaListener(
        {"listeners": "PLAINTEXT://127.0.0.1:0", "quota.window.num": "2", "quota.window.size.seconds": "1"},
        view,
        security,
    )
    try:
        rate = QuotaAlteration(((IP, "127.0.0.1"),), ((CONNECTION_CREATION_RATE, 2.0),))
        assert run(security.alter_client_quotas([rate], False)) == [None]
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            with connect_from(listener, "127.0.0.1") as sock:
                opened = time.monotonic()
                if not served(sock):
                    held_s = time.monotonic() - opened
                    break
            assert time.monotonic() < deadline, "no connection was throttled"
        assert 0.05 <= held_s <= 1.5, held_s
        assert listener.statistics().connections_refused >= 1
        for _ in range(5):
            with connect_from(listener, "127.0.0.2") as other:
                assert served(other)
    finally:
        listener.stop()

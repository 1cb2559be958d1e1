"""The same-node transaction channel over real abstract Unix sockets: `actors.channels.transaction_channel` serving the
in-process broker's real `TransactionCoordinator` (no Ray), `actors.channels.transaction_connection` as the
listener's end. Answers are checked against what the same calls answer on the coordinator directly and against the
`__transaction_state` records and markers that land; bad clients (garbage, cut frames, frames over
`socket.request.max.bytes`, too many connections, another user) lose their own connection while the coordinator goes
on serving, and a channel that goes away fails its client's calls as retriable."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.channels.append_frames import SIZE, SOCKET_REQUEST_MAX_BYTES
from actors.channels.transaction_channel import MAX_CONNECTIONS, TransactionChannel
from actors.channels.transaction_connection import TransactionConnections
from actors.channels.transaction_frames import RequestKind, TransactionRequest, decode_answer, encode_request
from actors.core.in_process_broker import InProcessBroker
from actors.core.transactions.transaction_coordinator import TransactionCoordinator
from actors.core.transactions.transaction_metadata import TxnError
from storage.clock import MockClock
from storage.errors import BrokerNotAvailableError, InvalidRequestError
from storage.records.layout import ControlRecordType
from storage.records.record_batch import iter_batches
from tests.actors.channels.raw_clients import drained_until_closed, raw_socket, receive_exactly, run, wait_until

# Every wait in this file is bounded: an answer over a local socket takes well under a millisecond.
TIMEOUT_S = 5.0
TOPIC = "orders"
TXN_ID = "payments"
PROPERTIES = {"transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path, properties=PROPERTIES, clock=MockClock())
    running.controller.create_topic(TOPIC, 2)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def coordinator(broker: InProcessBroker) -> TransactionCoordinator:
    return broker.transaction_coordinator


@pytest.fixture
def channel(coordinator: TransactionCoordinator) -> Iterator[TransactionChannel]:
    serving = TransactionChannel(coordinator)
    yield serving
    serving.close()


async def calls(address: str, *steps: tuple[str, tuple[Any, ...]]) -> list[Any]:
    """Each (method, args) called in order on one `TransactionConnections`, the answers (or raised errors)."""
    connections = TransactionConnections(address)
    answers: list[Any] = []
    try:
        for method, args in steps:
            try:
                answers.append(await getattr(connections, method)(*args))
            except Exception as exc:
                answers.append(exc)
    finally:
        connections.close()
    return answers


def producer(coordinator: TransactionCoordinator, transactional_id: str = TXN_ID) -> tuple[int, int]:
    initialized = coordinator.init_producer_id(transactional_id, 60_000)
    assert initialized.error == TxnError.NONE
    return initialized.producer_id, initialized.producer_epoch


def markers(broker: InProcessBroker, partition: int) -> list[str]:
    served = broker.internal_partition(TOPIC, partition)
    found = []
    for batch in iter_batches(served.read(0, 1 << 20)):
        marker = batch.end_transaction_marker() if batch.is_control else None
        if marker is not None:
            found.append(marker.control_type.name)
    return found


def still_serves(address: str, coordinator: TransactionCoordinator) -> None:
    """A well-formed call on a new connection is answered as the coordinator answers it."""
    producer_id, epoch = producer(coordinator, f"probe-{secrets.token_hex(4)}")
    (answer,) = run(calls(address, ("verify_partitions", (f"no-such-{producer_id}", producer_id, epoch, [(TOPIC, 0)]))))
    assert answer == {(TOPIC, 0): TxnError.INVALID_PRODUCER_ID_MAPPING}


# --- calls that land ---------------------------------------------------------------------------------------------


def test_a_committed_transaction_over_the_channel_lands_as_through_the_coordinator(
    broker: InProcessBroker, coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producer_id, epoch = producer(coordinator)
    answers = run(
        calls(
            channel.address,
            ("add_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 0), (TOPIC, 1)])),
            ("verify_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 1), (TOPIC, 0)])),
            ("end_transaction", (TXN_ID, producer_id, epoch, True)),
        )
    )
    assert answers == [TxnError.NONE, {(TOPIC, 1): TxnError.NONE, (TOPIC, 0): TxnError.NONE}, TxnError.NONE]
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "CompleteCommit"
    assert markers(broker, 0) == markers(broker, 1) == [ControlRecordType.COMMIT.name]


def test_each_answer_is_the_coordinators_own_for_the_same_call(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producer_id, epoch = producer(coordinator)
    cases = [
        ("verify_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 0)])),
        ("add_partitions", (TXN_ID, producer_id, epoch + 1, [(TOPIC, 0)])),
        ("add_partitions", (TXN_ID, producer_id + 1, epoch, [(TOPIC, 0)])),
        ("end_transaction", (TXN_ID, producer_id, epoch, True)),
        ("add_partitions", ("", producer_id, epoch, [(TOPIC, 0)])),
        ("add_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 0)])),
        ("verify_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 1), (TOPIC, 0)])),
        ("end_transaction", (TXN_ID, producer_id, epoch, False)),
        ("end_transaction", (TXN_ID, producer_id, epoch, False)),
        ("end_transaction", (TXN_ID, producer_id, epoch, True)),
    ]
    for method, args in cases:
        (over_channel,) = run(calls(channel.address, (method, args)))
        direct = getattr(coordinator, method)(*args)
        if method == "end_transaction" or (method == "add_partitions" and over_channel == TxnError.NONE):
            # The call changed the state: the direct call answers the retry of it.
            continue
        assert over_channel == direct, (method, args)
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "CompleteAbort"


def test_a_fenced_producer_is_refused_over_the_channel(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producer_id, epoch = producer(coordinator)
    assert producer(coordinator) == (producer_id, epoch + 1)
    answers = run(
        calls(
            channel.address,
            ("add_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 0)])),
            ("verify_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 0)])),
            ("end_transaction", (TXN_ID, producer_id, epoch, True)),
        )
    )
    assert answers == [TxnError.PRODUCER_FENCED, {(TOPIC, 0): TxnError.PRODUCER_FENCED}, TxnError.PRODUCER_FENCED]


def test_concurrent_calls_are_each_answered_their_own(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producers = {f"{TXN_ID}-{index}": producer(coordinator, f"{TXN_ID}-{index}") for index in range(MAX_CONNECTIONS)}

    async def all_at_once() -> list[Any]:
        connections = TransactionConnections(channel.address)
        try:
            await asyncio.gather(
                *(
                    connections.add_partitions(tid, pid, epoch, [(TOPIC, index % 2)])
                    for index, (tid, (pid, epoch)) in enumerate(producers.items())
                )
            )
            return list(
                await asyncio.gather(
                    *(
                        connections.verify_partitions(tid, pid, epoch, [(TOPIC, 0), (TOPIC, 1)])
                        for tid, (pid, epoch) in producers.items()
                    )
                )
            )
        finally:
            connections.close()

    verified = run(all_at_once())
    for index, answer in enumerate(verified):
        added = (TOPIC, index % 2)
        assert answer == {
            tp: TxnError.NONE if tp == added else TxnError.TRANSACTION_ABORTABLE for tp in [(TOPIC, 0), (TOPIC, 1)]
        }


# --- bad clients -------------------------------------------------------------------------------------------------


def test_a_request_that_does_not_parse_is_answered_invalid_request_and_its_connection_ends(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    with raw_socket(channel.address) as sock:
        sock.sendall(SIZE.pack(3) + b"\x07\x00\x00")
        head = receive_exactly(sock, SIZE.size)
        assert head is not None
        body = receive_exactly(sock, SIZE.unpack(head)[0])
        assert body is not None
        assert type(decode_answer(body)) is InvalidRequestError
        assert sock.recv(1) == b""
    still_serves(channel.address, coordinator)


GARBAGE = {
    "size cut": b"\x00\x00",
    "body cut": SIZE.pack(40) + b"\x00\x00\x08payments",
    "valid frame then a cut one": encode_request(TransactionRequest(RequestKind.END_TRANSACTION, TXN_ID, 1, 0))
    + SIZE.pack(9)
    + b"\x00",
    "text": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "over the request limit": SIZE.pack(SOCKET_REQUEST_MAX_BYTES + 1) + b"\x00" * 64,
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_and_cut_frames_end_only_their_own_connection(
    coordinator: TransactionCoordinator, channel: TransactionChannel, case: str
) -> None:
    with raw_socket(channel.address) as sock:
        sock.sendall(GARBAGE[case])
        sock.shutdown(socket.SHUT_WR)
        drained_until_closed(sock)
    still_serves(channel.address, coordinator)


def test_random_byte_streams_never_stop_the_coordinator(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producer_id, epoch = producer(coordinator)
    generator = random.Random(20261124)
    for _ in range(60):
        with raw_socket(channel.address) as sock:
            size = generator.randrange(0, 64)
            body = generator.randbytes(generator.randrange(0, size + 8))
            if body and generator.random() < 0.7:
                body = bytes([generator.randrange(0, 3)]) + body[1:]
            sock.sendall(SIZE.pack(size) + body)
            sock.shutdown(socket.SHUT_WR)
            drained_until_closed(sock)
    assert channel.connection_count == 0
    (answer,) = run(calls(channel.address, ("add_partitions", (TXN_ID, producer_id, epoch, [(TOPIC, 0)]))))
    assert answer == TxnError.NONE


def test_connections_over_the_limit_are_closed_unanswered_and_those_admitted_are_served(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    with contextlib.ExitStack() as stack:
        held = []
        for count in range(1, MAX_CONNECTIONS + 1):
            held.append(stack.enter_context(raw_socket(channel.address)))
            wait_until(lambda count=count: channel.connection_count == count)
        producer_id, epoch = producer(coordinator)
        request = encode_request(
            TransactionRequest(RequestKind.END_TRANSACTION, TXN_ID, producer_id, epoch, commit=True)
        )
        # Each admitted connection is answered (the coordinator refuses a commit with no transaction).
        held[0].sendall(request)
        head = receive_exactly(held[0], SIZE.size)
        assert head is not None
        assert decode_answer(receive_exactly(held[0], SIZE.unpack(head)[0]) or b"") == TxnError.INVALID_TXN_STATE
        with raw_socket(channel.address) as extra:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                extra.sendall(request)
            assert drained_until_closed(extra) == b""
        (over_limit,) = run(calls(channel.address, ("end_transaction", (TXN_ID, producer_id, epoch, True))))
        assert isinstance(over_limit, BrokerNotAvailableError) and over_limit.retriable
    still_serves(channel.address, coordinator)


NOBODY_UID = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")
# Run as another user: connects to the channel, sends one valid frame, prints whether any answer came back.
_OTHER_USER_CLIENT = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(5)
sock.connect("\\0" + sys.argv[1])
try:
    sock.sendall(bytes.fromhex(sys.argv[2]))
    print("answered" if sock.recv(4096) else "closed")
except OSError:
    print("closed")
"""


@pytest.mark.skipif(os.getuid() != 0 or not SYSTEM_PYTHON.exists(), reason="needs root to run a client as nobody")
def test_a_connection_of_another_user_is_closed_unanswered(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producer_id, epoch = producer(coordinator)
    frame = encode_request(TransactionRequest(RequestKind.ADD_PARTITIONS, TXN_ID, producer_id, epoch, ((TOPIC, 0),)))
    child = subprocess.run(
        [str(SYSTEM_PYTHON), "-I", "-S", "-c", _OTHER_USER_CLIENT, channel.address[1:], frame.hex()],
        user=NOBODY_UID,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
        check=True,
    )
    assert child.stdout.strip() == "closed"
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "Empty"


# --- the listener's connections ----------------------------------------------------------------------------------


def test_a_call_to_a_missing_channel_fails_as_broker_not_available() -> None:
    (answer,) = run(
        calls(f"\0raybroker-transactions-missing-{secrets.token_hex(8)}", ("end_transaction", (TXN_ID, 1, 0, True)))
    )
    assert isinstance(answer, BrokerNotAvailableError) and answer.retriable


def test_a_channel_closed_fails_the_next_call_on_a_kept_connection_as_broker_not_available(
    coordinator: TransactionCoordinator,
) -> None:
    producer_id, epoch = producer(coordinator)
    channel = TransactionChannel(coordinator)

    async def across_the_close() -> list[Any]:
        connections = TransactionConnections(channel.address)
        try:
            first = await connections.add_partitions(TXN_ID, producer_id, epoch, [(TOPIC, 0)])
            channel.close()
            try:
                await connections.end_transaction(TXN_ID, producer_id, epoch, True)
            except BrokerNotAvailableError as exc:
                return [first, exc]
            return [first, None]
        finally:
            connections.close()

    first, second = run(across_the_close())
    assert first == TxnError.NONE
    assert isinstance(second, BrokerNotAvailableError) and second.retriable
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "Ongoing"


def test_an_answer_that_does_not_parse_fails_the_call_as_broker_not_available() -> None:
    address = f"\0raybroker-test-{os.getpid()}-{secrets.token_hex(8)}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.settimeout(TIMEOUT_S)
    server.bind(address)
    server.listen(1)

    async def against_a_bad_server() -> Any:
        connections = TransactionConnections(address)
        call = asyncio.ensure_future(connections.end_transaction(TXN_ID, 1, 0, True))
        peer, _ = await asyncio.to_thread(server.accept)
        with peer:
            await asyncio.to_thread(peer.recv, 4096)
            peer.sendall(SIZE.pack(2) + b"\x09\x09")
            try:
                return await call
            except BrokerNotAvailableError as exc:
                return exc
            finally:
                connections.close()

    try:
        answer = run(against_a_bad_server())
    finally:
        server.close()
    assert isinstance(answer, BrokerNotAvailableError) and answer.retriable


def test_connections_closed_refuse_later_calls_as_broker_not_available(
    coordinator: TransactionCoordinator, channel: TransactionChannel
) -> None:
    producer_id, epoch = producer(coordinator)

    async def after_close() -> Any:
        connections = TransactionConnections(channel.address)
        assert await connections.add_partitions(TXN_ID, producer_id, epoch, [(TOPIC, 0)]) == TxnError.NONE
        connections.close()
        try:
            return await connections.end_transaction(TXN_ID, producer_id, epoch, True)
        except BrokerNotAvailableError as exc:
            return exc

    answer = run(after_close())
    assert isinstance(answer, BrokerNotAvailableError) and answer.retriable
    wait_until(lambda: channel.connection_count == 0)
    described = coordinator.describe(TXN_ID)
    assert described is not None and described.state == "Ongoing"

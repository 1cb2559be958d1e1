"""The same-node append channel over real abstract Unix sockets: `actors.channels.append_channel` serving a real
`PartitionLogActor` (the plain class, no Ray) through `append_channel()`, `actors.channels.append_connection` as the
producer's end. Offsets are checked against a list oracle, records against kafka-python's reader, errors against
what `PartitionLogActor.append` raises for the same bytes; bad clients (garbage, cut frames, frames over
`socket.request.max.bytes`, another user) lose their own connection while the channel goes on serving."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.channels.append_connection import AppendConnection, AppendReply
from actors.channels.append_frames import (
    SIZE,
    SOCKET_REQUEST_MAX_BYTES,
    decode_answer,
    encode_answer,
    encode_request,
)
from actors.core.transactions.markers import TransactionMarker
from actors.server.partition_log import PartitionLogActor
from storage.errors import (
    AnswerLostError,
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    RaybrokerError,
)
from storage.partition.log import LogAppendInfo
from storage.records.layout import ControlRecordType
from storage.records.record_batch import CRC_OFFSET, RecordBatchBuilder
from tests.actors.channels.raw_clients import raw_socket, receive_exactly
from tests.storage.builders import Rec, as_recs, batch_bytes, kafka_decode, simple_records

# Every wait in this file is bounded: an answer over a local socket takes well under a millisecond.
TIMEOUT_S = 5.0
TOPIC = "events"


def now_records(count: int, tag: int = 0) -> list[Rec]:
    """`count` records stamped now (the log's retention never sees them as old)."""
    return simple_records(count, timestamp=int(time.time() * 1000), tag=tag)


def open_part(directory: Path) -> PartitionLogActor:
    return PartitionLogActor(str(directory), {})


def read_all(part: PartitionLogActor) -> list[Rec]:
    """Every record of the log, read back as a consumer does and decoded by kafka-python."""
    out: list[Rec] = []
    offset = 0
    while offset < part.offsets()[1]:
        chunk = [record for record in kafka_decode(part.read(offset, 1 << 20)) if record.offset >= offset]
        assert chunk and chunk[0].offset == offset, f"nothing to read at offset {offset}"
        out.extend(as_recs(chunk))
        offset = chunk[-1].offset + 1
    return out


def answered(reply: AppendReply) -> AppendReply:
    """`reply` once it is done (the reader thread completes it)."""
    done = threading.Event()
    reply.add_done_callback(lambda _: done.set())
    assert done.wait(TIMEOUT_S), "the append was not answered"
    return reply


def append(connection: AppendConnection, batches: bytes, *, topic: str = TOPIC, partition: int = 0) -> LogAppendInfo:
    return answered(connection.append(topic, partition, batches, 1)).result()


def refusal(reply: AppendReply) -> RaybrokerError:
    """The error an answered reply raises."""
    with pytest.raises(RaybrokerError) as raised:
        answered(reply).result()
    return raised.value


@pytest.fixture
def part(tmp_path: Path) -> Iterator[PartitionLogActor]:
    actor = open_part(tmp_path / f"{TOPIC}-0")
    yield actor
    actor.close()


@pytest.fixture
def address(part: PartitionLogActor) -> str:
    served = part.append_channel()
    assert served is not None and served.startswith("\0")
    return served


@pytest.fixture
def connection(address: str) -> Iterator[AppendConnection]:
    opened = AppendConnection.connect(address)
    assert opened is not None
    yield opened
    opened.close()


def closed_unanswered(sock: socket.socket) -> bool:
    return sock.recv(1) == b""


@contextlib.contextmanager
def listener() -> Iterator[tuple[str, socket.socket]]:
    """A bare abstract-namespace listener (a channel that never answers unless the test writes)."""
    address = f"\0raybroker-test-{os.getpid()}-{secrets.token_hex(8)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT_S)
    try:
        sock.bind(address)
        sock.listen(1)
        yield address, sock
    finally:
        sock.close()


@contextlib.contextmanager
def connected_to_listener() -> Iterator[tuple[AppendConnection, socket.socket]]:
    """An `AppendConnection` to a bare listener, and the listener's end of it (closed after the test)."""
    with listener() as (address, server):
        connection = AppendConnection.connect(address)
        assert connection is not None
        try:
            peer, _ = server.accept()
            with peer:
                yield connection, peer
        finally:
            connection.close()


# --- appends that land -------------------------------------------------------------------------------------------


def test_appends_get_the_offsets_the_log_assigns_and_read_back_as_sent(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    oracle: list[Rec] = []
    for index in range(10):
        batch = now_records(1 + index % 4, tag=index)
        info = append(connection, batch_bytes(batch))
        expected = (len(oracle), len(oracle) + len(batch) - 1)
        assert (info.first_offset, info.last_offset) == expected
        assert info.batch_offsets == (expected,) and info.record_count == len(batch) and not info.duplicate
        oracle.extend(batch)
    assert part.offsets() == (0, len(oracle), len(oracle))
    assert read_all(part) == oracle


def test_a_request_of_several_batches_answers_each_batchs_offsets(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    batches = [now_records(2, tag=0), now_records(3, tag=1), now_records(1, tag=2)]
    info = append(connection, b"".join(batch_bytes(batch) for batch in batches))
    assert info.batch_offsets == ((0, 1), (2, 4), (5, 5))
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (0, 5, 3, 6)
    assert read_all(part) == [record for batch in batches for record in batch]


def test_an_answer_equals_what_the_same_append_through_the_actor_answers(
    tmp_path: Path, connection: AppendConnection
) -> None:
    twin = open_part(tmp_path / "twin" / f"{TOPIC}-0")
    try:
        for index in range(4):
            batches = batch_bytes(now_records(index + 1, tag=index))
            over_channel = append(connection, batches)
            direct = twin.append(batches)
            # log_append_time is -1 (CreateTime), so nothing but the offsets and the batches' own fields differ.
            assert over_channel == direct
    finally:
        twin.close()


def test_pipelined_appends_are_answered_in_send_order_across_partitions(
    tmp_path: Path, part: PartitionLogActor, connection: AppendConnection
) -> None:
    second = open_part(tmp_path / f"{TOPIC}-1")
    try:
        assert second.append_channel() == connection.address  # one channel per process
        oracle: dict[int, list[Rec]] = {0: [], 1: []}
        expected: list[tuple[int, int, int]] = []
        answer_order: list[int] = []
        replies = []

        def record_answer(index: int, _: AppendReply) -> None:
            answer_order.append(index)

        for index in range(60):
            partition = index % 3 % 2
            batch = now_records(1 + index % 5, tag=index)
            expected.append((partition, len(oracle[partition]), len(oracle[partition]) + len(batch) - 1))
            oracle[partition].extend(batch)
            reply = connection.append(TOPIC, partition, batch_bytes(batch), 1)
            reply.add_done_callback(functools.partial(record_answer, index))
            replies.append(reply)
        infos = [answered(reply).result() for reply in replies]
        assert answer_order == list(range(60))
        got = [(p, info.first_offset, info.last_offset) for (p, _, _), info in zip(expected, infos, strict=True)]
        assert got == expected
        assert read_all(part) == oracle[0] and read_all(second) == oracle[1]
    finally:
        second.close()


@pytest.mark.parametrize("acks", [0, -1])
def test_acks_zero_and_all_append_on_a_partition_of_one_replica(
    part: PartitionLogActor, connection: AppendConnection, acks: int
) -> None:
    batch = now_records(3)
    info = answered(connection.append(TOPIC, 0, batch_bytes(batch), acks)).result()
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert read_all(part) == batch


def test_an_idempotent_retry_answers_the_first_offsets_as_a_duplicate(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    append(connection, batch_bytes(now_records(2)))
    batch = now_records(3, tag=1)
    payload = batch_bytes(batch, producer_id=7, producer_epoch=0, base_sequence=0)
    first = append(connection, payload)
    retry = append(connection, payload)
    assert (first.first_offset, first.last_offset, first.duplicate) == (2, 4, False)
    assert (retry.first_offset, retry.last_offset, retry.duplicate) == (2, 4, True)
    assert part.offsets()[1] == 5
    assert read_all(part)[2:] == batch


def test_a_sequence_gap_is_refused_as_out_of_order_and_the_connection_goes_on(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    append(connection, batch_bytes(now_records(1), producer_id=8, producer_epoch=0, base_sequence=0))
    gap = batch_bytes(now_records(1, tag=1), producer_id=8, producer_epoch=0, base_sequence=5)
    with pytest.raises(OutOfOrderSequenceError) as direct:
        part.append(gap)
    error = refusal(connection.append(TOPIC, 0, gap, 1))
    assert type(error) is OutOfOrderSequenceError and str(error) == str(direct.value)
    assert append(connection, batch_bytes(now_records(1, tag=2))).first_offset == 1


# --- transaction markers ----------------------------------------------------------------------------------------


def transactional_batch(records: list[Rec], producer_id: int, producer_epoch: int, base_sequence: int = 0) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence, is_transactional=True
    )
    for record in records:
        builder.append(record.key, record.value, timestamp=record.timestamp)
    return builder.build()


def open_transactions(part: PartitionLogActor) -> dict[int, int]:
    """Producer id -> first offset of its open transaction on the partition."""
    return {
        p.producer_id: p.current_txn_start_offset for p in part.describe_producers() if p.current_txn_start_offset >= 0
    }


@pytest.mark.parametrize("result", [ControlRecordType.COMMIT, ControlRecordType.ABORT])
def test_a_marker_over_the_channel_ends_the_producers_transaction_as_the_actors_marker_does(
    part: PartitionLogActor, connection: AppendConnection, result: ControlRecordType
) -> None:
    assert append(connection, transactional_batch(now_records(3), 7, 0)).last_offset == 2
    assert open_transactions(part) == {7: 0}
    written = answered(connection.write_marker(TOPIC, 0, TransactionMarker(7, 0, 5, result))).result()
    assert (written.first_offset, written.last_offset) == (3, 3)
    assert open_transactions(part) == {}
    assert append(connection, transactional_batch(now_records(1), 7, 0, base_sequence=3)).first_offset == 4
    through_actor = part.append_transaction_marker(7, 0, 5, result)
    assert through_actor.first_offset == 5
    assert part.offsets()[1:] == (6, 6)


def test_a_marker_of_an_older_epoch_is_refused_as_the_actor_refuses_it_and_the_connection_goes_on(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    append(connection, transactional_batch(now_records(1), 7, 3))
    error = refusal(connection.write_marker(TOPIC, 0, TransactionMarker(7, 2, 0, ControlRecordType.ABORT)))
    with pytest.raises(RaybrokerError) as through_actor:
        part.append_transaction_marker(7, 2, 0, ControlRecordType.ABORT)
    assert (type(error), error.message) == (type(through_actor.value), through_actor.value.message)
    assert isinstance(error, InvalidProducerEpochError)
    assert open_transactions(part) == {7: 0}
    answered(connection.write_marker(TOPIC, 0, TransactionMarker(7, 3, 0, ControlRecordType.COMMIT))).result()
    assert open_transactions(part) == {}


def test_a_coordinators_offset_commit_over_the_channel_lands_as_through_the_actor(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    """Origin COORDINATOR: the producer's epoch is checked, its sequence is not (each commit starts at 0), and the
    batch opens the producer's transaction as the actor's own `append_from_coordinator` does."""
    first = answered(connection.append_from_coordinator(TOPIC, 0, transactional_batch(now_records(2), 9, 1)))
    assert (first.result().first_offset, first.result().last_offset) == (0, 1)
    assert open_transactions(part) == {9: 0}
    again = answered(connection.append_from_coordinator(TOPIC, 0, transactional_batch(now_records(1), 9, 1)))
    through_actor = part.append_from_coordinator(transactional_batch(now_records(1), 9, 1))
    assert (again.result().first_offset, through_actor.first_offset) == (2, 3)
    error = refusal(connection.append_from_coordinator(TOPIC, 0, transactional_batch(now_records(1), 9, 0)))
    with pytest.raises(RaybrokerError) as refused_by_actor:
        part.append_from_coordinator(transactional_batch(now_records(1), 9, 0))
    assert (type(error), error.message) == (type(refused_by_actor.value), refused_by_actor.value.message)
    assert isinstance(error, InvalidProducerEpochError)
    answered(connection.write_marker(TOPIC, 0, TransactionMarker(9, 1, 0, ControlRecordType.COMMIT))).result()
    assert open_transactions(part) == {}
    assert part.offsets()[1:] == (5, 5)


def test_a_marker_for_a_partition_not_served_is_refused_as_broker_not_available(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    error = refusal(connection.write_marker("elsewhere", 0, TransactionMarker(7, 0, 0, ControlRecordType.COMMIT)))
    assert isinstance(error, BrokerNotAvailableError) and error.retriable
    assert part.offsets()[1:] == (0, 0)


# --- appends that are refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("topic", "partition"), [("other", 0), (TOPIC, 1), (TOPIC, -1), ("", 0)])
def test_a_partition_not_served_is_refused_as_broker_not_available_and_the_connection_goes_on(
    part: PartitionLogActor, connection: AppendConnection, topic: str, partition: int
) -> None:
    error = refusal(connection.append(topic, partition, batch_bytes(now_records(2)), 1))
    assert type(error) is BrokerNotAvailableError
    assert not connection.broken
    batch = now_records(2, tag=1)
    assert append(connection, batch_bytes(batch)).first_offset == 0
    assert read_all(part) == batch


def _crc_zeroed(good: bytes) -> bytes:
    return good[:CRC_OFFSET] + bytes(4) + good[CRC_OFFSET + 4 :]


BAD_BATCHES = {
    "crc mismatch": (_crc_zeroed, CorruptRecordError),
    "truncated": (lambda good: good[:-3], CorruptRecordError),
    "base offset not 0": (lambda good: (5).to_bytes(8, "big") + good[8:], InvalidRecordError),
    "empty": (lambda good: b"", InvalidRecordError),
    "garbage": (lambda good: b"\x00" * 7 + b"\xff" * 40, CorruptRecordError),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_a_bad_batch_is_refused_with_the_error_the_log_raises_and_nothing_is_written(
    part: PartitionLogActor, connection: AppendConnection, case: str
) -> None:
    kept = now_records(3)
    append(connection, batch_bytes(kept))
    damage, expected = BAD_BATCHES[case]
    bad = damage(batch_bytes(now_records(2, tag=1)))
    with pytest.raises(expected) as direct:
        part.append(bad)
    error = refusal(connection.append(TOPIC, 0, bad, 1))
    assert type(error) is type(direct.value) and str(error) == str(direct.value)
    assert part.offsets()[1] == 3
    after = now_records(1, tag=2)
    assert append(connection, batch_bytes(after)).first_offset == 3
    assert read_all(part) == kept + after


@pytest.mark.parametrize("acks", [2, -2, 127])
def test_acks_outside_kafkas_values_are_refused_as_invalid_request(
    part: PartitionLogActor, connection: AppendConnection, acks: int
) -> None:
    error = refusal(connection.append(TOPIC, 0, batch_bytes(now_records(1)), acks))
    assert type(error) is InvalidRequestError
    assert part.offsets()[1] == 0
    assert append(connection, batch_bytes(now_records(1))).first_offset == 0


def test_after_close_appends_are_refused_and_the_log_keeps_what_it_had(
    tmp_path: Path, part: PartitionLogActor, connection: AppendConnection
) -> None:
    kept = now_records(3)
    append(connection, batch_bytes(kept))
    part.close()
    assert type(refusal(connection.append(TOPIC, 0, batch_bytes(now_records(2, tag=1)), 1))) is BrokerNotAvailableError
    assert not connection.broken
    reopened = open_part(tmp_path / f"{TOPIC}-0")
    try:
        assert read_all(reopened) == kept
    finally:
        reopened.close()


def test_after_the_log_dir_goes_offline_appends_are_refused(tmp_path: Path) -> None:
    offline = open_part(tmp_path / f"{TOPIC}-0")
    address = offline.append_channel()
    assert address is not None
    connection = AppendConnection.connect(address)
    assert connection is not None
    try:
        append(connection, batch_bytes(now_records(1)))
        offline.go_offline("disk failed in a test")
        assert type(refusal(connection.append(TOPIC, 0, batch_bytes(now_records(1)), 1))) is BrokerNotAvailableError
        assert not connection.broken
    finally:
        connection.close()
        offline.close()


def test_the_old_log_of_a_partition_closing_leaves_the_new_one_served(tmp_path: Path) -> None:
    old = open_part(tmp_path / "old" / f"{TOPIC}-0")
    new = open_part(tmp_path / "new" / f"{TOPIC}-0")
    try:
        address = old.append_channel()
        assert address is not None and new.append_channel() == address
        old.close()
        connection = AppendConnection.connect(address)
        assert connection is not None
        try:
            batch = now_records(2)
            assert append(connection, batch_bytes(batch)).first_offset == 0
        finally:
            connection.close()
        assert read_all(new) == batch
    finally:
        old.close()
        new.close()


def test_a_folder_not_named_as_a_partition_has_no_channel(tmp_path: Path) -> None:
    plain = open_part(tmp_path / "not_a_partition")
    try:
        assert plain.append_channel() is None
    finally:
        plain.close()


# --- bad clients -------------------------------------------------------------------------------------------------


def test_a_frame_over_the_request_limit_closes_its_connection_and_the_others_go_on(
    part: PartitionLogActor, address: str, connection: AppendConnection
) -> None:
    with raw_socket(address) as sock:
        sock.sendall(SIZE.pack(SOCKET_REQUEST_MAX_BYTES + 1) + b"\x01\x00\x06events")
        assert closed_unanswered(sock)
    batch = now_records(2)
    assert append(connection, batch_bytes(batch)).first_offset == 0
    assert read_all(part) == batch


def test_a_request_that_does_not_parse_is_answered_invalid_request_and_its_connection_ends(
    part: PartitionLogActor, address: str, connection: AppendConnection
) -> None:
    with raw_socket(address) as sock:
        sock.sendall(SIZE.pack(2) + b"\x01\x00")
        head = receive_exactly(sock, SIZE.size)
        assert head is not None
        body = receive_exactly(sock, SIZE.unpack(head)[0])
        assert body is not None
        assert type(decode_answer(body)) is InvalidRequestError
        assert closed_unanswered(sock)
    assert append(connection, batch_bytes(now_records(1))).first_offset == 0


GARBAGE = {
    "size cut": b"\x00\x00",
    "body cut": SIZE.pack(40) + b"\x01\x00\x06events",
    "valid frame then a cut one": b"".join(encode_request(TOPIC, 0, 1, b"")) + SIZE.pack(9) + b"\x00",
    "text": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_and_cut_frames_end_only_their_own_connection(
    part: PartitionLogActor, address: str, connection: AppendConnection, case: str
) -> None:
    with raw_socket(address) as sock:
        sock.sendall(GARBAGE[case])
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):
            pass
    assert part.offsets()[1] == 0
    assert append(connection, batch_bytes(now_records(1))).first_offset == 0


def test_random_byte_streams_never_stop_the_channel(
    part: PartitionLogActor, address: str, connection: AppendConnection
) -> None:
    generator = random.Random(4242)
    for _ in range(40):
        with raw_socket(address) as sock:
            size = generator.randrange(0, 64)
            sock.sendall(SIZE.pack(size) + generator.randbytes(generator.randrange(0, size + 8)))
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass
    assert part.offsets()[1] == 0
    assert append(connection, batch_bytes(now_records(1))).first_offset == 0


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
    part: PartitionLogActor, address: str, connection: AppendConnection
) -> None:
    frame = b"".join(encode_request(TOPIC, 0, 1, batch_bytes(now_records(2))))
    child = subprocess.run(
        [str(SYSTEM_PYTHON), "-I", "-S", "-c", _OTHER_USER_CLIENT, address[1:], frame.hex()],
        user=NOBODY_UID,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
        check=True,
    )
    assert child.stdout.strip() == "closed"
    assert part.offsets()[1] == 0
    assert append(connection, batch_bytes(now_records(1))).first_offset == 0


# --- the producer's connection -----------------------------------------------------------------------------------


def test_connect_to_a_missing_address_returns_none() -> None:
    assert AppendConnection.connect(f"\0raybroker-append-missing-{secrets.token_hex(8)}") is None
    assert AppendConnection.connect("/nonexistent/raybroker/append.sock") is None


def test_close_fails_the_replies_still_waiting_as_lost_and_later_appends_as_not_sent() -> None:
    """A waiting reply's request was sent and may have been carried out (`AnswerLostError`); an append after the
    close never left (`BrokerNotAvailableError`)."""
    with connected_to_listener() as (connection, _):
        replies = [connection.append(TOPIC, 0, batch_bytes(now_records(1)), 1) for _ in range(3)]
        assert not any(reply.done() for reply in replies)
        connection.close()
        assert all(reply.done() for reply in replies) and connection.broken
        for reply in replies:
            assert type(refusal(reply)) is AnswerLostError
        late = connection.append(TOPIC, 0, batch_bytes(now_records(1)), 1)
        assert late.done() and type(refusal(late)) is BrokerNotAvailableError


def test_the_channel_going_away_fails_the_replies_still_waiting_as_lost() -> None:
    with connected_to_listener() as (connection, peer):
        replies = [connection.append(TOPIC, 0, batch_bytes(now_records(1)), 1) for _ in range(3)]
        peer.close()
        for reply in replies:
            error = refusal(reply)
            assert type(error) is AnswerLostError and error.retriable
        assert connection.broken


def test_answers_complete_the_replies_in_order_then_an_unasked_answer_breaks_the_connection() -> None:
    infos = [LogAppendInfo(i, i, -1, -1, -1, 0, 1, 1, 70, ((i, i),)) for i in range(3)]
    with connected_to_listener() as (connection, peer):
        replies = [connection.append(TOPIC, 0, batch_bytes(now_records(1)), 1) for _ in range(2)]
        peer.sendall(encode_answer(infos[0]) + encode_answer(infos[1]))
        assert [answered(reply).result() for reply in replies] == infos[:2]
        # An answer for a request never sent: the connection cannot trust its order any more.
        peer.sendall(encode_answer(infos[2]))
        deadline = time.monotonic() + TIMEOUT_S
        while not connection.broken:
            assert time.monotonic() < deadline, "the connection took an unasked answer"
            time.sleep(0.001)
        assert type(refusal(connection.append(TOPIC, 0, b"", 1))) is BrokerNotAvailableError


def test_an_answer_that_does_not_parse_breaks_the_connection_and_fails_its_reply() -> None:
    with connected_to_listener() as (connection, peer):
        reply = connection.append(TOPIC, 0, batch_bytes(now_records(1)), 1)
        peer.sendall(SIZE.pack(1) + b"\x07")
        assert type(refusal(reply)) is AnswerLostError
        assert connection.broken


@pytest.mark.slow
def test_many_pipelined_appends_are_all_answered(part: PartitionLogActor, address: str) -> None:
    # More appends in flight than the sockets' buffers hold: the producer's send waits for the channel to read while
    # the channel waits for its answers to be read, so the reader must take answers while a send blocks. A lock
    # shared by both wedged some burst of four in every run (the first one alone in seven runs of eight).
    bursts, appends = 4, 10_000
    payload = batch_bytes(now_records(1))
    for burst in range(bursts):
        connection = AppendConnection.connect(address)
        assert connection is not None
        replies: list[AppendReply] = []

        def send(connection: AppendConnection = connection, replies: list[AppendReply] = replies) -> None:
            for _ in range(appends):
                replies.append(connection.append(TOPIC, 0, payload, 1))

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            sender.join(30.0)
            assert not sender.is_alive(), f"burst {burst}: the sender is stuck after {len(replies)} appends"
            offsets = [answered(reply).result().first_offset for reply in replies]
            assert offsets == list(range(burst * appends, (burst + 1) * appends))
        finally:
            if sender.is_alive():
                # Unblocks a stuck sendmsg, which holds the lock a send takes.
                connection._socket.shutdown(socket.SHUT_RDWR)
                sender.join(TIMEOUT_S)
            connection.close()


def test_a_frame_larger_than_one_read_lands_whole_between_small_ones(
    part: PartitionLogActor, connection: AppendConnection
) -> None:
    # Three batches of ~600 KB in one request: a 1.8 MB frame, read into its own buffer over several reads.
    now = int(time.time() * 1000)
    large = [simple_records(600, timestamp=now, value_size=1000, tag=tag) for tag in range(3)]
    small = now_records(2, tag=9)
    first = append(connection, batch_bytes(small))
    frame = b"".join(batch_bytes(records) for records in large)
    assert len(frame) > 1 << 20
    info = append(connection, frame)
    last = append(connection, batch_bytes(small))
    assert (first.first_offset, info.first_offset, info.last_offset, last.first_offset) == (0, 2, 1801, 1802)
    assert info.batch_offsets == ((2, 601), (602, 1201), (1202, 1801))
    assert read_all(part) == [*small, *(record for records in large for record in records), *small]


def test_a_connection_ending_inside_a_large_frame_leaves_the_channel_serving(
    part: PartitionLogActor, address: str, connection: AppendConnection
) -> None:
    with raw_socket(address) as sock:
        sock.sendall(SIZE.pack(3 << 20) + b"\0" * (2 << 20))
    # Nothing of the cut frame was appended, and the channel still answers others.
    assert append(connection, batch_bytes(now_records(1))).first_offset == 0
    assert part.offsets()[1] == 1

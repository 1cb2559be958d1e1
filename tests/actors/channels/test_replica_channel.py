"""The replica channel over real TCP sockets on this node's address: `actors.channels.replica_channel` serving a real
`PartitionLogActor` (the plain class, no Ray) that leads with a follower, `actors.channels.leader_connection` as the
follower's end. Answers are checked against what the actor's own `replicate` (the Ray call's method) answers for the
same fetch, a follower's copy against the leader's log, refusals against the typed errors `Replica.replicate`
raises; bad clients (no token, garbage, frames over `socket.request.max.bytes`) lose their own connection while the
channel goes on serving."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from actors.channels.append_frames import SIZE, SOCKET_REQUEST_MAX_BYTES, decode_error
from actors.channels.leader_connection import LeaderConnection, ReplicaChannelError
from actors.channels.replica_channel import ReplicaChannelAddress
from actors.channels.replica_fetch_frames import TOKEN_BYTES, ReplicaFetchRequest, encode_request
from actors.core.replication.follower import ReplicaFetch, ReplicaFetcher, ReplicaSettings, SharedFetchMember
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.server.partition_log import PartitionLogActor
from actors.server.replica_fetch_pieces import join
from storage.config.log_config import LogConfig
from storage.errors import (
    BrokerNotAvailableError,
    FencedLeaderEpochError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from storage.partition.log import Log
from tests.storage.builders import batch_bytes, kafka_decode, simple_records

TIMEOUT_S = 5.0
TOPIC = "copied"
EPOCH = 3
FOLLOWER = "follower-node"


def node() -> str:
    """The actor's node: "" outside Ray, Ray's node id when an earlier test of the session started Ray."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[PartitionLogActor]:
    """The partition's leader in `EPOCH`, with `FOLLOWER` assigned, holding 3 batches of 5 records."""
    actor = PartitionLogActor(str(tmp_path / f"{TOPIC}-0"), {})
    me = node()
    actor.update_replication(LeaderAndIsr(TOPIC, 0, me, EPOCH, (me, FOLLOWER), (me,)))
    for tag in range(3):
        actor.append(batch_bytes(simple_records(5, timestamp=int(time.time() * 1000), tag=tag)))
    yield actor
    actor.close()


@pytest.fixture
def address(leader: PartitionLogActor) -> ReplicaChannelAddress:
    served = leader.replica_channel()
    assert served is not None
    return served


@pytest.fixture
def connection(address: ReplicaChannelAddress) -> Iterator[LeaderConnection]:
    opened = LeaderConnection(address)
    yield opened
    opened.close()


def request(offset: int = 0, *, epoch: int = EPOCH, topic: str = TOPIC, partition: int = 0) -> ReplicaFetchRequest:
    return ReplicaFetchRequest(topic, partition, FOLLOWER, offset, 1 << 20, 0, epoch)


@contextlib.contextmanager
def raw_socket(address: ReplicaChannelAddress) -> Iterator[socket.socket]:
    """A client socket that sends whatever bytes a test chooses."""
    with socket.create_connection((address.host, address.port), TIMEOUT_S) as sock:
        sock.settimeout(TIMEOUT_S)
        yield sock


def closed_unanswered(sock: socket.socket) -> bool:
    """The peer closed without a byte sent (a reset when it closed with our bytes unread)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_fetch_answers_what_the_actors_replicate_answers(
    leader: PartitionLogActor, connection: LeaderConnection
) -> None:
    for offset in (0, 5, 10, 15):
        over_channel = connection.fetch(request(offset), TIMEOUT_S)
        by_call = join(leader.replicate(FOLLOWER, offset, 1 << 20, 0, EPOCH, 1))
        assert bytes(over_channel.records) == bytes(by_call.records)
        assert (over_channel.high_watermark, over_channel.log_start_offset, over_channel.log_end_offset) == (
            by_call.high_watermark,
            by_call.log_start_offset,
            by_call.log_end_offset,
        )
    assert [record.value for record in kafka_decode(bytes(connection.fetch(request(0), TIMEOUT_S).records))] == [
        record.value for tag in range(3) for record in simple_records(5, tag=tag)
    ]


def test_a_follower_copies_the_leaders_log_through_the_channel(
    tmp_path: Path, leader: PartitionLogActor, connection: LeaderConnection
) -> None:
    follower = Log.open(tmp_path / "follower" / f"{TOPIC}-0", LogConfig.from_properties({}))
    follower.set_replicated(True)

    class ChannelLink:
        """The follower's link: fetches over the channel, the rest from the leader's actor in process."""

        closed = False

        def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
            return connection.fetch(
                ReplicaFetchRequest(TOPIC, 0, FOLLOWER, offset, max_bytes, max_wait_ms, EPOCH), TIMEOUT_S
            )

        def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
            return leader.epoch_end_offset(epoch, EPOCH)

        def log_start_offset(self) -> int:
            return leader.offsets()[0]

        def share(self, member: SharedFetchMember) -> bool:
            return False

        def close(self) -> None:
            self.closed = True

    link = ChannelLink()
    fetcher = ReplicaFetcher(
        "copy", follower, link, ReplicaSettings(fetch_max_bytes=200, fetch_wait_max_ms=50), lambda: None
    )
    fetcher.start()
    deadline = time.monotonic() + TIMEOUT_S
    while follower.high_watermark < 15 and time.monotonic() < deadline:
        time.sleep(0.01)
    fetcher.stop()
    fetcher.join(TIMEOUT_S)
    try:
        assert link.closed
        assert follower.log_end_offset == follower.high_watermark == 15
        assert bytes(follower.read(0, 1 << 20).records) == leader.read(0, 1 << 20)
        assert leader.offsets()[1] == 15, "the follower's fetches moved the leader's high watermark"
    finally:
        follower.close()


def test_the_leaders_refusals_come_back_typed_and_the_connection_goes_on(
    leader: PartitionLogActor, connection: LeaderConnection
) -> None:
    with pytest.raises(FencedLeaderEpochError):
        connection.fetch(request(epoch=EPOCH - 1), TIMEOUT_S)
    with pytest.raises(UnknownLeaderEpochError):
        connection.fetch(request(epoch=EPOCH + 1), TIMEOUT_S)
    with pytest.raises(OffsetOutOfRangeError) as raised:
        connection.fetch(request(16), TIMEOUT_S)
    assert raised.value.offset == 16
    for topic, partition in (("other", 0), (TOPIC, 1)):
        with pytest.raises(BrokerNotAvailableError):
            connection.fetch(request(topic=topic, partition=partition), TIMEOUT_S)
    assert connection.fetch(request(10), TIMEOUT_S).log_end_offset == 15


def test_a_closed_partition_is_served_no_more(leader: PartitionLogActor, connection: LeaderConnection) -> None:
    assert connection.fetch(request(), TIMEOUT_S).log_end_offset == 15
    leader.close()
    with pytest.raises(BrokerNotAvailableError):
        connection.fetch(request(), TIMEOUT_S)


def test_a_connection_without_the_token_is_closed_unanswered_and_the_token_is_never_shown(
    address: ReplicaChannelAddress,
) -> None:
    assert address.token.hex() not in repr(address) and str(address.token) not in repr(address)
    wrong = bytes(byte ^ 1 for byte in address.token)
    with raw_socket(address) as sock:
        sock.sendall(wrong + encode_request(request()))
        assert closed_unanswered(sock)
    with raw_socket(address) as sock:
        sock.sendall(address.token[: TOKEN_BYTES // 2])
        sock.shutdown(socket.SHUT_WR)
        assert closed_unanswered(sock)
    with pytest.raises(ReplicaChannelError):
        LeaderConnection(ReplicaChannelAddress(address.host, address.port, wrong)).fetch(request(), TIMEOUT_S)
    opened = LeaderConnection(address)
    try:
        assert opened.fetch(request(), TIMEOUT_S).log_end_offset == 15
    finally:
        opened.close()


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(SIZE.pack(SOCKET_REQUEST_MAX_BYTES + 1), id="over-socket.request.max.bytes"),
        pytest.param(SIZE.pack(3) + b"\x00\x10x", id="topic-longer-than-the-frame"),
        pytest.param(SIZE.pack(2) + b"\x00\x00", id="no-fields"),
        pytest.param(SIZE.pack(10) + b"\x00", id="cut-frame"),
    ],
)
def test_bad_frames_end_only_their_own_connection(
    address: ReplicaChannelAddress, connection: LeaderConnection, frame: bytes
) -> None:
    with raw_socket(address) as sock:
        sock.sendall(address.token + frame)
        if frame.startswith(SIZE.pack(10)):
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(1 << 16):
            answer += chunk
    if answer:
        (size,) = SIZE.unpack_from(answer)
        assert isinstance(decode_error(answer[SIZE.size : SIZE.size + size]), InvalidRequestError)
    assert connection.fetch(request(5), TIMEOUT_S).log_end_offset == 15


def test_a_channel_that_cannot_be_reached_is_a_channel_error(address: ReplicaChannelAddress) -> None:
    with socket.socket() as unused:
        unused.bind((address.host, 0))
        port = unused.getsockname()[1]
    with pytest.raises(ReplicaChannelError):
        LeaderConnection(ReplicaChannelAddress(address.host, port, address.token))

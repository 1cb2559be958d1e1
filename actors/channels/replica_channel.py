"""The replica channel: followers fetch from the partitions a process leads over TCP, without a Ray call.

A follower's fetch as a Ray call (`PartitionLogActor.replicate`) costs the leader's process the answer's records sliced
into pieces Ray returns inline (`actors.server.replica_fetch_pieces`), each pickled and sent over gRPC, and the
follower's process the pieces unpickled and joined again: with `acks=all` over three replicas that work was most of what
the partition processes did besides writing, and it is why three replicas took well over three times one's CPU. Kafka's
follower fetches over a socket from the leader broker (`ReplicaFetcherThread`); so does a raybroker follower: a process
that holds partition logs listens, once asked, on a TCP port of its node's address and answers each fetch frame
(`actors.channels.replica_fetch_frames`) with `Replica.replicate`, the method the Ray call runs: its epoch and offset
checks, the follower's progress and the high watermark, the long poll for new records. The records go out as the log
read them, after a 33-byte head.

- A fetch may ask for many partitions at once (Kafka's follower Fetch: one request per follower broker and leader
  broker carries every partition it follows there; `actors.server.replica_fetch_session`): each is answered as
  `Replica.replicate` answers it without waiting; when none has records the channel waits, up to the fetch's max
  wait, for a change to any of them (`LogChanges.watch`), then answers them all again. Once the answer holds
  `replica.fetch.response.max.bytes` of records, the partitions after are answered with their offsets and no records
  (their followers' progress is recorded all the same). A fetch of one partition waits as `Replica.replicate` does.
- A connection remembers what it last answered each partition its follower had wholly (no records, the follower at
  the log end): while the partition has not changed since (its `LogChanges` count) and the follower asks from the
  same offset in the same epoch, that answer is sent again without asking the replica, for up to
  `UNCHANGED_REUSE_S`, so each partition's follower progress and ISR checks still run that often (Kafka's
  incremental fetch sessions, KIP-227, spare the leader the same sweep over partitions where nothing happened).

- `serve(host, topic, partition, fetch)` adds a partition to this process's channel, which listens from the first
  call on `host`, and answers the channel's address and token (`ReplicaChannelAddress`); `stop_serving` removes it
  when its log closes. A fetch of a partition not served here is answered with `BrokerNotAvailableError`, which the
  follower answers by looking its leader up again.
- Who may fetch: a connection's first bytes must be the channel's token (`TOKEN_BYTES` random bytes drawn when the
  channel starts), which a follower learns from a Ray call to the leader: a process that cannot call the cluster's
  actors cannot read a partition here. Any other connection is closed unanswered; the token is never logged.
- Limits: Kafka's names and defaults. A request frame larger than `socket.request.max.bytes` (100 MiB) closes its
  connection, as does one that does not parse (answered with `InvalidRequestError` first), so one bad client never
  stops the channel or another connection; a connection silent for `connections.max.idle.ms` (10 min), or whose
  token does not come within `request.timeout.ms` (30 s), is closed; at most `socket.listen.backlog.size` (50)
  connections wait to be accepted.
- Threads: one accepts, one per connection serves it (a follower keeps one connection and one fetch in flight per
  leader process; a fetch may wait `replica.fetch.wait.max.ms` for records, as a Ray call's would).
"""

from __future__ import annotations

import hmac
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from actors.channels.append_frames import SIZE, encode_error, over_request_limit
from actors.channels.local_sockets import SOCKET_LISTEN_BACKLOG_SIZE, read_exactly
from actors.channels.replica_fetch_frames import (
    TOKEN_BYTES,
    PartitionFetch,
    SharedFetchRequest,
    decode_request,
    encode_answer,
)
from actors.channels.served_partitions import PartitionChannel, ProcessChannel
from actors.core.replication.follower import ReplicaFetch
from actors.core.replication.log_changes import LogChanges
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# Kafka's `connections.max.idle.ms` default, in seconds: a connection silent this long is closed.
CONNECTIONS_MAX_IDLE_S = 600.0
# Kafka's `request.timeout.ms` default, in seconds: how long a connection's token and each answer's send may take.
REQUEST_TIMEOUT_S = 30.0

# How long a connection answers an unchanged partition without asking its replica (see the module docstring).
UNCHANGED_REUSE_S = 1.0

# How long the channel waits after a failed accept (out of file descriptors) before it accepts again.
ACCEPT_BACKOFF_S = 0.1

# `Replica.replicate`: (follower, offset, max_bytes, max_wait_ms, leader_epoch) -> the answer.
FollowerFetch = Callable[[str, int, int, int, int], ReplicaFetch]


@dataclass(frozen=True, slots=True)
class ServedReplica:
    """What the channel answers a partition's follower fetches with: its `Replica.replicate`, and the partition's
    change counter, which a fetch of many partitions waits on."""

    fetch: FollowerFetch
    changes: LogChanges


@dataclass(frozen=True, slots=True)
class _Answered:
    """What a connection last answered a partition whose follower had it wholly, and when."""

    replica: ServedReplica
    offset: int
    leader_epoch: int
    count: int
    answer: ReplicaFetch
    at: float


@dataclass(frozen=True, slots=True)
class ReplicaChannelAddress:
    """Where a process's replica channel listens, and the token a connection opens with."""

    host: str
    port: int
    token: bytes

    def __repr__(self) -> str:
        return f"ReplicaChannelAddress({self.host}:{self.port})"


class ReplicaChannel(PartitionChannel[ServedReplica, ReplicaChannelAddress]):
    """One process's listener for followers' fetches; see the module docstring."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self._socket = socket.create_server((host, 0), backlog=SOCKET_LISTEN_BACKLOG_SIZE)
        self.address = ReplicaChannelAddress(host, self._socket.getsockname()[1], secrets.token_bytes(TOKEN_BYTES))
        self._closed = False
        threading.Thread(target=self._accept_connections, name="raybroker-replica-channel", daemon=True).start()

    def close(self) -> None:
        """Stops accepting connections (those open end with their peers)."""
        self._closed = True
        self._socket.close()

    def _accept_connections(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._socket.accept()
            except OSError as exc:
                if not self._closed:
                    logger.warning("replica channel %r: accept failed: %s", self.address, exc)
                    time.sleep(ACCEPT_BACKOFF_S)
                continue
            threading.Thread(
                target=self._serve, args=(connection,), name="raybroker-replica-channel-connection", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        """Checks the connection's token, then answers its fetches in order until it ends."""
        with connection:
            try:
                connection.settimeout(REQUEST_TIMEOUT_S)
                if not hmac.compare_digest(read_exactly(connection, TOKEN_BYTES), self.address.token):
                    logger.warning("replica channel: refused a connection that did not open with the token")
                    return
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                answered: dict[TopicPartition, _Answered] = {}
                while True:
                    connection.settimeout(CONNECTIONS_MAX_IDLE_S)
                    (size,) = SIZE.unpack(read_exactly(connection, SIZE.size))
                    if over_request_limit(size, "replica channel", logger):
                        return
                    connection.settimeout(REQUEST_TIMEOUT_S)
                    body = read_exactly(connection, size)
                    try:
                        request = decode_request(body)
                    except InvalidRequestError as exc:
                        connection.sendall(encode_error(exc))
                        return
                    self._answer(connection, request, answered)
            except OSError:
                return
            except Exception:
                logger.exception("replica channel: closing a connection after an unexpected error")

    def _answer(
        self, connection: socket.socket, request: SharedFetchRequest, answered: dict[TopicPartition, _Answered]
    ) -> None:
        """Runs one fetch of one or more partitions and sends its answer; `answered` is what the connection
        remembers (see the module docstring)."""
        served = [self._served.get(fetch.topic, fetch.partition) for fetch in request.partitions]
        if len(served) == 1:
            answers = [self._fetch(request, request.partitions[0], served[0], request.max_wait_ms)]
        else:
            seen = [None if replica is None else replica.changes.count for replica in served]
            answers = self._fetch_all(request, served, answered)
            if not any(_answered(answer) for answer in answers) and self._wait_for_change(
                served, seen, request.max_wait_ms
            ):
                answers = self._fetch_all(request, served, answered)
        connection.sendall(encode_answer(answers))

    def _fetch_all(
        self,
        request: SharedFetchRequest,
        served: list[ServedReplica | None],
        answered: dict[TopicPartition, _Answered],
    ) -> list[ReplicaFetch | RaybrokerError]:
        """Each partition's answer without waiting, records only until the answer holds the request's max bytes;
        an unchanged partition's remembered answer."""
        answers: list[ReplicaFetch | RaybrokerError] = []
        left = request.response_max_bytes
        now = time.monotonic()
        for fetch, replica in zip(request.partitions, served, strict=True):
            key = (fetch.topic, fetch.partition)
            count = None if replica is None else replica.changes.count
            known = answered.get(key)
            if (
                known is not None
                and known.replica is replica
                and known.count == count
                and (known.offset, known.leader_epoch) == (fetch.offset, fetch.leader_epoch)
                and now - known.at < UNCHANGED_REUSE_S
            ):
                answers.append(known.answer)
                continue
            answer = self._fetch(request, fetch, replica, 0)
            if isinstance(answer, ReplicaFetch) and answer.records:
                if left <= 0:
                    answer = ReplicaFetch(b"", answer.high_watermark, answer.log_start_offset, answer.log_end_offset)
                left -= len(answer.records)
            if (
                replica is not None
                and count is not None
                and isinstance(answer, ReplicaFetch)
                and not answer.records
                and answer.log_end_offset == fetch.offset
            ):
                answered[key] = _Answered(replica, fetch.offset, fetch.leader_epoch, count, answer, now)
            else:
                answered.pop(key, None)
            answers.append(answer)
        return answers

    @staticmethod
    def _wait_for_change(served: list[ServedReplica | None], seen: list[int | None], max_wait_ms: int) -> bool:
        """Waits up to `max_wait_ms` for a change to any served partition after the counts `seen`; whether one came."""
        watcher = threading.Event()
        replicas = [replica for replica in served if replica is not None]
        for replica in replicas:
            replica.changes.watch(watcher)
        try:
            if any(
                replica is not None and replica.changes.count != count
                for replica, count in zip(served, seen, strict=True)
            ):
                return True
            return watcher.wait(max(max_wait_ms, 0) / 1000)
        finally:
            for replica in replicas:
                replica.changes.unwatch(watcher)

    @staticmethod
    def _fetch(
        request: SharedFetchRequest, fetch: PartitionFetch, replica: ServedReplica | None, max_wait_ms: int
    ) -> ReplicaFetch | RaybrokerError:
        """One partition's answer, or the typed error it is refused with."""
        if replica is None:
            return BrokerNotAvailableError(f"{fetch.topic}-{fetch.partition} is not served by this channel")
        try:
            return replica.fetch(request.follower, fetch.offset, fetch.max_bytes, max_wait_ms, fetch.leader_epoch)
        except RaybrokerError as exc:
            return exc
        except Exception as exc:
            logger.exception("replica channel: a fetch of %s-%d failed", fetch.topic, fetch.partition)
            return RaybrokerError(f"the fetch failed unexpectedly: {type(exc).__name__}")


def _answered(answer: ReplicaFetch | RaybrokerError) -> bool:
    """Whether a partition's answer is worth sending without waiting: records, or an error."""
    return not isinstance(answer, ReplicaFetch) or bool(answer.records)


_CHANNEL: ProcessChannel[ServedReplica, ReplicaChannelAddress] = ProcessChannel()


def serve(host: str, topic: str, partition: int, replica: ServedReplica) -> ReplicaChannelAddress:
    """Serves (topic, partition)'s follower fetches with `replica` on this process's channel, which listens on `host`
    from the first call; returns the channel's address."""
    return _CHANNEL.serve(partial(ReplicaChannel, host), topic, partition, replica)


def stop_serving(topic: str, partition: int, replica: ServedReplica) -> None:
    """Stops serving (topic, partition) with `replica` (its log closed); nothing if this process has no channel."""
    _CHANNEL.stop_serving(topic, partition, replica)


__all__ = [
    "CONNECTIONS_MAX_IDLE_S",
    "REQUEST_TIMEOUT_S",
    "UNCHANGED_REUSE_S",
    "FollowerFetch",
    "ReplicaChannel",
    "ReplicaChannelAddress",
    "ServedReplica",
    "serve",
    "stop_serving",
]

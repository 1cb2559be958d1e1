"""The replica channel: followers fetch from the partitions a process leads over TCP, without a Ray call.

A follower's fetch as a Ray call (`PartitionLogActor.replicate`) costs the leader's process the answer's records sliced
into pieces Ray returns inline (`actors.server.replica_fetch_pieces`), each pickled and sent over gRPC, and the
follower's process the pieces unpickled and joined again: with `acks=all` over three replicas that work was most of what
the partition processes did besides writing, and it is why three replicas took well over three times one's CPU. Kafka's
follower fetches over a socket from the leader broker (`ReplicaFetcherThread`); so does a raybroker follower: a process
that holds partition logs listens, once asked, on a TCP port of its node's address and answers each fetch frame
(`actors.channels.replica_fetch_frames`) with `Replica.replicate`, the method the Ray call runs: its epoch and offset
checks, the follower's progress and the high watermark, the long poll for new records. The records go out as the log
read them, after a 29-byte head.

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
- Threads: one accepts, one per connection serves it (a follower fetcher keeps one connection and one fetch in
  flight; a fetch may wait `replica.fetch.wait.max.ms` for records, as a Ray call's would).
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
from actors.channels.replica_fetch_frames import TOKEN_BYTES, ReplicaFetchRequest, decode_request, encode_answer_head
from actors.channels.served_partitions import PartitionChannel, ProcessChannel
from actors.core.replication.follower import ReplicaFetch
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError

logger = logging.getLogger(__name__)

# Kafka's `connections.max.idle.ms` default, in seconds: a connection silent this long is closed.
CONNECTIONS_MAX_IDLE_S = 600.0
# Kafka's `request.timeout.ms` default, in seconds: how long a connection's token and each answer's send may take.
REQUEST_TIMEOUT_S = 30.0

# How long the channel waits after a failed accept (out of file descriptors) before it accepts again.
ACCEPT_BACKOFF_S = 0.1

# `Replica.replicate`: (follower, offset, max_bytes, max_wait_ms, leader_epoch) -> the answer.
FollowerFetch = Callable[[str, int, int, int, int], ReplicaFetch]


@dataclass(frozen=True, slots=True)
class ReplicaChannelAddress:
    """Where a process's replica channel listens, and the token a connection opens with."""

    host: str
    port: int
    token: bytes

    def __repr__(self) -> str:
        return f"ReplicaChannelAddress({self.host}:{self.port})"


class ReplicaChannel(PartitionChannel[FollowerFetch, ReplicaChannelAddress]):
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
                    self._answer(connection, request)
            except OSError:
                return
            except Exception:
                logger.exception("replica channel: closing a connection after an unexpected error")

    def _answer(self, connection: socket.socket, request: ReplicaFetchRequest) -> None:
        """Runs one fetch and sends its answer: the head, then the records as the log read them."""
        fetch = self._served.get(request.topic, request.partition)
        if fetch is None:
            error = BrokerNotAvailableError(f"{request.topic}-{request.partition} is not served by this channel")
            connection.sendall(encode_error(error))
            return
        try:
            answer = fetch(
                request.follower, request.offset, request.max_bytes, request.max_wait_ms, request.leader_epoch
            )
        except RaybrokerError as exc:
            connection.sendall(encode_error(exc))
            return
        except Exception as exc:
            logger.exception("replica channel: a fetch of %s-%d failed", request.topic, request.partition)
            connection.sendall(encode_error(RaybrokerError(f"the fetch failed unexpectedly: {type(exc).__name__}")))
            return
        connection.sendall(encode_answer_head(answer))
        if answer.records:
            connection.sendall(answer.records)


_CHANNEL: ProcessChannel[FollowerFetch, ReplicaChannelAddress] = ProcessChannel()


def serve(host: str, topic: str, partition: int, fetch: FollowerFetch) -> ReplicaChannelAddress:
    """Serves (topic, partition)'s follower fetches with `fetch` on this process's channel, which listens on `host`
    from the first call; returns the channel's address."""
    return _CHANNEL.serve(partial(ReplicaChannel, host), topic, partition, fetch)


def stop_serving(topic: str, partition: int, fetch: FollowerFetch) -> None:
    """Stops serving (topic, partition) with `fetch` (its log closed); nothing if this process has no channel."""
    _CHANNEL.stop_serving(topic, partition, fetch)


__all__ = [
    "CONNECTIONS_MAX_IDLE_S",
    "REQUEST_TIMEOUT_S",
    "FollowerFetch",
    "ReplicaChannel",
    "ReplicaChannelAddress",
    "serve",
    "stop_serving",
]

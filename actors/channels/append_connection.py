"""A producer's connection to a same-node append channel (`actors.channels.append_channel`).

`AppendConnection.connect(address)` opens the channel's socket (None when it cannot: another network namespace, the
process gone); `append(topic, partition, batches, acks)` sends one frame (`actors.channels.append_frames`) and returns
an `AppendReply` (a `concurrent.futures.Future`) at once, so several appends can be in flight, as Ray calls can. A
reader thread takes the answers in order and completes the replies; a reply's callback runs on that thread and must not
wait. When the connection breaks (the partition's process died or restarted), every reply still waiting fails with
`AnswerLostError` (its request was sent, and may have been carried out), and a later `append` on the broken connection
with `BrokerNotAvailableError` (nothing sent); both are retriable: the producer looks the partition up again and
resends, as after a failed Ray call. `write_marker` sends a transaction coordinator's COMMIT/ABORT marker the same way.

`AppendConnections` is an `AppendRoute`'s pool (`actors.server.append_route`: the Python producer's sender, the Kafka
listener, the coordinators): `for_address(address)` answers the connection to the append channel a leader on this
node named, or None when its appends must be Ray calls.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections import deque
from concurrent.futures import Future

from actors.calls import this_node_id
from actors.channels.append_frames import (
    SIZE,
    decode_answer,
    encode_coordinator_request,
    encode_marker_request,
    encode_request,
)
from actors.core.transactions.markers import TransactionMarker
from storage.errors import AnswerLostError, BrokerNotAvailableError, InvalidRequestError, RaybrokerError
from storage.partition.log import LogAppendInfo

logger = logging.getLogger(__name__)

# An append's answer: the `LogAppendInfo`, or the typed error (`AnswerLostError` once the connection broke).
AppendReply = Future[LogAppendInfo]


def _complete(reply: AppendReply, outcome: LogAppendInfo | RaybrokerError) -> None:
    if isinstance(outcome, LogAppendInfo):
        reply.set_result(outcome)
    else:
        reply.set_exception(outcome)


class AppendConnection:
    """See the module docstring."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self._socket = sock
        self.address = address
        self._waiting: deque[AppendReply] = deque()
        # Held while a reply is queued and its frame written, so replies wait in the order of the frames.
        self._send_lock = threading.Lock()
        # Guards `_waiting` and `_broken` only: the reader takes answers while a long send still runs (a send that
        # waits for the channel to read, while the channel waits for this side to read its answers, would
        # otherwise stop both for good).
        self._lock = threading.Lock()
        self._broken: RaybrokerError | None = None
        self._reader = threading.Thread(target=self._read_answers, name="raybroker-append-connection", daemon=True)
        self._reader.start()

    @classmethod
    def connect(cls, address: str) -> AppendConnection | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
        except OSError as exc:
            logger.debug("no append channel at %r: %s", address, exc)
            sock.close()
            return None
        return cls(sock, address)

    @property
    def broken(self) -> bool:
        return self._broken is not None

    def append(self, topic: str, partition: int, batches: bytes, acks: int) -> AppendReply:
        return self._send(encode_request(topic, partition, acks, batches))

    def write_marker(self, topic: str, partition: int, marker: TransactionMarker) -> AppendReply:
        """A transaction coordinator's COMMIT/ABORT marker on the partition, as `append` sends an append."""
        return self._send(encode_marker_request(topic, partition, marker))

    def append_from_coordinator(self, topic: str, partition: int, batch: bytes) -> AppendReply:
        """A group coordinator's transactional offset commit on the partition, as `append` sends an append."""
        return self._send(encode_coordinator_request(topic, partition, batch))

    def _send(self, frame: list[bytes]) -> AppendReply:
        reply: AppendReply = Future()
        reply.set_running_or_notify_cancel()
        failure: OSError | None = None
        with self._send_lock:
            with self._lock:
                broken = self._broken
                if broken is None:
                    self._waiting.append(reply)
            if broken is None:
                try:
                    sent = self._socket.sendmsg(frame)
                    if sent < sum(map(len, frame)):
                        self._socket.sendall(b"".join(frame)[sent:])
                except OSError as exc:
                    failure = exc
        if broken is not None:
            _complete(reply, broken)
        elif failure is not None:
            # Fails the replies still waiting, this one included.
            self._break(failure)
        return reply

    def close(self) -> None:
        """Ends the connection; replies still waiting fail with `AnswerLostError`."""
        self._break(None)
        self._reader.join()

    def _read_answers(self) -> None:
        reader = self._socket.makefile("rb")
        try:
            while True:
                head = reader.read(SIZE.size)
                if len(head) < SIZE.size:
                    break
                (size,) = SIZE.unpack(head)
                body = reader.read(size)
                if len(body) < size:
                    break
                answer = decode_answer(body)
                with self._lock:
                    reply = self._waiting.popleft() if self._waiting else None
                if reply is None:
                    raise InvalidRequestError("the append channel answered a request it was not sent")
                _complete(reply, answer)
        except (OSError, ValueError, RaybrokerError) as exc:
            self._break(exc)
        finally:
            self._break(None)
            reader.close()
            self._socket.close()

    def _break(self, cause: BaseException | None) -> None:
        """Marks the connection broken (once) and fails every reply still waiting (`AnswerLostError`)."""
        with self._lock:
            if self._broken is None:
                why = "closed" if cause is None else f"broken: {cause}"
                self._broken = BrokerNotAvailableError(f"the append channel connection is {why}")
                # Wakes the reader and any send; the reader closes the socket once it is out of it.
                with contextlib.suppress(OSError):
                    self._socket.shutdown(socket.SHUT_RDWR)
            waiting = list(self._waiting)
            self._waiting.clear()
            lost = AnswerLostError(f"{self._broken} before it answered")
        for reply in waiting:
            _complete(reply, lost)


class AppendConnections:
    """One client's connections to the append channels of its node, one per channel (a channel serves every
    partition of its process); safe to use from several threads."""

    def __init__(self) -> None:
        self._node = this_node_id()
        self._connections: dict[str, AppendConnection] = {}
        self._lock = threading.Lock()

    @property
    def node(self) -> str:
        """The Ray node this pool's process runs on: only leaders there are reached over their append channels."""
        return self._node

    def for_address(self, address: str | None) -> AppendConnection | None:
        """The connection to the append channel at `address` (what a leader on this node answers to
        `append_channel()`; with followers, the caller waits for an `acks=all` append's replication itself, with the
        leader's `await_replicated`, a Ray call run on its replication threads, as the channel's appends never wait);
        None when the leader has no channel (`address` None) or it cannot be reached, and the appends go as Ray
        calls."""
        if address is None:
            return None
        with self._lock:
            connection = self._connections.get(address)
            if connection is None or connection.broken:
                connection = AppendConnection.connect(address)
                if connection is None:
                    return None
                self._connections[address] = connection
            return connection

    def close(self) -> None:
        """Closes every connection; their waiting replies fail with `AnswerLostError`."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()


__all__ = ["AppendConnection", "AppendConnections", "AppendReply"]

"""The append channel: producers on a partition's own node append to it over a local socket, without a Ray call.

An actor call costs 1-2 ms of round trip with every core of its node busy (the batch pickled into Ray's object path, two
processes scheduled, the answer sent back), where `Log.append` of a small batch takes ~0.1 ms: at 10,000 records
a second that round trip was most of a record's send-to-ack time, and a quarter of a producer process's CPU was
Ray submitting its `append` calls. A process that holds partition logs (a partition actor, a partition host)
therefore listens, once asked, on a same-node socket (`actors.channels.local_sockets`) and runs each append frame
(`actors.channels.append_frames`) as the same `PartitionLogActor.append` a Ray call runs: the leadership and
`min.insync.replicas` checks, Kafka's validation, the high-watermark file, the fetchers' wake-up. A marker frame
runs as `PartitionLogActor.append_transaction_marker`: the transaction coordinator writes its COMMIT/ABORT markers
to the partitions of its own node this way (each marker of a transaction was a Ray call of ~1-2 ms before the
transaction could complete), and a coordinator frame as `PartitionLogActor.append_from_coordinator`: the group
coordinator writes a TxnOffsetCommit's batch to its `__consumer_offsets` partition this way. The log's own lock
orders these writes with those arriving through Ray.

- `serve(topic, partition, log)` adds a partition to this process's channel, which listens from the first
  call, and answers its address (`actors.server.partition_log.PartitionLogActor.append_channel`); `stop_serving`
  removes it when its log closes. A frame for a partition not served here is answered with
  `BrokerNotAvailableError`, which the producer answers by looking the partition up again.
- Who may connect: only processes of this process's own user (`local_sockets.same_user`); a connection of another
  user is closed unanswered.
- Limits: Kafka's names and defaults. A frame larger than `socket.request.max.bytes` (100 MiB) closes its
  connection, as Kafka's listener does; at most `socket.listen.backlog.size` (50) connections wait to be
  accepted. A frame that does not parse is answered with `InvalidRequestError` and ends its connection, so one bad
  client never stops the channel or another connection.
- One thread serves every connection (`selectors`): it runs each connection's whole frames in the order they came
  and answers them in that order, so a producer's appends to one partition land in the order it sent them, as
  with Ray's ordered actor calls, and the process's threads do not grow with its producers. An answer that cannot
  be sent within Kafka's `request.timeout.ms` default (30 s) closes its connection.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
from typing import Protocol

from actors.channels.append_frames import (
    SIZE,
    CoordinatorRequest,
    MarkerRequest,
    decode_request,
    encode_answer,
    encode_error,
    over_request_limit,
)
from actors.channels.local_sockets import listening_socket, peer_uid, same_user
from actors.channels.served_partitions import PartitionChannel, ProcessChannel
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError
from storage.partition.log import LogAppendInfo
from storage.records.layout import ControlRecordType

logger = logging.getLogger(__name__)


class ServedLog(Protocol):
    """What the channel runs a partition's frames as: `PartitionLogActor`'s three writes."""

    def append(self, batches: memoryview, required_acks: int = 1) -> LogAppendInfo: ...

    def append_from_coordinator(self, batch: memoryview) -> LogAppendInfo: ...

    def append_transaction_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, result: ControlRecordType
    ) -> LogAppendInfo: ...


# Kafka's `request.timeout.ms` default, in seconds: how long sending one answer may take.
REQUEST_TIMEOUT_S = 30.0
# How much one read of a connection takes at most (Kafka's `socket.receive.buffer.bytes` is 100 KiB).
READ_BYTES = 1 << 20


class _Reading:
    """A connection's bytes short of a whole frame (`pending`), or the buffer a large frame's body is read into
    (`body`, `filled` bytes of it so far)."""

    __slots__ = ("body", "filled", "pending")

    def __init__(self) -> None:
        self.pending = bytearray()
        self.body: bytearray | None = None
        self.filled = 0


class AppendChannel(PartitionChannel[ServedLog, str]):
    """One process's listener for same-node appends; see the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self._socket, self.address = listening_socket("append")
        # What each connection (by file descriptor) sent that is not yet a whole frame.
        self._reading: dict[int, _Reading] = {}
        threading.Thread(target=self._serve_connections, name="raybroker-append-channel", daemon=True).start()

    def _serve_connections(self) -> None:
        """The channel's one thread: accepts connections and runs the whole frames each one has sent."""
        selector = selectors.DefaultSelector()
        selector.register(self._socket, selectors.EVENT_READ, None)
        while True:
            for key, _ in selector.select():
                if key.data is None:
                    self._accept(selector)
                    continue
                try:
                    keep_open = self._serve(key.data)
                except Exception:
                    logger.exception("append channel: closing a connection after an unexpected error")
                    keep_open = False
                if not keep_open:
                    selector.unregister(key.data)
                    self._reading.pop(key.data.fileno(), None)
                    key.data.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            connection, _ = self._socket.accept()
        except OSError as exc:
            logger.warning("append channel %r: accept failed: %s", self.address, exc)
            return
        if not same_user(connection):
            logger.warning("append channel: refused a connection of user %s", peer_uid(connection))
            connection.close()
            return
        # Answers are sent blocking, bounded by Kafka's `request.timeout.ms` default: a client that stops reading
        # them loses its connection instead of holding the channel.
        connection.settimeout(REQUEST_TIMEOUT_S)
        selector.register(connection, selectors.EVENT_READ, connection)

    def _serve(self, connection: socket.socket) -> bool:
        """Reads what `connection` sent (the first read cannot block: the selector said so; a large frame's body is
        read on with MSG_DONTWAIT) and runs every whole frame in it, in order; False when the connection is to be
        closed (ended by the client, a frame over the limit, one that does not parse)."""
        reading = self._reading.setdefault(connection.fileno(), _Reading())
        try:
            if reading.body is not None:
                # Reads on while bytes are there (MSG_DONTWAIT), not one selector wake-up per socket buffer.
                view = memoryview(reading.body)
                while reading.filled < len(view):
                    try:
                        count = connection.recv_into(view[reading.filled :], 0, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        return True
                    if count == 0:
                        logger.warning("append channel: a connection ended %d bytes into a frame", reading.filled)
                        return False
                    reading.filled += count
                view.release()
                body, reading.body = reading.body, None
                return self._run(connection, body)
            received = connection.recv(READ_BYTES)
        except OSError:
            return False
        pending = reading.pending
        if not received:
            if pending:
                logger.warning("append channel: a connection ended %d bytes into a frame", len(pending))
            return False
        pending += received
        while len(pending) >= SIZE.size:
            (size,) = SIZE.unpack_from(pending)
            if over_request_limit(size, "append channel", logger):
                return False
            if len(pending) < SIZE.size + size:
                if size > READ_BYTES:
                    # A large frame is read into its own buffer from now on, not copied along with `pending`.
                    reading.body = bytearray(size)
                    reading.filled = len(pending) - SIZE.size
                    reading.body[: reading.filled] = memoryview(pending)[SIZE.size :]
                    pending.clear()
                break
            body = pending[SIZE.size : SIZE.size + size]
            del pending[: SIZE.size + size]
            if not self._run(connection, body):
                return False
        return True

    def _run(self, connection: socket.socket, body: bytearray) -> bool:
        """Runs one frame and sends its answer; False when the connection is to be closed."""
        answer, keep_open = self._answer(body)
        try:
            connection.sendall(answer)
        except OSError:
            return False
        return keep_open

    def _answer(self, body: bytearray) -> tuple[bytes, bool]:
        """The answer frame for one request, and whether the connection may go on."""
        try:
            request = decode_request(body)
        except InvalidRequestError as exc:
            return encode_error(exc), False
        topic, partition = request.topic, request.partition
        log = self._served.get(topic, partition)
        if log is None:
            return encode_error(BrokerNotAvailableError(f"{topic}-{partition} is not served by this channel")), True
        try:
            if isinstance(request, MarkerRequest):
                marker = request.marker
                info = log.append_transaction_marker(
                    marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.result
                )
            elif isinstance(request, CoordinatorRequest):
                info = log.append_from_coordinator(request.batch)
            else:
                info = log.append(request.batches, request.acks)
            return encode_answer(info), True
        except RaybrokerError as exc:
            return encode_error(exc), True
        except Exception as exc:
            logger.exception("append channel: append to %s-%d failed", topic, partition)
            return encode_error(RaybrokerError(f"the append failed unexpectedly: {type(exc).__name__}")), True


_CHANNEL: ProcessChannel[ServedLog, str] = ProcessChannel()


def serve(topic: str, partition: int, log: ServedLog) -> str:
    """Serves (topic, partition)'s frames with `log` on this process's channel, which listens from the first
    call; returns the channel's address."""
    return _CHANNEL.serve(AppendChannel, topic, partition, log)


def stop_serving(topic: str, partition: int, log: ServedLog) -> None:
    """Stops serving (topic, partition) with `log` (it closed); nothing if this process has no channel."""
    _CHANNEL.stop_serving(topic, partition, log)


__all__ = ["AppendChannel", "ServedLog", "serve", "stop_serving"]

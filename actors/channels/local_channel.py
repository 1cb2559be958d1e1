"""A same-node request channel's server side: the sockets, threads and limits the transaction channel
(`actors.channels.transaction_channel`) and the group channel (`actors.channels.group_channel`) share; what a
frame means is theirs.

A role's actor listens on a same-node socket (`actors.channels.local_sockets`) and answers each request frame (a
`SIZE`, then that many bytes): a subclass decodes it (`_decode`) and runs it (`_run`) into its answer frame.

- Who may connect: processes of this process's own user (`local_sockets.same_user`); others are closed unanswered.
- One thread per connection reads a frame, has it answered and sends the answer, so a call that waits holds only its
  own connection; a client keeps one call in flight per connection and opens more for more
  (`actors.channels.local_connections`). At most `max_connections` are served at once; one over that is closed
  unanswered.
- A frame larger than Kafka's `socket.request.max.bytes` (100 MiB) ends its connection unanswered. A frame that
  does not decode is answered `InvalidRequestError` (`append_frames.encode_error`) and ends its connection; a call's
  typed error is answered as that error, an unexpected one as a plain `RaybrokerError`. A bad client never stops
  the role or another connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from typing import Generic, TypeVar

from actors.channels.append_frames import SIZE, encode_error, over_request_limit
from actors.channels.local_sockets import SOCKET_LISTEN_BACKLOG_SIZE, listening_socket, peer_uid, same_user
from storage.errors import InvalidRequestError, RaybrokerError

logger = logging.getLogger(__name__)

# How long the channel waits after a failed accept before the next one.
ACCEPT_RETRY_S = 0.1

_Call = TypeVar("_Call")


class LocalChannel(Generic[_Call]):
    """One role's listener for same-node calls; see the module docstring. `purpose` names its socket and threads;
    a subclass gives `_decode` and `_run`."""

    def __init__(self, purpose: str, *, max_connections: int) -> None:
        self._purpose = purpose
        self._max_connections = max_connections
        # Every connection it would serve may be waiting to be accepted at once (a listener's burst of calls: a group
        # of members rejoining), beyond Kafka's default backlog.
        self._socket, self.address = listening_socket(purpose, max(SOCKET_LISTEN_BACKLOG_SIZE, max_connections))
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept_connections, name=f"raybroker-{purpose}-channel", daemon=True).start()

    def close(self) -> None:
        """Stops listening and ends every connection (their clients call through Ray from then on)."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def _decode(self, body: bytes) -> _Call:
        """The call a request frame's body carries; `InvalidRequestError` if it does not parse."""
        raise NotImplementedError

    def _run(self, call: _Call) -> bytes:
        """The answer frame of a call that ran; its typed error raised."""
        raise NotImplementedError

    def _answer(self, body: bytes) -> tuple[bytes, bool]:
        """The answer frame for one request, and whether the connection may go on."""
        try:
            call = self._decode(body)
        except InvalidRequestError as exc:
            return encode_error(exc), False
        try:
            return self._run(call), True
        except RaybrokerError as exc:
            return encode_error(exc), True
        except Exception as exc:
            logger.exception("%s channel: %r failed", self._purpose, call)
            return encode_error(RaybrokerError(f"the call failed unexpectedly: {type(exc).__name__}")), True

    def _accept_connections(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError as exc:
                with self._lock:
                    if self._closed:
                        return
                logger.warning("%s channel %r: accept failed: %s", self._purpose, self.address, exc)
                # A failure that lasts (out of file descriptors) is retried at this pace, not in a busy loop.
                time.sleep(ACCEPT_RETRY_S)
                continue
            if not same_user(connection):
                logger.warning("%s channel: refused a connection of user %s", self._purpose, peer_uid(connection))
                connection.close()
                continue
            with self._lock:
                admitted = not self._closed and len(self._connections) < self._max_connections
                if admitted:
                    self._connections.add(connection)
            if not admitted:
                connection.close()
                continue
            threading.Thread(
                target=self._serve, args=(connection,), name=f"raybroker-{self._purpose}-connection", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        """A connection's thread: its frames, one at a time, until it ends or sends one that cannot be served."""
        reader = connection.makefile("rb")
        try:
            while True:
                head = reader.read(SIZE.size)
                if len(head) < SIZE.size:
                    return
                (size,) = SIZE.unpack(head)
                if over_request_limit(size, f"{self._purpose} channel", logger):
                    return
                body = reader.read(size)
                if len(body) < size:
                    return
                answer, keep_open = self._answer(body)
                connection.sendall(answer)
                if not keep_open:
                    return
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(connection)
            reader.close()
            connection.close()


__all__ = ["ACCEPT_RETRY_S", "LocalChannel"]

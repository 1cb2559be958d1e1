"""A same-node request channel's server side: the sockets, threads and limits the transaction channel
(`actors.channels.transaction_channel`) and the group channel (`actors.channels.group_channel`) share; what a
frame means is theirs.

A role's actor listens on a same-node socket (`actors.channels.local_sockets`) and answers each request frame (a
`SIZE`, then that many bytes) with the answer frame its `answer` function gives.

- Who may connect: processes of this process's own user (`local_sockets.same_user`); others are closed unanswered.
- One thread per connection reads a frame, has it answered and sends the answer, so a call that waits holds only its
  own connection; a client keeps one call in flight per connection and opens more for more
  (`actors.channels.local_connections`). At most `max_connections` are served at once; one over that is closed
  unanswered.
- A frame larger than Kafka's `socket.request.max.bytes` (100 MiB) ends its connection unanswered; `answer` says
  whether the connection goes on after its answer (not after one that did not parse). A bad client never stops the
  role or another connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

from actors.channels.append_frames import SIZE, over_request_limit
from actors.channels.local_sockets import SOCKET_LISTEN_BACKLOG_SIZE, listening_socket, peer_uid, same_user

logger = logging.getLogger(__name__)

# How long the channel waits after a failed accept before the next one.
ACCEPT_RETRY_S = 0.1

# A request frame's body into its answer frame, and whether the connection may go on.
Answer = Callable[[bytes], tuple[bytes, bool]]


class LocalChannel:
    """One role's listener for same-node calls; see the module docstring. `purpose` names its socket and threads."""

    def __init__(self, purpose: str, answer: Answer, *, max_connections: int) -> None:
        self._purpose = purpose
        self._answer = answer
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


__all__ = ["ACCEPT_RETRY_S", "Answer", "LocalChannel"]

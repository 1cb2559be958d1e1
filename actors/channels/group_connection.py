"""A listener's connections to the group coordinator's channel (`actors.channels.group_channel`) on its node: the
shared `actors.channels.local_connections`, each call one of `GROUP_METHODS` in the group codec. A JoinGroup or
SyncGroup waiting for the rest of its group holds its connection up to the coordinator's `MAX_WAIT_MS`, so with
every connection busy the caller goes through Ray rather than wait (`has_free_connection`).

`GroupCaller(address)` is the blocking side for another role's threads on the node (the transaction coordinator
completing a producer's offsets when its marker reached `__consumer_offsets`): one connection, one call at a time.
A broken connection or an answer that does not parse fails the call with `BrokerNotAvailableError` and is closed,
as is one whose call the channel refused; the next call opens another.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from actors.channels.append_frames import SIZE
from actors.channels.group_frames import GROUP_CODEC
from actors.channels.local_connections import LocalConnections
from actors.channels.local_sockets import read_exactly
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError

# Calls in flight at once over one listener's connections.
MAX_CONNECTIONS = 64
# How long a `GroupCaller` waits for the coordinator's answer (Kafka's `request.timeout.ms` default).
CALL_TIMEOUT_S = 30.0


class GroupConnections(LocalConnections):
    """See the module docstring. Not thread-safe: one event loop uses it."""

    def __init__(self, address: str) -> None:
        super().__init__(address, "group", max_connections=MAX_CONNECTIONS)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The coordinator's `method` (one of `GROUP_METHODS`) called with these arguments."""
        answer = await self.exchange(GROUP_CODEC.encode_request(method, args, kwargs), GROUP_CODEC.decode_answer)
        if isinstance(answer, RaybrokerError):
            raise answer
        return answer


class GroupCaller:
    """See the module docstring. Thread-safe: callers take turns on its one connection."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The coordinator's `method` (one of `GROUP_METHODS`) called with these arguments; its result, or its typed
        error."""
        frame = GROUP_CODEC.encode_request(method, args, kwargs)
        with self._lock:
            try:
                connection = self._socket
                if connection is None:
                    connection = self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    connection.settimeout(CALL_TIMEOUT_S)
                    connection.connect(self.address)
                connection.sendall(frame)
                (size,) = SIZE.unpack(read_exactly(connection, SIZE.size))
                answer = GROUP_CODEC.decode_answer(bytes(read_exactly(connection, size)))
            except (OSError, InvalidRequestError) as exc:
                self._close()
                raise BrokerNotAvailableError(f"the group channel connection is broken: {exc!r}") from None
            if isinstance(answer, InvalidRequestError):
                # The channel ends the connection of a call it refuses.
                self._close()
        if isinstance(answer, RaybrokerError):
            raise answer
        return answer

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


__all__ = ["CALL_TIMEOUT_S", "MAX_CONNECTIONS", "GroupCaller", "GroupConnections"]

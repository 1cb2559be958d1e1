"""A same-node request channel's client side (`actors.channels.local_channel`): the connections a listener keeps
to one role's channel, shared by the transaction and group channels; what a frame means is theirs.

`LocalConnections` is used from one event loop. Each exchange takes an idle connection, or opens one while fewer
than `max_connections` are open (else it waits for one to be free, or the caller asks `has_free_connection` first
and calls otherwise), sends one request frame, awaits its answer frame and keeps the connection for the next: the
channel serves a connection's calls one at a time, so concurrent calls each have a connection of their own, as
concurrent Ray calls each have a thread of the actor.

A connection that cannot be opened, breaks, or answers bytes that do not parse (the role's process died or
restarted) fails its exchange with `BrokerNotAvailableError`, retriable, and is closed: the listener forgets the
role, looks it up again and the client retries, as after a failed Ray call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TypeVar

from actors.channels.append_frames import SIZE
from storage.errors import BrokerNotAvailableError, InvalidRequestError

_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]
_Answer = TypeVar("_Answer")


class LocalConnections:
    """See the module docstring. Not thread-safe: one event loop uses it. `purpose` names the channel in errors."""

    def __init__(self, address: str, purpose: str, *, max_connections: int) -> None:
        self.address = address
        self._purpose = purpose
        self._idle: list[_Stream] = []
        self._slots = asyncio.Semaphore(max_connections)
        self._closed = False

    @property
    def has_free_connection(self) -> bool:
        """Whether an exchange would start at once, not wait for a connection to be free."""
        return not self._slots.locked()

    def close(self) -> None:
        """Closes the idle connections; an exchange in flight closes its own when it ends, and a later one fails with
        `BrokerNotAvailableError`."""
        self._closed = True
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()

    async def exchange(self, frame: bytes, decode: Callable[[bytes], _Answer]) -> _Answer:
        """`frame` sent, and its answer frame's body (the bytes after its size) as `decode` reads it; `decode` raises
        `InvalidRequestError` for bytes that do not parse."""
        async with self._slots:
            if self._closed:
                raise BrokerNotAvailableError(f"the {self._purpose} channel connections are closed")
            stream = self._idle.pop() if self._idle else None
            try:
                if stream is None:
                    stream = await asyncio.open_unix_connection(self.address)
                reader, writer = stream
                writer.write(frame)
                await writer.drain()
                (size,) = SIZE.unpack(await reader.readexactly(SIZE.size))
                answer = decode(await reader.readexactly(size))
            except (OSError, asyncio.IncompleteReadError, InvalidRequestError) as exc:
                _close(stream)
                raise BrokerNotAvailableError(f"the {self._purpose} channel connection is broken: {exc!r}") from None
            except BaseException:
                # Cancelled (the client went away) with the answer maybe still to come: the connection's next
                # answer would be this exchange's.
                _close(stream)
                raise
            if self._closed:
                _close(stream)
            else:
                self._idle.append(stream)
        return answer


def _close(stream: _Stream | None) -> None:
    if stream is not None:
        with contextlib.suppress(RuntimeError):
            stream[1].close()


__all__ = ["LocalConnections"]

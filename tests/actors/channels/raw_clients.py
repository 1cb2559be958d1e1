"""What the same-node channels' tests share to play a client that sends whatever bytes a test chooses: a raw socket
to a channel's abstract address, reads of exactly some bytes or of everything until the channel closes, and a
bounded wait for the channel's state. Every wait is bounded by `TIMEOUT_S`: an answer over a local socket takes well
under a millisecond; `run` runs a client's coroutine on an event loop of its own, bounded the same way."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

TIMEOUT_S = 5.0


@contextlib.contextmanager
def raw_socket(address: str) -> Iterator[socket.socket]:
    """A client socket connected to the channel at `address`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT_S)
    try:
        sock.connect(address)
        yield sock
    finally:
        sock.close()


def receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None if the peer closes first."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def drained_until_closed(sock: socket.socket) -> bytes:
    """Everything the channel sends before it closes the connection (closed with bytes unread: a reset)."""
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            received += chunk
    return received


def wait_until(condition: Callable[[], bool]) -> None:
    """Returns once `condition()` holds; fails the test after `TIMEOUT_S`."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "the channel did not get there in time"
        time.sleep(0.001)


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """The coroutine's result, run on a new event loop; fails after `TIMEOUT_S`."""
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))

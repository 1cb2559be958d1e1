"""The same-node sockets raybroker's processes serve each other on, without a Ray call: the append channel
(`actors.channels.append_channel`) and the transaction channel (`actors.channels.transaction_channel`).

Each is a Unix stream socket in Linux's abstract namespace (no file to leave behind, gone with its process), at an
address naming its purpose, its process and 8 random bytes, so a restarted process never answers at the address of
the one before it. Abstract sockets have no file permissions: a server checks each connection's peer with
`same_user` (`SO_PEERCRED`) and closes those of another user unanswered. `read_exactly` is how the channels'
blocking ends (these and the replica channel's TCP ones) read a frame's bytes.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct

# Kafka's `socket.listen.backlog.size` default: connections waiting to be accepted.
SOCKET_LISTEN_BACKLOG_SIZE = 50
# `struct ucred`: pid, uid, gid.
_UCRED = struct.Struct("3i")


def listening_socket(purpose: str, backlog: int = SOCKET_LISTEN_BACKLOG_SIZE) -> tuple[socket.socket, str]:
    """A socket listening at a new abstract address for `purpose` ("append", "transactions"), and that address;
    `backlog` connections may wait to be accepted (a connect beyond them fails)."""
    address = f"\0raybroker-{purpose}-{os.getpid()}-{secrets.token_hex(8)}"
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listening.bind(address)
        listening.listen(backlog)
    except OSError:
        listening.close()
        raise
    return listening, address


def peer_uid(connection: socket.socket) -> int | None:
    """The user id of the process at the other end of `connection`; None when it cannot be told."""
    try:
        _, uid, _ = _UCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except OSError:
        return None
    return uid


def same_user(connection: socket.socket) -> bool:
    """Whether `connection`'s peer runs as this process's user (False when it cannot be told)."""
    return peer_uid(connection) == os.getuid()


def read_exactly(connection: socket.socket, size: int) -> bytearray:
    """`size` bytes from `connection`; `ConnectionResetError` if it ends first."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    filled = 0
    while filled < size:
        count = connection.recv_into(view[filled:])
        if count == 0:
            raise ConnectionResetError("the channel's connection ended inside a frame")
        filled += count
    return buffer


__all__ = ["SOCKET_LISTEN_BACKLOG_SIZE", "listening_socket", "peer_uid", "read_exactly", "same_user"]

"""A follower's connection to its leader's replica channel (`actors.channels.replica_channel`): one fetch at a time,
of one partition (`fetch`) or of several (`fetch_many`), answered in the order asked.

A fetch that cannot be completed on the connection (the leader's process ended, the network failed, no answer within
the timeout, an answer that does not parse) raises `ReplicaChannelError`, after which the connection is closed and
of no further use; a fetch the leader refused raises the leader's typed error, and the connection goes on.
"""

from __future__ import annotations

import socket

from actors.channels.append_frames import SIZE, SOCKET_REQUEST_MAX_BYTES
from actors.channels.local_sockets import read_exactly
from actors.channels.replica_channel import ReplicaChannelAddress
from actors.channels.replica_fetch_frames import (
    ReplicaFetchRequest,
    SharedFetchRequest,
    decode_answer,
    encode_request,
)
from actors.core.replication.follower import ReplicaFetch
from storage.errors import InvalidRequestError, RaybrokerError

# How long connecting to a leader's channel may take. The kernels of the two nodes complete a connection without
# either process being scheduled, so within a cluster this is a millisecond even on loaded cores; a channel whose
# port a firewall between the nodes drops (one open only to Ray's own ports) is given up after this, and the link
# fetches with Ray calls. Kafka's `socket.connection.setup.timeout.ms` default (10 s) is a client's, over any
# network, and would hold a follower that long after each leader change.
CONNECTION_SETUP_TIMEOUT_S = 1.0
# The largest answer a follower reads: a fetch answers at most its max bytes, or one batch larger than that, and a
# batch is at most a request.
ANSWER_MAX_BYTES = SOCKET_REQUEST_MAX_BYTES + 64


class ReplicaChannelError(Exception):
    """A fetch could not be completed over the connection, which is closed."""


class LeaderConnection:
    """An open connection to the replica channel at `address`; `ReplicaChannelError` if it cannot be opened."""

    def __init__(self, address: ReplicaChannelAddress) -> None:
        try:
            self._socket = socket.create_connection((address.host, address.port), CONNECTION_SETUP_TIMEOUT_S)
        except OSError as exc:
            raise ReplicaChannelError(f"cannot connect to the replica channel at {address!r}: {exc}") from None
        try:
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket.sendall(address.token)
        except OSError as exc:
            self._socket.close()
            raise ReplicaChannelError(f"the replica channel at {address!r} failed: {exc}") from None

    def fetch(self, request: ReplicaFetchRequest, timeout_s: float) -> ReplicaFetch:
        """The leader's answer to `request`, within `timeout_s`; the leader's typed error if it refused it."""
        (answer,) = self.fetch_many(request.shared(), timeout_s)
        if isinstance(answer, RaybrokerError):
            raise answer
        return answer

    def fetch_many(self, request: SharedFetchRequest, timeout_s: float) -> list[ReplicaFetch | RaybrokerError]:
        """The leader's answers to `request`'s partitions, in the order asked, within `timeout_s`: each a fetch or
        the typed error the leader refused that partition with; the leader's typed error if it refused the whole
        request."""
        try:
            self._socket.settimeout(timeout_s)
            self._socket.sendall(encode_request(request))
            (size,) = SIZE.unpack(read_exactly(self._socket, SIZE.size))
            if size > ANSWER_MAX_BYTES:
                raise InvalidRequestError(f"a replica fetch answer of {size} bytes")
            answers = decode_answer(read_exactly(self._socket, size), len(request.partitions))
        except (OSError, InvalidRequestError) as exc:
            self.close()
            raise ReplicaChannelError(f"a fetch from the replica channel failed: {exc}") from None
        if isinstance(answers, RaybrokerError):
            raise answers
        return answers

    def close(self) -> None:
        self._socket.close()


__all__ = ["CONNECTION_SETUP_TIMEOUT_S", "LeaderConnection", "ReplicaChannelError"]

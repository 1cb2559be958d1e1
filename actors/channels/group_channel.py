"""The group channel: Kafka listeners on the group coordinator's node call it over a local socket, without a Ray
call.

Every consumer-group request a listener serves is a call to the group coordinator actor. As Ray calls, a burst of
them (a group of 11 rejoining: 11 JoinGroups, the leader's SyncGroup and 11 SyncGroups, then each member's
OffsetFetch) took 20-46 ms a call on a busy node, where the coordinator's own work is a fraction of a ms, and Kafka
answers in 1-3 ms. The coordinator actor therefore listens, once asked (`GroupCoordinatorActor.group_channel`), on a
same-node socket, and runs each call frame (`actors.channels.group_frames`) as the same actor method a Ray call
runs; the coordinator's own locks order them with the calls arriving through Ray.

Its sockets, threads and limits are the shared `actors.channels.local_channel`'s (same user only, one thread per
connection, `socket.request.max.bytes`). A call that waits (a JoinGroup or SyncGroup for the rest of its group, at
most the coordinator's `MAX_WAIT_MS`) holds only its own connection. At most `MAX_CONNECTIONS` are served at once;
one over that is closed unanswered, and its client calls through Ray. A frame that does not parse, or names a
method outside `GROUP_METHODS`, is answered `InvalidRequestError` and ends its connection.
"""

from __future__ import annotations

from typing import Any

from actors.channels.group_frames import GROUP_CODEC, GROUP_METHODS
from actors.channels.local_channel import LocalChannel
from storage.errors import InvalidRequestError

# Connections served at once, each by a thread of its own: a listener opens one per call in flight, and holds one
# per member waiting in a JoinGroup or SyncGroup (`actors.channels.group_connection.MAX_CONNECTIONS` at most).
MAX_CONNECTIONS = 256


class GroupChannel(LocalChannel[tuple[str, tuple[Any, ...], dict[str, Any]]]):
    """One group coordinator's listener for same-node calls; see the module docstring. `calls` is the coordinator
    whose `GROUP_METHODS` it runs."""

    def __init__(self, calls: object) -> None:
        self._calls = calls
        super().__init__("groups", max_connections=MAX_CONNECTIONS)

    def _decode(self, body: bytes) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
        method, args, kwargs = GROUP_CODEC.decode_request(body)
        if method not in GROUP_METHODS:
            raise InvalidRequestError(f"the group channel serves no method {method[:100]!r}")
        return method, args, kwargs

    def _run(self, call: tuple[str, tuple[Any, ...], dict[str, Any]]) -> bytes:
        method, args, kwargs = call
        return GROUP_CODEC.encode_value(getattr(self._calls, method)(*args, **kwargs))


__all__ = ["MAX_CONNECTIONS", "GroupChannel"]

"""A Kafka listener's connections to the group coordinator's channel (`actors.channels.group_channel`), when the
coordinator runs on the listener's node.

`GroupConnections(address)` is used from one event loop; its connections are the shared
`actors.channels.local_connections`' (one call in flight per connection, at most `MAX_CONNECTIONS`). A JoinGroup or
SyncGroup waiting for the rest of its group holds its connection for up to the coordinator's `MAX_WAIT_MS`, so
when every connection is busy the caller calls through Ray rather than wait for one (`has_free_connection`).
A broken connection or an answer that does not parse fails its call with `BrokerNotAvailableError`, retriable (the
listener forgets the coordinator, looks it up again and the client retries, as after a failed Ray call); the
coordinator's own typed errors come back as they would through Ray.
"""

from __future__ import annotations

from typing import Any

from actors.channels.group_frames import GROUP_CODEC
from actors.channels.local_connections import LocalConnections
from storage.errors import RaybrokerError

# Calls in flight at once over one listener's connections.
MAX_CONNECTIONS = 64


class GroupConnections:
    """See the module docstring. Not thread-safe: one event loop uses it."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._connections = LocalConnections(address, "group", max_connections=MAX_CONNECTIONS)

    @property
    def has_free_connection(self) -> bool:
        return self._connections.has_free_connection

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The coordinator's `method` (one of `GROUP_METHODS`) called with these arguments."""
        answer = await self._connections.exchange(
            GROUP_CODEC.encode_request(method, args, kwargs), GROUP_CODEC.decode_answer
        )
        if isinstance(answer, RaybrokerError):
            raise answer
        return answer

    def close(self) -> None:
        """Closes the idle connections; a call in flight closes its own when it ends, and a later call fails with
        `BrokerNotAvailableError`."""
        self._connections.close()


__all__ = ["MAX_CONNECTIONS", "GroupConnections"]

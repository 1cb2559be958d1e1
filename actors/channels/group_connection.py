"""A listener's connections to the group coordinator's channel (`actors.channels.group_channel`) on its node: the
shared `actors.channels.local_connections`, each call one of `GROUP_METHODS` in the group codec. A JoinGroup or
SyncGroup waiting for the rest of its group holds its connection up to the coordinator's `MAX_WAIT_MS`, so with
every connection busy the caller goes through Ray rather than wait (`has_free_connection`).
"""

from __future__ import annotations

from typing import Any

from actors.channels.group_frames import GROUP_CODEC
from actors.channels.local_connections import LocalConnections
from storage.errors import RaybrokerError

# Calls in flight at once over one listener's connections.
MAX_CONNECTIONS = 64


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


__all__ = ["MAX_CONNECTIONS", "GroupConnections"]

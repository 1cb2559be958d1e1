"""The transport to the cluster's group coordinator actor (`actors.server.group_coordinator_actor`).

The actor is found by name. When it runs on this listener's node, every call of the listeners' `GroupView` (the
group channel's `GROUP_METHODS`) goes over its group channel (`actors.channels.group_connection`) instead of Ray
(`RayChannelTransport`), and through Ray when every channel connection is busy (members waiting in a JoinGroup or
SyncGroup). Its handle and channel are forgotten when a call fails retriably, so the next request reaches a restarted
or moved coordinator.
"""

from __future__ import annotations

from typing import Any

from actors.calls import call, get_actor, this_node_id
from actors.channels.group_connection import GroupConnections
from actors.channels.group_frames import GROUP_METHODS
from actors.options import group_coordinator_name
from cluster.protocol.views.transport import RayChannelTransport


class RayGroupTransport(RayChannelTransport):
    """The group coordinator of the Ray cluster this process is connected to (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(group_coordinator_name(), GROUP_METHODS)

    def _look_up(self) -> tuple[Any, GroupConnections | None]:
        """The coordinator actor and, when it runs on this node, its channel."""
        handle = get_actor(group_coordinator_name())
        node, address = call(handle.group_channel.remote())
        return handle, GroupConnections(address) if node and node == this_node_id() else None

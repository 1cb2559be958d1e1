"""The group coordinator actor: consumer groups' committed offsets and membership, one per cluster.

All its logic is the plain `actors.core.groups.group_coordinator.GroupCoordinator` (committed offsets in
`__consumer_offsets`, loading them, creating the topic again after a client deleted it, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, the bounded waits of `await_join` / `await_sync`), tested without Ray; see that module for
what it owns and guarantees. The actor is that class with Ray's seams, its methods the actor's remote API: the
controller actor (to create and describe `__consumer_offsets`), each `__consumer_offsets` partition's leader actor
(`actors.server.internal_partition_leaders`, its appends through the actor's `AppendRoute`), and the wall clock; it
loads every group's own configs from the controller actor when it starts, and the controller actor tells it of each
change after (`update_group_config`).
Listeners on its node call it over its group channel (`actors.channels.group_channel`) rather than Ray, once one
asked for it (`group_channel`). Ray restarts it if it dies; the new one loads the committed offsets again and
members rejoin.

It also holds the cluster's `ShareStateStore` (`actors.core.shares.share_state_store`: the share-partitions'
durable states in `__share_group_state`, Kafka's share coordinator state), which partition leaders read and write
with `read_share_state` / `write_share_state` (`actors.server.ray_share_states`); a new one loads it again. A thread
of the actor runs the store's periodic work (`ShareStateStore.schedule`: cold snapshots, prunes). And it writes the
share groups' dead letters (`write_dead_letters`: Kafka 4.4's dead-letter topics, `actors.core.shares.dead_letters`),
creating a missing topic through the controller actor and appending through its `AppendRoute`, as Kafka's brokers
send them to the topic's leader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from actors import heap_trim
from actors.calls import call, controller, this_node_id
from actors.channels.group_channel import GroupChannel
from actors.core.controller.topic_metadata import CONSUMER_OFFSETS_TOPIC, SHARE_GROUP_STATE_TOPIC
from actors.core.groups.group_coordinator import GroupCoordinator
from actors.core.groups.group_membership import (
    GroupMembership,
    MembershipConfig,
)
from actors.core.shares.dead_letters import DeadLetterBatch, DeadLetterQueue
from actors.core.shares.share_state_store import ShareStateStore
from actors.server.append_route import AppendRoute
from actors.server.internal_partition_leaders import RayInternalPartition, RayTopicAdmin
from storage.clock import SYSTEM_CLOCK
from storage.config.broker_config import BrokerConfig
from storage.logdir.scheduler import Scheduler
from storage.records.share_group_state import ShareGroupState, SharePartitionKey

# How often the share-state store's periodic work is looked at.
TICK_S = 1.0


class GroupCoordinatorActor(GroupCoordinator):
    """The plain `GroupCoordinator` over Ray's seams, whose methods are the actor's remote API as they are (a group
    API added to the coordinator is served on Ray with no edit here); see the module docstring."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        """`properties`: the broker's `server.properties` (`offsets.topic.*` and `group.*` keys are read)."""
        heap_trim.start()
        config = BrokerConfig.from_properties(properties)
        self._route = AppendRoute()
        self._channel_lock = threading.Lock()
        self._channel: GroupChannel | None = None
        # The controller is looked up at each call: one started again (its node lost) is a new actor.
        super().__init__(
            config.offsets_topic_num_partitions,
            config.offsets_topic_replication_factor,
            clock=SYSTEM_CLOCK,
            controller=RayTopicAdmin(),
            find_partition=lambda partition: RayInternalPartition.leader_of(
                CONSUMER_OFFSETS_TOPIC, partition, self._route
            ),
            allocate_coordinator_epoch=lambda at_least: int(
                call(controller().allocate_coordinator_epoch.remote(at_least))
            ),
            membership=GroupMembership(SYSTEM_CLOCK, MembershipConfig.of(config)),
            group_protocol=config.group_protocol_config,
            share_config=config.share_group_config,
            group_configs=lambda: call(controller().group_configs.remote()),
        )
        self._share_states = ShareStateStore(
            config.share_group_config,
            clock=SYSTEM_CLOCK,
            controller=RayTopicAdmin(),
            find_partition=lambda partition: RayInternalPartition.routed(
                SHARE_GROUP_STATE_TOPIC, partition, self._route
            ),
        )
        self._dead_letters = DeadLetterQueue(
            RayTopicAdmin(),
            lambda topic, partition, batch: RayInternalPartition.routed(
                topic, partition, self._route
            ).append_replicated(batch),
            SYSTEM_CLOCK,
            config.num_partitions,
        )
        self._share_state_tasks = Scheduler(SYSTEM_CLOCK)
        self._share_states.schedule(self._share_state_tasks)
        threading.Thread(target=self._run_share_state_tasks, name="share-state-tasks", daemon=True).start()

    def _run_share_state_tasks(self) -> None:
        """Runs the share-state store's periodic work (cold snapshots, prunes) as it falls due, looking every
        `TICK_S`, for as long as the actor lives."""
        while True:
            self._share_state_tasks.run_due()
            time.sleep(TICK_S)

    def read_share_state(self, key: SharePartitionKey, leader_epoch: int) -> ShareGroupState:
        """`ShareStateStore.read_state`, for a partition leader's first use of a share-partition."""
        return self._share_states.read_state(key, leader_epoch)

    def write_share_state(self, key: SharePartitionKey, state: ShareGroupState, leader_epoch: int) -> None:
        """`ShareStateStore.write_state`, for a partition leader's change of a share-partition."""
        self._share_states.write_state(key, state, leader_epoch)

    def write_dead_letters(self, batch: DeadLetterBatch) -> None:
        """`DeadLetterQueue.write`, for a partition leader's share-partition that archived records of a group with a
        dead-letter topic."""
        self._dead_letters.write(batch)

    def group_channel(self) -> tuple[str, str]:
        """(node, address): the Ray node this actor runs on and the address of its group channel
        (`actors.channels.group_channel`), which listens from the first call."""
        with self._channel_lock:
            if self._channel is None:
                self._channel = GroupChannel(self)
            return this_node_id(), self._channel.address

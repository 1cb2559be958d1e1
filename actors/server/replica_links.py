"""A hosted replica's links over Ray: its leader's AlterPartition to the controller actor (`RayControllerLink`, the
`Replica`'s `ControllerLink`) and a follower's calls to its leader's replica (`RayLeaderLink`, the follower's
`LeaderLink`), which `actors.server.partition_log.PartitionLogActor` gives the `Replica` it hosts."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import ray

from actors.calls import call, controller
from actors.channels import shared_fetch
from actors.channels.leader_connection import LeaderConnection, ReplicaChannelError
from actors.channels.replica_channel import ReplicaChannelAddress
from actors.channels.replica_fetch_frames import ReplicaFetchRequest
from actors.core.replication.follower import ReplicaFetch, ReplicaSettings, SharedFetchMember
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.server.replica_fetch_pieces import join, piece_count
from storage.errors import BrokerNotAvailableError, IneligibleReplicaError, RaybrokerError

logger = logging.getLogger(__name__)

# How long a leader's or follower's call to another replica or the controller may take before it is retried.
REPLICA_CALL_TIMEOUT_S = 30.0


class RayControllerLink:
    """A leader's AlterPartition to the controller actor, sent without waiting (the Replica's `ControllerLink`): the
    controller's refusal (the call ran and raised) is told to `refused` on the thread Ray completes the call's future
    on. A call that did not answer (the controller's process lost, its node cut off) is no refusal: the change may
    have been taken, and the leader asks again after `PENDING_TIMEOUT_MS`."""

    def alter_partition(self, proposed: LeaderAndIsr, refused: Callable[[], None]) -> None:
        answer = controller().alter_partition.remote(
            proposed.topic,
            proposed.partition,
            proposed.leader,
            proposed.leader_epoch,
            proposed.version,
            list(proposed.isr),
        )
        answer.future().add_done_callback(lambda done: refused() if not_applied(done.exception()) else None)


def not_applied(error: BaseException | None) -> bool:
    """Whether the controller refused an AlterPartition as one it did not apply, on the state the leader holds
    (INELIGIBLE_REPLICA); other refusals (a stale leader or partition epoch) leave the change pending until the
    newer state arrives, as Kafka's leader does."""
    return isinstance(error, ray.exceptions.RayTaskError) and isinstance(error.cause, IneligibleReplicaError)


class RayLeaderLink:
    """A follower's calls to its leader's replica (`actors.core.replication.follower.LeaderLink`): fetches over the
    leader process's replica channel (`actors.channels.replica_channel`, its address asked with a Ray call), shared
    with every partition this process follows from the leader's process (`share`, `actors.channels.shared_fetch`)
    or alone (`replicate`), the rest as Ray calls. The leader's handle is looked up once and again after any
    failure; the channel's connection is opened again after any failure of its own. A leader whose channel cannot be
    reached (a firewall between the nodes) is fetched from with Ray calls (`replicate`) for the rest of the link's
    life."""

    def __init__(
        self,
        state: LeaderAndIsr,
        me: str,
        find_replica: Callable[[str, int, str], Any],
        settings: ReplicaSettings,
    ) -> None:
        self._state = state
        self._settings = settings
        self._me = me
        self._find_replica = find_replica
        self._handle: object | None = None
        self._connection: LeaderConnection | None = None
        self._unreachable = False

    def _call(
        self, method: str, *args: object, timeout_s: float = REPLICA_CALL_TIMEOUT_S, num_returns: int = 1
    ) -> object:
        if self._handle is None:
            self._handle = self._find_replica(self._state.topic, self._state.partition, self._state.leader)
        try:
            remote = getattr(self._handle, method)
            if num_returns != 1:
                remote = remote.options(num_returns=num_returns)
            return call(remote.remote(*args), timeout_s=timeout_s)
        except RaybrokerError:
            self._handle = None
            raise

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        answer = self._call("epoch_end_offset", epoch, self._state.leader_epoch)
        assert isinstance(answer, tuple)
        return answer

    def replicate(self, offset: int, max_bytes: int, max_wait_ms: int) -> ReplicaFetch:
        timeout_s = REPLICA_CALL_TIMEOUT_S + max_wait_ms / 1000
        connection = None if self._unreachable else self._channel()
        if connection is None:
            return self._replicate_by_call(offset, max_bytes, max_wait_ms, timeout_s)
        request = ReplicaFetchRequest(
            self._state.topic,
            self._state.partition,
            self._me,
            offset,
            max_bytes,
            max_wait_ms,
            self._state.leader_epoch,
        )
        try:
            return connection.fetch(request, timeout_s)
        except ReplicaChannelError as exc:
            self.close()
            self._handle = None
            raise BrokerNotAvailableError(str(exc)) from None
        except BrokerNotAvailableError:
            # The leader's process no longer serves the partition here (closed, or hosted elsewhere now).
            self.close()
            self._handle = None
            raise

    def share(self, member: SharedFetchMember) -> bool:
        if self._unreachable:
            return False
        address = self._channel_address()
        if address is None:
            return False
        shared_fetch.share(
            address,
            self._me,
            self._state.topic,
            self._state.partition,
            self._state.leader_epoch,
            member,
            max_wait_ms=self._settings.fetch_wait_max_ms,
            response_max_bytes=self._settings.fetch_response_max_bytes,
            timeout_s=REPLICA_CALL_TIMEOUT_S + self._settings.fetch_wait_max_ms / 1000,
        )
        return True

    def _channel_address(self) -> ReplicaChannelAddress | None:
        """The replica channel address of the leader's process, asked with a Ray call each time (the partition may be
        hosted by another process since); None if it has none."""
        address = self._call("replica_channel")
        if not isinstance(address, ReplicaChannelAddress):
            self._unreachable = True
            return None
        return address

    def _channel(self) -> LeaderConnection | None:
        """The open connection to the leader's replica channel, opened first if need be; None if the channel
        cannot be reached, from then on."""
        if self._connection is None:
            address = self._channel_address()
            if address is None:
                return None
            try:
                self._connection = LeaderConnection(address)
            except ReplicaChannelError as exc:
                logger.warning(
                    "%s-%d: fetching from the leader with Ray calls: %s", self._state.topic, self._state.partition, exc
                )
                self._unreachable = True
                return None
        return self._connection

    def _replicate_by_call(self, offset: int, max_bytes: int, max_wait_ms: int, timeout_s: float) -> ReplicaFetch:
        pieces = piece_count(max_bytes)
        answer = self._call(
            "replicate",
            self._me,
            offset,
            max_bytes,
            max_wait_ms,
            self._state.leader_epoch,
            pieces,
            timeout_s=timeout_s,
            num_returns=pieces,
        )
        assert isinstance(answer, (tuple, list))
        return join(answer)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def log_start_offset(self) -> int:
        answer = self._call("offsets")
        assert isinstance(answer, tuple)
        return int(answer[0])

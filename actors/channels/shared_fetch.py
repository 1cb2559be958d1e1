"""A follower process's shared fetches: every partition it follows from one leader process fetched in one request.

Kafka's follower broker runs one fetcher thread per leader broker, whose Fetch carries every partition it follows
there; the leader answers once any of them has records (or after `replica.fetch.wait.max.ms`). A raybroker follower
does the same over the leader process's replica channel (`actors.channels.replica_channel`): `share` adds a
partition (its `SharedFetchMember`, `actors.core.replication.follower`) to the `SharedFetch` of its leader's channel
address, started with its first partition. Its thread loops:

1. asks each partition where it fetches from (`fetch_offset`); one that answers None leaves (`leave(None)`);
2. sends one `SharedFetchRequest` of them all over its connection, in an order that turns each round so that no
   partition always comes after the answer's `replica.fetch.response.max.bytes` is spent;
3. gives each partition its answer (`take`), or hands it back with the error the leader refused it with (`leave`).

A partition added while a fetch is in flight is in the next one, as in Kafka's fetcher. A fetch that cannot be
completed (the leader's process ended, the connection failed, no answer within the timeout) ends the `SharedFetch`:
every partition is handed back with `BrokerNotAvailableError`, and the next `share` of the address starts a new one.
A `SharedFetch` without partitions for `IDLE_S` ends too, closing its connection.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from actors.channels.leader_connection import LeaderConnection, ReplicaChannelError
from actors.channels.replica_channel import ReplicaChannelAddress
from actors.channels.replica_fetch_frames import PartitionFetch, SharedFetchRequest
from actors.core.replication.follower import ReplicaFetch, SharedFetchMember
from storage.errors import BrokerNotAvailableError, RaybrokerError
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# How long a shared fetch without partitions keeps its thread and connection.
IDLE_S = 60.0

# (topic, partition) -> the partition's member and the leader epoch it follows in.
_Members = dict[TopicPartition, tuple[SharedFetchMember, int]]


class SharedFetch:
    """The fetch a follower process `follower` shares for every partition it follows from the leader process at
    `address`; see the module docstring. `ended` is told once it ends."""

    def __init__(
        self,
        address: ReplicaChannelAddress,
        follower: str,
        max_wait_ms: int,
        response_max_bytes: int,
        timeout_s: float,
        ended: Callable[[SharedFetch], None],
    ) -> None:
        self.address = address
        self._follower = follower
        self._max_wait_ms = max_wait_ms
        self._response_max_bytes = response_max_bytes
        self._timeout_s = timeout_s
        self._ended = ended
        self._members: _Members = {}
        self._round = 0
        self._over = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"raybroker-shared-fetch-{address.host}:{address.port}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def add(self, topic: str, partition: int, leader_epoch: int, member: SharedFetchMember) -> bool:
        """Fetches (topic, partition) in `leader_epoch` for `member` from the next fetch on, in place of any member
        of it before; False if this fetch has ended."""
        with self._changed:
            if self._over:
                return False
            self._members[(topic, partition)] = (member, leader_epoch)
            self._changed.notify_all()
            return True

    def _run(self) -> None:
        try:
            connection = LeaderConnection(self.address)
        except ReplicaChannelError as exc:
            self._end(BrokerNotAvailableError(str(exc)))
            return
        try:
            self._fetch_until_ended(connection)
        finally:
            connection.close()

    def _fetch_until_ended(self, connection: LeaderConnection) -> None:
        while True:
            asked = self._next_request()
            if asked is None:
                return
            keys, members, request = asked
            try:
                answers = connection.fetch_many(request, self._timeout_s)
            except ReplicaChannelError as exc:
                self._end(BrokerNotAvailableError(str(exc)))
                return
            except RaybrokerError as exc:
                for key, member in zip(keys, members, strict=True):
                    self._hand_back(key, member, exc)
                continue
            for key, member, answer in zip(keys, members, answers, strict=True):
                if isinstance(answer, ReplicaFetch):
                    self._take(key, member, answer)
                else:
                    self._hand_back(key, member, answer)

    def _next_request(self) -> tuple[list[TopicPartition], list[SharedFetchMember], SharedFetchRequest] | None:
        """Steps 1 and 2's request, once some partition is to be fetched; None once the fetch ended idle."""
        while True:
            with self._changed:
                if not self._members and not self._changed.wait_for(lambda: bool(self._members), IDLE_S):
                    self._over = True
                    break
                members = list(self._members.items())
                self._round += 1
            turn = self._round % len(members)
            keys: list[TopicPartition] = []
            asked: list[SharedFetchMember] = []
            fetches: list[PartitionFetch] = []
            for key, (member, leader_epoch) in members[turn:] + members[:turn]:
                offset = member.fetch_offset()
                if offset is None:
                    self._hand_back(key, member, None)
                    continue
                keys.append(key)
                asked.append(member)
                fetches.append(PartitionFetch(key[0], key[1], offset, member.max_bytes, leader_epoch))
            if fetches:
                request = SharedFetchRequest(
                    self._follower, self._max_wait_ms, self._response_max_bytes, tuple(fetches)
                )
                return keys, asked, request
        self._ended(self)
        return None

    def _take(self, key: TopicPartition, member: SharedFetchMember, answer: ReplicaFetch) -> None:
        """Step 3 for one partition: its answer applied, or the partition handed back with what applying raised."""
        try:
            member.take(answer)
        except RaybrokerError as exc:
            self._hand_back(key, member, exc)
        except Exception as exc:
            logger.exception("shared fetch from %r: %s-%d failed to apply an answer", self.address, *key)
            self._hand_back(key, member, RaybrokerError(f"applying a fetch failed: {type(exc).__name__}"))

    def _hand_back(self, key: TopicPartition, member: SharedFetchMember, error: RaybrokerError | None) -> None:
        """Removes `member` (unless replaced by now) and hands its partition back with `error`."""
        with self._changed:
            if self._members.get(key, (None, 0))[0] is member:
                del self._members[key]
        member.leave(error)

    def _end(self, error: RaybrokerError) -> None:
        """Ends the fetch: every partition handed back with `error`."""
        with self._changed:
            self._over = True
            members = list(self._members.values())
            self._members.clear()
        self._ended(self)
        for member, _ in members:
            member.leave(error)


_SHARED: dict[tuple[ReplicaChannelAddress, str], SharedFetch] = {}
_SHARED_LOCK = threading.Lock()


def share(
    address: ReplicaChannelAddress,
    follower: str,
    topic: str,
    partition: int,
    leader_epoch: int,
    member: SharedFetchMember,
    *,
    max_wait_ms: int,
    response_max_bytes: int,
    timeout_s: float,
) -> None:
    """Fetches (topic, partition) for `member` in the shared fetch of this process (follower node `follower`) from
    the replica channel at `address`, which starts (with the settings given) if none runs."""
    key = (address, follower)
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is not None and shared.add(topic, partition, leader_epoch, member):
            return
        shared = SharedFetch(address, follower, max_wait_ms, response_max_bytes, timeout_s, _forget)
        _SHARED[key] = shared
        shared.add(topic, partition, leader_epoch, member)
    shared.start()


def _forget(shared: SharedFetch) -> None:
    """An ended shared fetch is no longer found by `share`."""
    with _SHARED_LOCK:
        for key, found in list(_SHARED.items()):
            if found is shared:
                del _SHARED[key]


__all__ = ["IDLE_S", "SharedFetch", "share"]

"""The route of writes to a partition's leader, one implementation for everything that writes: the Python
producer's sender (`actors.clients.sender`, from a thread of its own), the Kafka listener
(`cluster.protocol.views.ray_broker_view`, from an event loop), and the coordinators
(`actors.server.internal_partition_leaders`: their own records and transactional offsets;
`actors.server.transaction_coordinator_actor`: COMMIT/ABORT markers). A write is a client's batches (`Batches`), a
coordinator's transactional batch (`CoordinatorBatch`) or a marker (`Marker`); each goes the same way.

- Leader: the controller names the node that leads the partition and `actors.server.partition_lookup` finds the replica
  there. The controller tells replicas their states without waiting, so a replica elected a moment ago may not know
  it leads yet and would refuse what is sent to it: the lookup waits (`LEADERSHIP_KNOWN_S`) until the replica holds
  the state it was elected in. The answer is kept until an append through it fails with a retriable error
  (`storage.errors`: the actor restarted, the leader moved, the topic was deleted and created again), after which
  the next append looks again.
- Transport: a partition whose leader is on this node gets its appends over the leader process's append channel
  (`actors.channels.append_connection`: ~0.1 ms where an actor call takes 1-2 ms, and a 1 MB batch is not put in
  Ray's object store); any other, as a Ray call to the leader's actor.
- `acks=-1` (every coordinator write): with followers, the append's answer is handed on to the leader's
  `await_replicated`, which answers
  once the in-sync replicas have the batches: a Ray call's answer as its argument (Ray resolves it first), a
  channel's once it came back; the wait runs on the leader's replication threads, so its write thread (and its
  channel) never waits. With one replica the append's answer is the acknowledgement already.
- Order: appends to one partition are submitted in the order they were asked for (`append` also while an earlier
  one still waits for its lookup on a worker thread or for what it must await first: `actors.server.append_order`);
  Ray runs one caller's calls to an actor in submission order and a channel answers in order, so the log gets a
  client's batches in its order, on which an idempotent producer's sequence numbers depend. After an idempotent
  producer's append failed with a retriable error, its later appends to the partition are refused until the failed
  one is retried (`actors.server.sequence_fence`): a route looked up again meanwhile must not carry them to the
  new leader ahead of it. A failure before sending counts too (no leader elected yet for the retry): the new
  leader would answer the later ones OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka starts a new producer epoch
  and writes again whatever of its unacknowledged messages the old leader had replicated. Nor is an append sent
  to a leader looked up again while earlier appends of its producer still wait for answers from the previous one.
- Lost answers: an append whose leader's process went away before answering may have been written, and
  replicated; it fails with `RequestTimedOutError`, Kafka's REQUEST_TIMED_OUT, which Kafka's clients read as
  possibly written, where LEADER_NOT_AVAILABLE would tell them it was not.
- Replaced leaders: a Ray call to a process that stands still (paused, hung) while Ray keeps its node alive never
  answers and never fails. So an append that waited `LEADER_CHECK_S` makes the route ask the controller for the
  partition's state (one thread per route, one question per partition and check, `_LeaderWatch`); once the
  controller has elected a leader in a later epoch than the one the append went to (the old one fenced by its
  missing heartbeats), the append fails as a lost answer does, `RequestTimedOutError`, and the next one looks the
  leader up again. Without it every append through the route went on to the paused leader until it resumed,
  librdkafka's retries through a listener included (measured: 90 s against Kafka's 61 s, `failover_pause_s`).

A thread that drives its own calls in flight (the sender) takes `leader(...)` (blocking on a lookup), then
`send(...)`, which answers an `AppendCall` at once; an event loop awaits `append(...)`. Either way the answer is
the partition's `LogAppendInfo` or its typed error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from actors.calls import call, controller, finished
from actors.channels.append_connection import AppendConnection, AppendConnections, AppendReply
from actors.core.replication.leader_and_isr import LeaderAndIsr
from actors.core.replication.replica import ACKS_ALL, ACKS_ALL_TIMEOUT_MS
from actors.core.transactions.markers import TransactionMarker
from actors.server.append_order import AppendOrder
from actors.server.lookup_batches import LookupBatches
from actors.server.partition_lookup import leader_replicas
from actors.server.sequence_fence import BatchProducer, SequenceFences, batch_producer
from storage.errors import AnswerLostError, BrokerNotAvailableError, RaybrokerError, RequestTimedOutError
from storage.partition.log import LogAppendInfo

logger = logging.getLogger(__name__)

PartitionKey = tuple[str, int]
# How long an append waits before its route asks whether the controller replaced the leader it went to, and how
# often it asks again while the append waits.
LEADER_CHECK_S = 1.0
# How long a lookup waits for the replica the controller elected to learn its state, and how often it asks.
LEADERSHIP_KNOWN_S = 2.0
LEADERSHIP_POLL_S = 0.02


class LeaderWrite(Protocol):
    """One write to a partition's leader, as each transport sends it."""

    def over_channel(self, channel: AppendConnection, topic: str, partition: int, acks: int) -> AppendReply:
        """Sent over the leader's append channel."""
        ...

    def as_call(self, handle: Any, acks: int) -> Any:
        """Sent as a Ray call to the leader's actor; its `ObjectRef`."""
        ...


@dataclass(frozen=True, slots=True)
class Batches:
    """A client's batches (Kafka wire bytes), appended with the client's acks."""

    batches: bytes

    def over_channel(self, channel: AppendConnection, topic: str, partition: int, acks: int) -> AppendReply:
        return channel.append(topic, partition, self.batches, acks)

    def as_call(self, handle: Any, acks: int) -> Any:
        return handle.append.remote(self.batches, acks)


@dataclass(frozen=True, slots=True)
class CoordinatorBatch:
    """A group coordinator's transactional offset commit (origin COORDINATOR), appended with acks=all."""

    batch: bytes

    def over_channel(self, channel: AppendConnection, topic: str, partition: int, acks: int) -> AppendReply:
        return channel.append_from_coordinator(topic, partition, self.batch)

    def as_call(self, handle: Any, acks: int) -> Any:
        return handle.append_from_coordinator.remote(self.batch)


@dataclass(frozen=True, slots=True)
class Marker:
    """A transaction coordinator's COMMIT/ABORT marker for a producer, written with acks=all."""

    marker: TransactionMarker

    def over_channel(self, channel: AppendConnection, topic: str, partition: int, acks: int) -> AppendReply:
        return channel.write_marker(topic, partition, self.marker)

    def as_call(self, handle: Any, acks: int) -> Any:
        marker = self.marker
        return handle.append_transaction_marker.remote(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.result
        )


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """Where a partition's appends go: its leader's handle, whether it has followers, its append channel (None: the
    appends are Ray calls), and the leader epoch the controller had elected it in when it was looked up."""

    handle: Any
    replicated: bool
    channel: AppendConnection | None
    leader_epoch: int = -1


class AppendCall:
    """One append in flight: the channel's reply or the Ray call's `ObjectRef`, settled into one outcome, which the
    route's leader watch may settle first (`abandon`). `add_done_callback` runs its callback once the outcome is
    there, on the channel's reader, a Ray thread or the watch's thread (it must not wait); `result` (once done) and
    `async_result` give the answer. A retriable failure makes the route forget the leader the call went to."""

    __slots__ = ("_key", "_leader", "_outcome", "_over_channel", "_route", "sent_at")

    def __init__(
        self, route: AppendRoute, key: PartitionKey, leader: PartitionLeader, reply: Any, over_channel: bool
    ) -> None:
        """`reply` is the channel's reply when `over_channel`, else the Ray call's `ObjectRef`."""
        self._route = route
        self._key = key
        self._leader = leader
        self._over_channel = over_channel
        self.sent_at = time.monotonic()
        self._outcome: concurrent.futures.Future[LogAppendInfo] = concurrent.futures.Future()
        if over_channel:
            reply.add_done_callback(self._settle)
        else:
            reply.future().add_done_callback(self._settle)

    @property
    def key(self) -> PartitionKey:
        return self._key

    @property
    def leader(self) -> PartitionLeader:
        return self._leader

    def _settle(self, done: concurrent.futures.Future[Any]) -> None:
        try:
            info = done.result(0) if self._over_channel else finished(done)
        except RaybrokerError as exc:
            self._set(self._failed(exc))
        except Exception as exc:  # not a raybroker error: the outcome carries it as it is
            self._set(exc)
        else:
            self._set(info)

    def _set(self, outcome: LogAppendInfo | BaseException) -> None:
        """Settles the outcome once: the first of the answer and the watch's `abandon` wins."""
        self._route.watch.remove(self)
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            if isinstance(outcome, BaseException):
                self._outcome.set_exception(outcome)
            else:
                self._outcome.set_result(outcome)

    def abandon(self, why: str) -> None:
        """Fails the append as possibly written (its answer may still come; it is dropped): the controller replaced
        the leader it went to."""
        self._set(self._failed(AnswerLostError(why)))

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        self._outcome.add_done_callback(lambda _: callback())

    def result(self) -> LogAppendInfo:
        """The answer of a call that is done (else waits for it); the partition's typed error if it failed,
        `RequestTimedOutError` if its answer was lost (see `_failed`)."""
        return self._outcome.result()

    async def async_result(self) -> LogAppendInfo:
        """`result`, awaited on the running event loop."""
        return await asyncio.wrap_future(self._outcome)

    def _failed(self, error: RaybrokerError) -> RaybrokerError:
        """The error the append fails with; a retriable one makes the route forget the leader. An answer lost with
        the leader's process (`AnswerLostError`) leaves the append possibly written, possibly replicated too: it
        fails as Kafka's REQUEST_TIMED_OUT, which Kafka's clients read so and retry, not as LEADER_NOT_AVAILABLE,
        which they read as not written (as a Kafka client whose leader's connection broke mid-request sees it)."""
        if isinstance(error, AnswerLostError):
            error = RequestTimedOutError(
                f"the leader of {self._key[0]}-{self._key[1]} went away before answering an append, which may or "
                f"may not be written: {error}"
            )
        if error.retriable:
            self._route.forget(*self._key, leader=self._leader)
        return error


class _LeaderWatch:
    """The appends of a route still waiting, and a thread that fails those whose leader the controller replaced
    (see the module docstring); the thread starts with the first append and ends with `close`."""

    def __init__(self) -> None:
        self._waiting: dict[int, AppendCall] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, append: AppendCall) -> None:
        with self._lock:
            self._waiting[id(append)] = append
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._run, name="raybroker-leader-watch", daemon=True)
                self._thread.start()

    def remove(self, append: AppendCall) -> None:
        with self._lock:
            self._waiting.pop(id(append), None)

    def close(self) -> None:
        self._closed.set()

    def _run(self) -> None:
        while not self._closed.wait(LEADER_CHECK_S):
            self.check()

    def check(self) -> int:
        """Fails every append that waited `LEADER_CHECK_S` on a leader the controller has replaced since; how many."""
        now = time.monotonic()
        by_leader: dict[tuple[PartitionKey, int], list[AppendCall]] = defaultdict(list)
        with self._lock:
            for append in self._waiting.values():
                if now - append.sent_at >= LEADER_CHECK_S:
                    by_leader[(append.key, append.leader.leader_epoch)].append(append)
        abandoned = 0
        for ((topic, partition), epoch), appends in by_leader.items():
            try:
                state = call(controller().partition_state.remote(topic, partition), timeout_s=LEADER_CHECK_S * 5)
            except RaybrokerError as exc:
                logger.debug("%s-%d: the controller did not answer the leader check: %s", topic, partition, exc)
                continue
            if state.leader_epoch <= epoch:
                continue
            why = (
                f"the controller replaced the leader of {topic}-{partition} (epoch {epoch}, now {state.leader_epoch}) "
                "while an append to it waited"
            )
            for append in appends:
                append.abandon(why)
            abandoned += len(appends)
        return abandoned


class AppendRoute:
    """One client's route to the leaders of the partitions it appends to; see the module docstring. `leader` and
    `send` may be called from several threads; `append` from one event loop."""

    def __init__(self, same_node_channels: bool = True) -> None:
        """`same_node_channels` False sends every append as a Ray call, as a route on another node does."""
        self._same_node_channels = same_node_channels
        self._connections = AppendConnections()
        self._leaders: dict[PartitionKey, PartitionLeader] = {}
        self._order = AppendOrder()
        self._fences = SequenceFences()
        self._lookups: LookupBatches[PartitionKey, PartitionLeader] = LookupBatches(self.look_up)
        self.watch = _LeaderWatch()

    def leader(self, topic: str, partition: int) -> PartitionLeader:
        """The partition's leader as last found, or looked up now (blocking: Ray's name service, the controller).
        Raises what the lookup raises (`BrokerNotAvailableError` while it has no leader, retriable)."""
        key = (topic, partition)
        leader = self._leaders.get(key) or self.look_up([key])[key]
        if isinstance(leader, RaybrokerError):
            raise leader
        return leader

    def look_up(self, keys: list[PartitionKey]) -> dict[PartitionKey, PartitionLeader | RaybrokerError]:
        """The leaders of `keys` looked up together (blocking), each kept for the partition's next appends, or the
        error its lookup met: one question to the controller and to each leading node's log manager
        (`leader_replicas`), and the replicas' own questions (whether each knows it leads, which channel serves it)
        all sent before any answer is awaited."""
        found: dict[PartitionKey, PartitionLeader | RaybrokerError] = {}
        replicas: dict[PartitionKey, tuple[Any, LeaderAndIsr]] = {}
        for key, replica in leader_replicas(keys).items():
            if isinstance(replica, RaybrokerError):
                found[key] = replica
            else:
                replicas[key] = replica
        local = self._connections.node if self._same_node_channels else None
        asked = {
            key: (handle.replication_state.remote(), handle.append_channel.remote() if state.leader == local else None)
            for key, (handle, state) in replicas.items()
        }
        for key, (state_asked, channel_asked) in asked.items():
            handle, state = replicas[key]
            try:
                _await_leadership(handle, state, call(state_asked, timeout_s=LEADERSHIP_KNOWN_S))
                channel = None if channel_asked is None else self._connections.for_address(call(channel_asked))
            except RaybrokerError as exc:
                found[key] = exc
                continue
            leader = PartitionLeader(handle, state.replication_factor > 1, channel, state.leader_epoch)
            self._leaders[key] = found[key] = leader
        return found

    def kept(self, topic: str, partition: int) -> PartitionLeader | None:
        """The partition's leader as last found, None if it is to be looked up."""
        return self._leaders.get((topic, partition))

    def send(
        self,
        leader: PartitionLeader,
        topic: str,
        partition: int,
        batches: bytes,
        acks: int,
        timeout_ms: int = ACKS_ALL_TIMEOUT_MS,
    ) -> AppendCall:
        """Submits one append of a client's `batches` to `leader` and answers at once (`write`)."""
        return self.write(leader, topic, partition, Batches(batches), acks, timeout_ms)

    def write(
        self,
        leader: PartitionLeader,
        topic: str,
        partition: int,
        write: LeaderWrite,
        acks: int,
        timeout_ms: int = ACKS_ALL_TIMEOUT_MS,
    ) -> AppendCall:
        """Submits one write to `leader` and answers at once. A channel broken before the write fails it with
        `BrokerNotAvailableError`, one that breaks while it waits with `RequestTimedOutError`; both are retriable,
        and the partition is looked up again."""
        channel = leader.channel
        reply: Any
        if channel is not None:
            reply = write.over_channel(channel, topic, partition, acks)
            if acks == ACKS_ALL and leader.replicated:
                reply = _replicated_after(reply, leader.handle, timeout_ms)
        else:
            reply = write.as_call(leader.handle, acks)
            if acks == ACKS_ALL and leader.replicated:
                reply = leader.handle.await_replicated.remote(reply, timeout_ms)
        appended = AppendCall(self, (topic, partition), leader, reply, channel is not None)
        if leader.replicated:
            self.watch.add(appended)
        return appended

    async def append(
        self,
        topic: str,
        partition: int,
        batches: bytes,
        acks: int,
        timeout_ms: int = ACKS_ALL_TIMEOUT_MS,
        admitted: Awaitable[None] | None = None,
    ) -> LogAppendInfo:
        """`send` for an event loop: submitted after every earlier `append` of the partition (`AppendOrder`), once
        `admitted` (when given: what must succeed first, e.g. a transactional batch's verification) is done, the
        lookup run on a worker thread; answers the partition's `LogAppendInfo` or raises its typed error (the error
        of `admitted`, unsent; `NotLeaderOrFollowerError`, unsent, for an idempotent producer's append behind a
        failed one of its own: see the module docstring)."""
        key = (topic, partition)
        producer = batch_producer(batches)
        async with self._order.turn(key):
            try:
                if admitted is not None:
                    await admitted
                leader = self._leaders.get(key) or await self._lookups.get(key)
                if producer is not None:
                    # After the lookup: an earlier append's failure may have come in while it ran.
                    self._fences.check(key, producer)
                    self._fences.sending(key, producer, leader)
                try:
                    appended = self.send(leader, topic, partition, batches, acks, timeout_ms)
                except BaseException:
                    if producer is not None:
                        self._fences.answered(key, producer)
                    raise
            except RaybrokerError as exc:
                # Fenced before the next append takes its turn: a retry whose lookup failed (no leader elected yet)
                # keeps the fence, and the appends behind it must not pass it to the new leader.
                self._fail(key, producer, exc)
                raise
        try:
            return await appended.async_result()
        except RaybrokerError as exc:
            self._fail(key, producer, exc)
            raise
        finally:
            if producer is not None:
                self._fences.answered(key, producer)

    def _fail(self, key: PartitionKey, producer: BatchProducer | None, error: RaybrokerError) -> None:
        """Records an idempotent producer's failed append with the fences (see the module docstring)."""
        if producer is not None:
            self._fences.failed(key, producer, error)

    def forget(self, topic: str, partition: int, leader: PartitionLeader | None = None) -> None:
        """Looks the partition up again at its next append (only if `leader` is still the one kept, when given)."""
        key = (topic, partition)
        if leader is None or self._leaders.get(key) is leader:
            self._leaders.pop(key, None)

    def forget_topic(self, topic: str) -> None:
        """Looks every partition of `topic` up again (a deleted topic may be created again elsewhere)."""
        for key in [key for key in self._leaders if key[0] == topic]:
            self._leaders.pop(key, None)

    def close(self) -> None:
        """Closes the append channel connections; their appends still waiting fail with `RequestTimedOutError`."""
        self.watch.close()
        self._connections.close()


def _await_leadership(handle: Any, state: LeaderAndIsr, known: LeaderAndIsr | None) -> None:
    """Returns once the replica `handle` holds `state` or a newer one (its leader epoch), `known` being the state it
    held when last asked; `BrokerNotAvailableError` (LEADER_NOT_AVAILABLE, retriable) if it does not within
    `LEADERSHIP_KNOWN_S`. An idempotent producer's pipeline sent to a replica that learns it leads between two of
    its appends would be refused NOT_LEADER_OR_FOLLOWER for the first and OUT_OF_ORDER_SEQUENCE_NUMBER for the
    next, on which librdkafka starts a new producer epoch and writes its unacknowledged messages again."""
    deadline = time.monotonic() + LEADERSHIP_KNOWN_S
    while True:
        if known is not None and known.leader_epoch >= state.leader_epoch:
            return
        if time.monotonic() >= deadline:
            raise BrokerNotAvailableError(
                f"the leader of {state.topic}-{state.partition} was elected in epoch {state.leader_epoch} but does "
                f"not know it yet (it holds epoch {None if known is None else known.leader_epoch})"
            )
        time.sleep(LEADERSHIP_POLL_S)
        known = call(handle.replication_state.remote(), timeout_s=LEADERSHIP_KNOWN_S)


def _replicated_after(appended: AppendReply, handle: Any, timeout_ms: int) -> AppendReply:
    """The reply of a channel append with followers and `acks=all`: once the channel answered, the leader's
    `await_replicated` of its `LogAppendInfo` (a Ray call with a small argument), answered as the channel's replies
    are (the append's own error, when it failed, is the answer)."""
    replicated: AppendReply = concurrent.futures.Future()

    def settle(waited: concurrent.futures.Future[Any]) -> None:
        try:
            replicated.set_result(finished(waited))
        except Exception as exc:  # any failure is the reply's, as `call` raises it on the Ray route
            replicated.set_exception(exc)

    def wait_for_replicas(done: AppendReply) -> None:
        try:
            info = done.result()
            waiting = handle.await_replicated.remote(info, timeout_ms)
        except RaybrokerError as exc:
            replicated.set_exception(exc)
            return
        except Exception as exc:  # Ray refused the call: the append is written, its replication not known
            replicated.set_exception(AnswerLostError(f"await_replicated not sent: {exc}"))
            return
        waiting.future().add_done_callback(settle)

    appended.add_done_callback(wait_for_replicas)
    return replicated


__all__ = ["AppendCall", "AppendRoute", "Batches", "CoordinatorBatch", "LeaderWrite", "Marker", "PartitionLeader"]

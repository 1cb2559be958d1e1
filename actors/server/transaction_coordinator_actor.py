"""The transaction coordinator actor: transactional producers' ids, epochs and transactions, one per cluster.

All its logic is the plain `actors.core.transactions.transaction_coordinator.TransactionCoordinator` (the state
machine, the
records of `__transaction_state`, loading them, markers, timeouts, expiry), tested without Ray; see that module for
what it owns and guarantees. This actor gives it its Ray seams: the controller actor (to create and describe
`__transaction_state`, and for producer ids), each `__transaction_state` partition's leader actor, the partition
actors the markers go to (`TransactionMarkers`: a marker on `__consumer_offsets` also completes the producer's
transactional offsets in the group coordinator actor), the wall clock, a thread that runs the coordinator's
periodic work (marker retries, timed-out aborts, id expiry) every `TICK_S`, and one that writes each committed or
aborted transaction's markers and Complete state once its EndTxn is answered (Kafka answers EndTxn once the Prepare
state is durable).

On its own node a transaction's steady state makes no Ray call, where it made seven (three from the listener, the
Ongoing, PrepareCommit and Complete appends and the marker): listeners call it over its transaction channel
(`actors.channels.transaction_channel`: AddPartitionsToTxn, Produce's verification, EndTxn), and its
`__transaction_state` appends and its markers go through its `AppendRoute` (`actors.server.append_route`, the
route of every write to a leader): over the append channel (`actors.channels.append_channel`) of a partition whose
leader is on this node, its followers' replication then awaited with one Ray call to the leader's
`await_replicated`; a marker on `__consumer_offsets` completes the offsets over the group coordinator's channel
(`OffsetsCompletion`) when it runs on this node. Every other call, and every partition led elsewhere, is a Ray call;
the acks=all guarantee is the same either way.

The actor is started by the first transactional request (Kafka creates `__transaction_state` on the first
FindCoordinator for a transactional id: a cluster whose clients never use transactions never pays for the topic's
partitions), on the node leading `__transaction_state`'s partition 0 (`actors.clients.broker.
transaction_coordinator`). As soon as it runs, its periodic thread makes the plain coordinator and loads the states,
completing every PrepareCommit/PrepareAbort it finds; until then a producer's calls (InitProducerId,
AddPartitionsToTxn, the verification, EndTxn) answer `CoordinatorLoadInProgressError` at once, as Kafka's answer
COORDINATOR_LOAD_IN_PROGRESS, and clients retry. They must not wait in the actor's queue instead: a call a client
gave up on and sent again would still run later, and a second InitProducerId bumping the epoch behind the one the
client was answered would leave it fenced. Reads (`describe`, `list_transactions`) and `ready` wait for the load.
Ray restarts the actor in place if its process dies, and the restarted one loads at once too, so it aborts the
transactions of producers that died with it when they time out, whether or not a client calls it. If its node is
lost, the controller's monitor (`actors.server.controller_actor`) or the next caller, whichever comes first, starts it
again beside the partition's new leader, and the new one does the same.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Collection, Iterable
from typing import Any

import ray

from actors import heap_trim
from actors.calls import call, controller, get_actor, this_node_id
from actors.channels.group_connection import GroupCaller
from actors.channels.transaction_channel import TransactionChannel
from actors.core.controller.topic_metadata import TRANSACTION_STATE_TOPIC
from actors.core.replication.replica import ACKS_ALL
from actors.core.transactions.markers import OffsetsCompletingMarkers, TransactionMarker, write_marker
from actors.core.transactions.transaction_coordinator import (
    EndTxnResult,
    InitProducerIdResult,
    TransactionCoordinator,
    TransactionDescription,
)
from actors.core.transactions.transaction_metadata import TxnError
from actors.options import group_coordinator_name, transaction_coordinator_options
from actors.server.append_route import AppendCall, AppendRoute, Marker, PartitionLeader
from actors.server.internal_partition_leaders import RayInternalPartition, RayTopicAdmin
from storage.clock import SYSTEM_CLOCK
from storage.config.transaction_config import TransactionConfig
from storage.errors import CoordinatorLoadInProgressError, RaybrokerError
from storage.logdir.scheduler import Scheduler
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# How often the periodic work is looked at; each task runs at its own period (10 s, 1 h by default).
TICK_S = 1.0


class RayTransactionMarkers:
    """Markers written by the partitions' leader actors through the coordinator's `AppendRoute`
    (`actors.server.append_route`, the route of every write to a leader: a leader's append channel on this node,
    followers or not, else Ray calls), every partition's at once (`TransactionMarkers`). A marker counts as written
    once every in-sync replica has it (Kafka's WriteTxnMarkers appends with acks -1). The route keeps each leader
    after its first lookup, as producers keep theirs; a marker the kept leader fails to write is tried once more on a
    leader looked up again (the leader may have moved, its process restarted); only that second failure is the
    caller's."""

    def __init__(self, route: AppendRoute) -> None:
        self._route = route

    def write_markers(
        self, partitions: Collection[TopicPartition], marker: TransactionMarker
    ) -> dict[TopicPartition, RaybrokerError]:
        write = Marker(marker)
        failed: dict[TopicPartition, RaybrokerError] = {}
        under_way = []
        for key in partitions:
            kept = self._route.kept(*key)
            try:
                under_way.append((key, kept, self._write(key, kept, write)))
            except RaybrokerError as exc:
                self._route.forget(*key)
                failed[key] = exc
        for key, kept, written in under_way:
            try:
                try:
                    written.result()
                except RaybrokerError:
                    if kept is None:
                        raise
                    self._route.forget(*key)
                    self._write(key, None, write).result()
            except RaybrokerError as exc:
                self._route.forget(*key)
                failed[key] = exc
        return failed

    def _write(self, key: TopicPartition, leader: PartitionLeader | None, marker: Marker) -> AppendCall:
        """Sends the marker to `leader`, or to the partition's leader looked up now."""
        return self._route.write(leader or self._route.leader(*key), *key, marker, ACKS_ALL)


class TransactionCoordinatorActor:
    """The plain `TransactionCoordinator` over Ray's seams; see the module docstring."""

    def __init__(self, config: TransactionConfig) -> None:
        heap_trim.start()
        self._config = config
        self._making = threading.Lock()
        self._coordinator: TransactionCoordinator | None = None
        self._loaded = threading.Event()
        self._channel_lock = threading.Lock()
        self._route = AppendRoute()
        self._markers = marker_writer(self._route)
        self._channel: TransactionChannel | None = None
        # One thread: completions run in the order their EndTxn was answered.
        self._completions = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="transaction-markers")
        self._scheduler = Scheduler(SYSTEM_CLOCK)
        self._stopped = threading.Event()
        threading.Thread(target=self._tick, name="transaction-coordinator-tasks", daemon=True).start()

    def _tick(self) -> None:
        """Makes and loads the coordinator as soon as the actor runs, then runs its periodic work every `TICK_S`.
        A coordinator Ray restarted after its process died thus loads and aborts the timed-out transactions of
        producers that died with it, which nobody else would call it for."""
        while not self._stopped.is_set():
            if not self._loaded.is_set():
                try:
                    self.ready()
                except RaybrokerError as exc:
                    logger.warning("transaction coordinator not loaded yet: %s", exc)
            if self._loaded.is_set():
                self._scheduler.run_due()
            self._stopped.wait(TICK_S)

    def _made(self) -> TransactionCoordinator:
        """The plain coordinator, made now if need be (the caller waits)."""
        with self._making:
            if self._coordinator is None:
                # The controller is looked up at each call: one started again (its node lost) is a new actor.
                coordinator = TransactionCoordinator(
                    self._config,
                    clock=SYSTEM_CLOCK,
                    controller=RayTopicAdmin(),
                    find_partition=lambda partition: RayInternalPartition.leader_of(
                        TRANSACTION_STATE_TOPIC, partition, self._route
                    ),
                    allocate_producer_id=lambda: int(call(controller().allocate_producer_id.remote())),
                    allocate_coordinator_epoch=lambda at_least: int(
                        call(controller().allocate_coordinator_epoch.remote(at_least))
                    ),
                    markers=self._markers,
                    completions=self._completions.submit,
                )
                coordinator.schedule(self._scheduler)
                self._coordinator = coordinator
            return self._coordinator

    @property
    def _serving(self) -> TransactionCoordinator:
        """The loaded coordinator, for a producer's call; `CoordinatorLoadInProgressError` (retriable) at once while
        it is made or loads (see the module docstring)."""
        coordinator = self._coordinator
        if coordinator is None or not self._loaded.is_set():
            raise CoordinatorLoadInProgressError("the transaction coordinator is loading __transaction_state")
        return coordinator

    def ready(self) -> int:
        """Makes the coordinator and loads every `__transaction_state` partition it can reach (waiting for both);
        how many are loaded. Producers' calls are served from then on."""
        loaded = self._made().ready()
        self._loaded.set()
        return loaded

    def _loaded_coordinator(self) -> TransactionCoordinator:
        """The coordinator once loaded, waiting for the load (for reads and `ready`)."""
        if not self._loaded.is_set():
            self.ready()
        return self._made()

    def transaction_channel(self) -> tuple[str, str]:
        """(node, address): the Ray node this actor runs on and the address of its transaction channel
        (`actors.channels.transaction_channel`), which listens from the first call."""
        with self._channel_lock:
            if self._channel is None:
                self._channel = TransactionChannel(self)
            return this_node_id(), self._channel.address

    def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        return self._serving.init_producer_id(transactional_id, transaction_timeout_ms, producer_id, producer_epoch)

    def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> TxnError:
        return self._serving.add_partitions(transactional_id, producer_id, producer_epoch, partitions)

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        return self._serving.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> TxnError:
        return self._serving.end_transaction(transactional_id, producer_id, producer_epoch, commit)

    def add_partitions_implicitly(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, TxnError]:
        return self._serving.add_partitions_implicitly(transactional_id, producer_id, producer_epoch, partitions)

    def end_transaction_v2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> EndTxnResult:
        return self._serving.end_transaction_v2(transactional_id, producer_id, producer_epoch, commit)

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        return self._loaded_coordinator().describe(transactional_id)

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], duration_ms: int
    ) -> list[TransactionDescription]:
        return self._loaded_coordinator().list_transactions(states, producer_ids, duration_ms)

    def write_marker(self, topic: str, partition: int, marker: TransactionMarker) -> None:
        """A WriteTxnMarkers marker, written as the coordinator writes its own."""
        write_marker(self._markers, topic, partition, marker)

    def stop(self) -> None:
        """Stops the periodic work (before the actor is killed at the broker's shutdown); completions under way
        finish first."""
        self._stopped.set()
        with self._channel_lock:
            channel = self._channel
        if channel is not None:
            channel.close()
        self._completions.shutdown(wait=True)
        self._route.close()


def marker_writer(route: AppendRoute) -> OffsetsCompletingMarkers:
    """The markers the coordinator and a WriteTxnMarkers write through `route`: the partitions' leader actors', a
    marker on `__consumer_offsets` completing the producer's offsets in the group coordinator actor."""
    return OffsetsCompletingMarkers(RayTransactionMarkers(route), OffsetsCompletion())


class OffsetsCompletion:
    """A marker reached `__consumer_offsets` partition `partition`: the group coordinator actor completes the
    producer's transactional offsets there (`OffsetsCompletingMarkers`). The call goes over the group coordinator's
    channel (`actors.channels.group_connection.GroupCaller`) when it runs on this node, else through Ray; the actor
    and its channel are looked up once, and again after a call failed retriably (the actor restarted or moved)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: Any = None
        self._caller: GroupCaller | None = None

    def __call__(self, partition: int, producer_id: int, commit: bool) -> None:
        handle, caller = self._found()
        try:
            if caller is not None:
                caller.call("complete_transaction", partition, producer_id, commit)
            else:
                call(handle.complete_transaction.remote(partition, producer_id, commit))
        except RaybrokerError as exc:
            if exc.retriable:
                self._forget(handle)
            raise

    def _found(self) -> tuple[Any, GroupCaller | None]:
        with self._lock:
            if self._handle is None:
                handle = get_actor(group_coordinator_name())
                node, address = call(handle.group_channel.remote())
                self._caller = GroupCaller(address) if node and node == this_node_id() else None
                self._handle = handle
            return self._handle, self._caller

    def _forget(self, handle: Any) -> None:
        with self._lock:
            if self._handle is handle:
                if self._caller is not None:
                    self._caller.close()
                self._handle, self._caller = None, None


# Wrapped here, not in `actors.server.remote` with the other service actors: the controller's monitor starts the
# coordinator too (`start_transaction_coordinator`), and `remote` imports the controller.
RemoteTransactionCoordinator = ray.remote(TransactionCoordinatorActor)


def start_transaction_coordinator(node_id: str, config: TransactionConfig) -> Any:
    """The transaction coordinator actor, started with `config` on `node_id` (the node leading
    `__transaction_state`'s partition 0) unless one runs already: then that one's handle."""
    return RemoteTransactionCoordinator.options(**transaction_coordinator_options(node_id)).remote(config)

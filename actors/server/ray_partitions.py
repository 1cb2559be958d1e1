"""The Ray side of `storage.logdir.partition_handles`: a node's partitions as actors, for its log manager.

`RayPartitions` is the `PartitionFactory` the log-manager actor (`actors.server.log_manager_actor`) gives the plain
`storage.logdir.log_manager.LogManager`; `RayPartition` is the `PartitionHandle` it answers, whose calls are
`.remote()` calls answered by `RayPending` (collected through `actors.calls.call`, so `result()` raises the
partition's own typed error). This module is the one place that creates partition actors and partition
hosts, and wraps their plain classes with `ray.remote`:

- with `log.partitions.per.process` = 1, one partition actor per partition (`actors.server.partition_log`),
  named `partition:<topic>:<partition>:<node id>`, pinned to this node, detached and restarted by Ray; a restarted actor
  resumes (`ResumeAfterRestart`) with its topic's current settings from the controller and its offsets from
  the log dir's checkpoints, since Ray hands it the arguments of its first start;
- with N > 1 (the default, 16), partition hosts (`actors.server.partition_host`) named
  `partition-host:<node>:<index>`, each holding up to N partitions, placed by the plain
  `actors.core.host_placement.HostPlacement`: a new partition goes to the lowest-numbered host with room, and
  `log.partitions.spare.processes` hosts holding no partition are kept started (`start_spares`, called by the
  log manager once it has started), so a new partition opens in a running process. A host restarted by
  Ray asks `hosted_partitions` (HostResumeAfterRestart) which partitions it held and reopens them from disk; a
  factory created by a restarted log manager finds the running hosts by name and what each holds
  (`drop_unopened` then drops what is no longer on disk); and `reopen_lost_partitions`, scheduled by the
  actor, reopens any partition a host should hold but does not.

Actors are named and found again (`get_if_exists`), never duplicated. A partition that does not open is
stopped before `open` raises why: the partition's own typed error, else `BrokerNotAvailableError`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from actors.calls import RayPending, call, call_when_available, controller, get_actor, kill_and_wait
from actors.core.host_placement import HostPlacement, PlacedHost
from actors.core.replication.follower import ReplicaSettings
from actors.open_files import FILES_PER_PARTITION, RESERVED_FILES, partitions_per_process, raise_open_file_limit
from actors.options import (
    MAINTENANCE_GROUP,
    PARTITION_CONCURRENCY_GROUPS,
    READ_GROUP,
    log_manager_name,
    partition_actor_name,
    partition_host_name,
    partition_host_options,
    partition_options,
)
from actors.server.partition_host import HostedPartitionSpec, Outcome, PartitionHostActor, partition_method_group
from actors.server.partition_log import PartitionLogActor, ResumePoint
from actors.server.partition_lookup import HostedPartitionHandle, replica_actor
from storage.compaction.clean_result import CleanedLog
from storage.compaction.log_snapshot import LogSnapshot
from storage.config.broker_config import BrokerConfig
from storage.config.log_config import LogConfig
from storage.errors import BrokerNotAvailableError, RaybrokerError
from storage.logdir.log_dirs import checkpointed_offsets
from storage.logdir.partition_handles import PartitionCheckpoints, PartitionHandle, PartitionQuestion
from storage.pending import Pending
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# `concurrency_groups` is a documented `ray.remote` option that Ray's type stubs omit.
_partition_actor = ray.remote(concurrency_groups=PARTITION_CONCURRENCY_GROUPS)  # type: ignore[call-overload]
PartitionLog = _partition_actor(PartitionLogActor)
PartitionHost = _partition_actor(PartitionHostActor)

# The partition host's call that asks many partitions a question of the concurrency group named (every
# `PartitionQuestion` is of one of them).
_BATCHED_CALLS: dict[str | None, str] = {READ_GROUP: "read_each", MAINTENANCE_GROUP: "maintain_each"}
# How long a partition may take to open its log: recovery after a crash reads (and CRC-checks) every batch
# above the recovery point, minutes for gigabytes of unflushed log.
READY_TIMEOUT_SECONDS = 600
# A restarted partition actor waits this long for the controller (itself restarting takes a few seconds)
# before it opens its log with the settings of its first start.
CONFIG_TIMEOUT_SECONDS = 30


class RayPartition:
    """A partition actor, or a partition in a host (`HostedPartitionHandle`), as a `PartitionHandle`."""

    __slots__ = ("actor",)

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def state(self) -> RayPending:
        return RayPending(self.actor.state.remote())

    def update_config(self, config: LogConfig) -> RayPending:
        return RayPending(self.actor.update_config.remote(config.to_properties()))

    def delete_old_segments(self) -> RayPending:
        return RayPending(self.actor.delete_old_segments.remote())

    def delete_due_files(self) -> RayPending:
        return RayPending(self.actor.delete_due_files.remote())

    def flush_if_due(self) -> RayPending:
        return RayPending(self.actor.flush_if_due.remote())

    def remove_expired_producers(self) -> RayPending:
        return RayPending(self.actor.remove_expired_producers.remote())

    def cleanable(self, checkpointed_first_dirty: int | None) -> RayPending:
        return RayPending(self.actor.cleanable.remote(checkpointed_first_dirty))

    def snapshot_for_cleaning(self, first_dirty_offset: int, first_uncleanable_offset: int) -> RayPending:
        return RayPending(self.actor.snapshot_for_cleaning.remote(first_dirty_offset, first_uncleanable_offset))

    def swap_cleaned(self, cleaned: CleanedLog) -> RayPending:
        return RayPending(self.actor.swap_cleaned.remote(cleaned))

    def changed_since(self, snapshot: LogSnapshot) -> RayPending:
        return RayPending(self.actor.changed_since.remote(snapshot))

    def close(self) -> RayPending:
        return RayPending(self.actor.close.remote())

    def go_offline(self, reason: str) -> RayPending:
        return RayPending(self.actor.go_offline.remote(reason))

    def start_move(self, log_dir: str) -> RayPending:
        return RayPending(self.actor.start_move.remote(log_dir))

    def advance_move(self) -> RayPending:
        return RayPending(self.actor.advance_move.remote())

    def abort_move(self) -> RayPending:
        return RayPending(self.actor.abort_move.remote())

    def __repr__(self) -> str:
        return f"RayPartition({self.actor!r})"


class HostAnswers:
    """A partition host's answer to a batched question (`RayPartitions.ask_each`), fetched once and shared by the
    `HostAnswer` of each partition it names."""

    __slots__ = ("_outcomes", "_ref")

    def __init__(self, ref: Any) -> None:
        self._ref = ref
        self._outcomes: list[Outcome] | None = None

    def outcome(self, index: int, timeout: float | None) -> Outcome:
        """The `index`th partition's outcome; the host's failure as a whole (dead, restarting) is raised for each."""
        if self._outcomes is None:
            self._outcomes = call(self._ref, timeout_s=timeout)
        return self._outcomes[index]


class HostAnswer:
    """One partition's answer within a `HostAnswers`, as a `storage.pending.Pending`."""

    __slots__ = ("_answers", "_index")

    def __init__(self, answers: HostAnswers, index: int) -> None:
        self._answers = answers
        self._index = index

    def result(self, timeout: float | None = None) -> Any:
        return self._answers.outcome(self._index, timeout).unwrap()


@dataclass(frozen=True, slots=True)
class ResumeAfterRestart:
    """A partition actor's `resume`: None on a first start (its arguments are current); after a Ray restart,
    the topic's settings from the controller over the broker's defaults (the first start's are kept, with a
    warning, if the controller cannot answer), the partition's folder now (from this node's log manager: it may have
    moved to another log dir since the first start) and the offsets checkpointed in that folder's log dir."""

    topic: str
    partition: int
    folder: str
    broker_log_config: dict[str, str]
    node_id: str

    def __call__(self) -> ResumePoint | None:
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            return None
        config = None
        try:
            topic = call(controller().describe_topic.remote(self.topic), timeout_s=CONFIG_TIMEOUT_SECONDS)
            config = LogConfig.from_properties(topic.config, base=LogConfig.from_properties(self.broker_log_config))
        except RaybrokerError as exc:
            logger.warning("restarted partition of %s keeps the settings of its first start: %s", self.topic, exc)
        folder = self.folder
        try:
            manager = get_actor(log_manager_name(self.node_id))
            folder = call(manager.partition_folder.remote(self.topic, self.partition), timeout_s=CONFIG_TIMEOUT_SECONDS)
        except RaybrokerError as exc:
            logger.warning("restarted partition of %s opens the folder of its first start: %s", self.topic, exc)
        folder = folder or self.folder
        properties = None if config is None else config.to_properties()
        return ResumePoint(properties, *checkpointed_offsets(Path(folder)), directory=folder)


@dataclass(frozen=True, slots=True)
class HostResumeAfterRestart:
    """A partition host's `resume`: None on a first start; after a Ray restart, the partitions it held, from
    this node's log manager (none, with a warning, if it cannot answer: a log manager restarting at the same
    time reopens them itself once it finds the host)."""

    node_id: str
    name: str

    def __call__(self) -> list[HostedPartitionSpec] | None:
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            return None
        try:
            manager = get_actor(log_manager_name(self.node_id))
            return call(manager.hosted_partitions.remote(self.name), timeout_s=CONFIG_TIMEOUT_SECONDS)
        except RaybrokerError as exc:
            logger.warning("restarted partition host %s reopens no partition: %s", self.name, exc)
            return None


class RayPartitions:
    """The `PartitionFactory` of one node's log manager on Ray; see the module docstring."""

    def __init__(self, node_id: str, config: BrokerConfig) -> None:
        self.node_id = node_id
        open_files = raise_open_file_limit()
        self._per_process = partitions_per_process(config.log_partitions_per_process, open_files)
        if self._per_process < config.log_partitions_per_process:
            logger.warning(
                "log.partitions.per.process=%d needs ~%d open files a process, above this node's limit of %d "
                "(ulimit -n): a partition host holds at most %d partitions",
                config.log_partitions_per_process,
                config.log_partitions_per_process * FILES_PER_PARTITION + RESERVED_FILES,
                open_files,
                self._per_process,
            )
        self._cleaner_config = config.cleaner_config.to_properties()
        self._broker_log_config = config.log_config.to_properties()
        self._producer_id_expiration_ms = config.producer_id_expiration_ms
        self._replica_settings = ReplicaSettings.from_broker_config(config)
        # Guards the hosts' placement, and keeps a stop and a reopen of one partition from interleaving;
        # `hosted_partitions` never takes it (see there).
        self._lock = threading.RLock()
        # Partitions placed in a host whose `open_partition` has not answered yet: not lost, only not open yet.
        self._opening: set[TopicPartition] = set()
        self._placement: HostPlacement[Any] | None = None
        if self._per_process > 1:
            self._placement = HostPlacement(
                self._per_process, config.log_partitions_spare_processes, self._start_host, self._running_hosts()
            )

    # --- PartitionFactory --------------------------------------------------------------------------

    def open(
        self, tp: TopicPartition, folder: Path, config: LogConfig, checkpoints: PartitionCheckpoints
    ) -> PartitionHandle:
        """Starts the partition's actor, or opens it in a host, and waits until its log is open. A partition
        actor holds its folder's own lock and tells a clean shutdown by its folder's marker, so
        `had_clean_shutdown` is not passed on."""
        topic, partition = tp
        recovery_point, log_start_offset = checkpoints.recovery_point, checkpoints.log_start_offset
        high_watermark = checkpoints.high_watermark
        if self._placement is not None:
            with self._lock:
                host = self._placement.place(tp, str(folder))
                self._opening.add(tp)
            actor: Any = HostedPartitionHandle(host.handle, topic, partition)
            properties = config.to_properties()

            def opened() -> Any:
                return host.handle.open_partition.remote(
                    topic, partition, str(folder), properties, recovery_point, log_start_offset, high_watermark
                )

        else:
            actor = PartitionLog.options(**partition_options(topic, partition, self.node_id)).remote(
                str(folder),
                config.to_properties(),
                recovery_point,
                log_start_offset,
                self._cleaner_config,
                ResumeAfterRestart(topic, partition, str(folder), self._broker_log_config, self.node_id),
                producer_id_expiration_ms=self._producer_id_expiration_ms,
                replica_settings=self._replica_settings,
                find_replica=replica_actor,
                high_watermark=high_watermark,
            )
            opened = actor.ready.remote
        handle = RayPartition(actor)
        try:
            # An actor of that name may be restarting from a kill (this log manager is then a re-created one).
            call_when_available(opened, timeout_s=READY_TIMEOUT_SECONDS)
        except RaybrokerError:
            self.stop(tp, handle)
            raise
        except Exception as exc:
            self.stop(tp, handle)
            raise BrokerNotAvailableError(f"the actor of {folder.name} did not start: {exc}") from None
        finally:
            with self._lock:
                self._opening.discard(tp)
        return handle

    def ask_each(
        self, handles: Mapping[TopicPartition, PartitionHandle], question: PartitionQuestion
    ) -> dict[TopicPartition, Pending[Any]]:
        """One call per partition host for all the partitions of `handles` it holds (`PartitionHostActor.read_each`
        or `maintain_each`, by the question's concurrency group), one per partition actor."""
        batched = _BATCHED_CALLS[partition_method_group(question)]
        answers: dict[TopicPartition, Pending[Any]] = {}
        by_host: dict[Any, list[TopicPartition]] = {}
        for tp, handle in handles.items():
            assert isinstance(handle, RayPartition), handle
            if isinstance(handle.actor, HostedPartitionHandle):
                by_host.setdefault(handle.actor.host, []).append(tp)
            else:
                answers[tp] = getattr(handle, question)()
        for host, keys in by_host.items():
            host_answers = HostAnswers(getattr(host, batched).remote(question, keys))
            answers.update({tp: HostAnswer(host_answers, index) for index, tp in enumerate(keys)})
        return answers

    def stop(self, tp: TopicPartition, handle: PartitionHandle) -> None:
        """Kills the partition's actor for good, or drops it from its host (closing its log there)."""
        assert isinstance(handle, RayPartition), handle
        if not isinstance(handle.actor, HostedPartitionHandle):
            kill_and_wait(handle.actor, partition_actor_name(*tp, self.node_id))
            return
        assert self._placement is not None, "a hosted partition without hosts"
        with self._lock:
            for host in self._placement.remove(tp):
                call(host.handle.remove_partition.remote(*tp), timeout_s=READY_TIMEOUT_SECONDS)

    # --- partition hosts ---------------------------------------------------------------------------

    def _running_hosts(self) -> list[PlacedHost[Any]]:
        """The partition hosts still running from before this log manager (re)started, numbered from 0."""
        hosts: list[PlacedHost[Any]] = []
        while True:
            name = partition_host_name(self.node_id, len(hosts))
            try:
                handle = get_actor(name)
            except BrokerNotAvailableError:
                return hosts
            try:
                held = call(handle.partitions.remote(), timeout_s=READY_TIMEOUT_SECONDS)
            except Exception as exc:
                logger.error("partition host %s did not answer: %s", name, exc)
                held = []
            hosts.append(PlacedHost(name, handle, {(t, p): "" for t, p in held}))

    def _start_host(self, index: int) -> PlacedHost[Any]:
        """Asks Ray for partition host `index`, holding nothing; returns at once, while its process starts."""
        name = partition_host_name(self.node_id, index)
        handle = PartitionHost.options(**partition_host_options(self.node_id, index)).remote(
            name,
            self._cleaner_config,
            HostResumeAfterRestart(self.node_id, name),
            producer_id_expiration_ms=self._producer_id_expiration_ms,
            replica_settings=self._replica_settings,
            find_replica=replica_actor,
        )
        return PlacedHost(name, handle, {})

    def _hosts(self) -> list[PlacedHost[Any]]:
        return [] if self._placement is None else self._placement.hosts

    def start_spares(self) -> int:
        """Starts hosts until `log.partitions.spare.processes` of them hold no partition (none without hosts);
        returns how many it started."""
        if self._placement is None:
            return 0
        with self._lock:
            return len(self._placement.start_spares())

    def drop_unopened(self) -> None:
        """After the log manager's startup: partitions a running host still holds whose folder is no longer on
        disk (deleted while the log manager was down) are dropped from it."""
        for host in self._hosts():
            for tp in [tp for tp, folder in host.partitions.items() if not folder]:
                logger.warning("partition host %s drops %s-%d: its folder is gone", host.name, tp[0], tp[1])
                self.stop(tp, RayPartition(HostedPartitionHandle(host.handle, *tp)))

    def hosted_partitions(self, name: str, config_for: Callable[[str], LogConfig]) -> list[HostedPartitionSpec]:
        """What the restarted host `name` reopens: its partitions with their topics' current settings. Reads a
        copy of the placement without the lock: a caller holding it may be waiting on that very host."""
        host = None if self._placement is None else self._placement.named(name)
        if host is None:
            return []
        held = dict(host.partitions)
        return [
            HostedPartitionSpec(t, p, folder, config_for(t).to_properties()) for (t, p), folder in sorted(held.items())
        ]

    def moved(self, tp: TopicPartition, folder: Path) -> None:
        """`tp` lives in `folder` now (moved to another log dir): what its host reopens after a restart. A partition
        actor asks the log manager where its folder is when Ray restarts it (`ResumeAfterRestart`)."""
        host = None if self._placement is None else self._placement.holding(tp)
        if host is not None:
            with self._lock:
                host.partitions[tp] = str(folder)

    def host_of(self, tp: TopicPartition) -> Any | None:
        """The actor handle of the host holding `tp`, None if no host here holds it."""
        host = None if self._placement is None else self._placement.holding(tp)
        return None if host is None else host.handle

    def reopen_lost_partitions(self, config_for: Callable[[str], LogConfig]) -> int:
        """Reopens, from disk, partitions a host should hold but does not (it restarted while the log manager
        could not tell it which it held); returns how many. Only partitions whose opening had answered before the host
        was asked count: one still opening is not held yet, and is not lost. A no-op without hosts."""
        reopened = 0
        for host in self._hosts():
            with self._lock:
                open_before = {tp for tp in host.partitions if tp not in self._opening}
            held = {(t, p) for t, p in call(host.handle.partitions.remote(), timeout_s=READY_TIMEOUT_SECONDS)}
            with self._lock:
                lost = [
                    (tp, folder)
                    for tp, folder in host.partitions.items()
                    if tp in open_before and tp not in held and folder
                ]
                for (topic, partition), folder in lost:
                    logger.warning("partition host %s lost %s-%d: reopening it", host.name, topic, partition)
                    opened = host.handle.open_partition.remote(
                        topic, partition, folder, config_for(topic).to_properties(), *checkpointed_offsets(Path(folder))
                    )
                    call(opened, timeout_s=READY_TIMEOUT_SECONDS)
                    reopened += 1
        return reopened

    def shutdown(self) -> None:
        """Kills every partition host (after the log manager's shutdown closed their partitions)."""
        if self._placement is None:
            return
        with self._lock:
            hosts = self._placement.take_all()
        for host in hosts:
            kill_and_wait(host.handle, host.name)

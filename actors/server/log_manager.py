"""The log-manager actor: one per Ray node, i.e. one broker, owning that node's `log.dirs`.

State it owns, and where it is persisted:

- the log dirs themselves (lock, `meta.properties`, `.kafka_cleanshutdown`, the four checkpoint
  files), through `storage.logdir.log_dirs.LogDirs` — see that module for the formats;
- which partition lives in which dir: the `<topic>-<partition>` folders on disk (found again at start);
- one partition actor per folder (`actors.server.partition_log`), pinned to this node; or, with
  `log.partitions.per.process` N > 1, partition hosts (`actors.server.partition_host`) named
  `partition-host:<node>:<index>`, each holding up to N partition logs: a new partition goes to the
  lowest-numbered host with room, a new host starts when all are full, and a host emptied by deletes
  keeps running for the next partitions.

It keeps no state of its own beyond what is on disk: after a restart (Ray restarts it if it dies) it
rediscovers the folders, and the partition actors, which are named and detached, are found again
(`get_if_exists`) rather than duplicated. A partition actor restarted by Ray resumes (`ResumeAfterRestart`)
with its topic's current settings from the controller and its offsets from the log dir's checkpoints, since
Ray hands it the arguments of its first start. A partition host restarted by Ray asks `hosted_partitions`
(answered on a thread of its own and without the manager's lock, which callers waiting on that very host may
hold) which partitions it held and reopens them from disk; a log manager restarted by Ray finds its hosts by
name and asks each which partitions it holds before it opens the folders on disk; and a scheduled pass
(`reopen_lost_partitions`) reopens any partition a host should hold but does not. Deleting a partition
rewrites the checkpoints at once (as Kafka's async delete does), so a topic created again under the same name
never inherits them. Every call is idempotent: creating an existing partition returns it, deleting a missing
one does nothing, a scheduled pass may run any number of times. A new partition whose log fails to open with
an I/O error (`KafkaStorageError`) takes its dir offline and is tried in the next dir; any other failure is
raised to the caller and leaves every dir online.

Scheduled work (Kafka's intervals, from the broker config), run by one background thread:
retention (`log.retention.check.interval.ms`) and delayed deletes, the recovery-point / log-start /
high-watermark checkpoints (`log.flush.offset.checkpoint.interval.ms`,
`log.flush.start.offset.checkpoint.interval.ms`, `replica.high.watermark.checkpoint.interval.ms`),
time-based flushes, and compaction (`log.cleaner.backoff.ms`): the filthiest compacted partitions,
at most `log.cleaner.threads` at once, are cleaned by their own actors, because a log's segments can
only be rewritten by the process that owns them. A partition whose cleaning fails is retried after
a growing backoff while the others go on.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from actors.calls import HostedPartitionHandle, call, controller, get_actor, kill_and_wait
from actors.options import (
    HOSTS_GROUP,
    log_manager_name,
    partition_actor_name,
    partition_host_name,
    partition_host_options,
    partition_options,
)
from actors.server.partition_host import HostedPartitionSpec
from actors.server.partition_log import CleanableRange, PartitionState, ResumePoint
from storage import file_names
from storage.clock import SYSTEM_CLOCK
from storage.compaction.cleaner_manager import failure_backoff_ms
from storage.config.broker_config import BrokerConfig
from storage.config.log_config import LogConfig
from storage.errors import BrokerNotAvailableError, KafkaStorageError, RaybrokerError
from storage.logdir.log_dirs import LogDirs, TopicPartition, checkpointed_offsets

logger = logging.getLogger(__name__)

# How often the scheduler thread wakes to see which task is due: short enough for tests that set
# intervals of a few hundred ms, long enough to cost nothing when idle.
TICK_SECONDS = 0.1
# How long a partition actor may take to open its log: recovery after a crash reads (and CRC-checks)
# every batch above the recovery point, minutes for gigabytes of unflushed log.
READY_TIMEOUT_SECONDS = 600
# How long taking a dir offline waits for its partitions to close their files: a partition busy with a long
# append answers after it; one that does not (its process hung on the failed disk) must not stall the broker.
OFFLINE_TIMEOUT_SECONDS = 30
# A restarted partition actor waits this long for the controller (itself restarting takes a few seconds)
# before it opens its log with the settings of its first start.
CONFIG_TIMEOUT_SECONDS = 30


@dataclass(frozen=True, slots=True)
class PartitionPlacement:
    """Where a partition lives on this node."""

    topic: str
    partition: int
    directory: str


@dataclass(frozen=True, slots=True)
class ResumeAfterRestart:
    """A partition actor's `resume`: None on a first start (its arguments are current); after a Ray restart,
    the topic's settings from the controller over the broker's defaults (the first start's are kept, with a
    warning, if the controller cannot answer) and the offsets checkpointed in the folder's log dir."""

    topic: str
    folder: str
    broker_log_config: dict[str, str]

    def __call__(self) -> ResumePoint | None:
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            return None
        config = None
        try:
            topic = call(controller().describe_topic.remote(self.topic), timeout_s=CONFIG_TIMEOUT_SECONDS)
            config = LogConfig.from_properties(topic.config, base=LogConfig.from_properties(self.broker_log_config))
        except RaybrokerError as exc:
            logger.warning("restarted partition of %s keeps the settings of its first start: %s", self.topic, exc)
        recovery_point, log_start_offset = checkpointed_offsets(Path(self.folder))
        return ResumePoint(None if config is None else config.to_properties(), recovery_point, log_start_offset)


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


@dataclass(slots=True)
class _Host:
    """A partition host this manager started: its handle and its partitions' folders."""

    name: str
    handle: Any
    partitions: dict[TopicPartition, str]


class LogManagerActor:
    """One node's broker; see the module docstring."""

    def __init__(
        self,
        node_id: str,
        broker_config: dict[str, str],
        topic_configs: dict[str, dict[str, str]],
        cluster_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = BrokerConfig.from_properties(broker_config)
        self._broker_config_properties = dict(broker_config)
        self._topic_configs = {topic: dict(config) for topic, config in topic_configs.items()}
        self._dirs = LogDirs(
            self.config.log_dirs,
            clock=SYSTEM_CLOCK,
            cluster_id=cluster_id,
            node_id=self.config.node_id,
            file_delete_delay_ms=self.config.log_segment_delete_delay_ms,
            on_offline=self._close_partitions_of_offline_dir,
        )
        self._lock = threading.RLock()
        self._partitions: dict[TopicPartition, tuple[Path, Any]] = {}
        self._cleaner_offsets: dict[TopicPartition, int] = {}
        self._cleaner_failures: dict[TopicPartition, tuple[int, int]] = {}
        self._stopping = threading.Event()
        self._hosts: list[_Host] = self._running_hosts() if self.config.log_partitions_per_process > 1 else []
        loaded = self._dirs.startup()
        for found in loaded:
            self._cleaner_offsets.update(found.cleaner_offsets)
            self._open_dir(found.path, found.partitions, found.recovery_points, found.log_start_offsets)
        self._drop_vanished_hosted_partitions()
        self._scheduler = threading.Thread(target=self._run_scheduler, name="log-manager-scheduler", daemon=True)
        self._scheduler.start()

    # --- partitions ------------------------------------------------------------------------------

    def _log_config(self, topic: str) -> dict[str, str]:
        base = self.config.log_config
        overrides = self._topic_configs.get(topic, {})
        return LogConfig.from_properties(overrides, base=base).to_properties()

    def _start_partition(
        self, topic: str, partition: int, folder: Path, recovery_point: int = 0, log_start_offset: int = 0
    ) -> tuple[Any, Any]:
        """The partition's handle (its own actor, or its place in a partition host) and the `ObjectRef` that
        answers once its log is open (and recovered), or raises why it did not open."""
        if self.config.log_partitions_per_process > 1:
            host = self._host_for((topic, partition), folder)
            opened = host.handle.open_partition.remote(
                topic, partition, str(folder), self._log_config(topic), recovery_point, log_start_offset
            )
            return HostedPartitionHandle(host.handle, topic, partition), opened
        from actors.server.remote import PartitionLog

        handle = PartitionLog.options(**partition_options(topic, partition, self.node_id)).remote(
            str(folder),
            self._log_config(topic),
            recovery_point,
            log_start_offset,
            self.config.cleaner_config.to_properties(),
            ResumeAfterRestart(topic, str(folder), self.config.log_config.to_properties()),
        )
        return handle, handle.ready.remote()

    def _running_hosts(self) -> list[_Host]:
        """The partition hosts still running from before this manager (re)started, numbered from 0."""
        hosts: list[_Host] = []
        while True:
            name = partition_host_name(self.node_id, len(hosts))
            try:
                handle = get_actor(name)
            except BrokerNotAvailableError:
                return hosts
            try:
                held = ray.get(handle.partitions.remote(), timeout=READY_TIMEOUT_SECONDS)
            except Exception as exc:
                logger.error("partition host %s did not answer: %s", name, exc)
                held = []
            hosts.append(_Host(name, handle, {tuple(tp): "" for tp in held}))

    def _host_for(self, tp: TopicPartition, folder: Path) -> _Host:
        """The host holding `tp`, else the first with room, else a new one. Called with the lock held (or
        from `__init__`)."""
        limit = self.config.log_partitions_per_process
        host = next((h for h in self._hosts if tp in h.partitions), None)
        if host is None:
            host = next((h for h in self._hosts if len(h.partitions) < limit), None)
        if host is None:
            from actors.server.remote import PartitionHost

            name = partition_host_name(self.node_id, len(self._hosts))
            handle = PartitionHost.options(**partition_host_options(self.node_id, len(self._hosts))).remote(
                name, self.config.cleaner_config.to_properties(), HostResumeAfterRestart(self.node_id, name)
            )
            host = _Host(name, handle, {})
            self._hosts.append(host)
        host.partitions[tp] = str(folder)
        return host

    def _drop_vanished_hosted_partitions(self) -> None:
        """After a restart: partitions a running host still holds whose folder is no longer on disk (deleted
        while this manager was down) are dropped from it."""
        for host in self._hosts:
            for tp in [tp for tp, folder in host.partitions.items() if not folder]:
                logger.warning("partition host %s drops %s-%d: its folder is gone", host.name, tp[0], tp[1])
                self._stop_partition(tp, HostedPartitionHandle(host.handle, *tp))

    def _stop_partition(self, tp: TopicPartition, handle: Any) -> None:
        """Stops a partition for good: kills its actor, or drops it from its host (closing its log)."""
        if not isinstance(handle, HostedPartitionHandle):
            kill_and_wait(handle, partition_actor_name(*tp))
            return
        for host in self._hosts:
            if host.partitions.pop(tp, None) is not None:
                ray.get(host.handle.remove_partition.remote(*tp), timeout=READY_TIMEOUT_SECONDS)

    @ray.method(concurrency_group=HOSTS_GROUP)
    def hosted_partitions(self, name: str) -> list[HostedPartitionSpec]:
        """What a restarted host reopens: its partitions with their topics' current settings. Reads a copy
        of the placement without the lock (see the module docstring)."""
        for host in list(self._hosts):
            if host.name == name:
                held = dict(host.partitions)
                return [
                    HostedPartitionSpec(t, p, folder, self._log_config(t)) for (t, p), folder in sorted(held.items())
                ]
        return []

    def partition_host(self, topic: str, partition: int) -> Any | None:
        """The actor handle of the host holding (topic, partition), None if no host here holds it."""
        entry = self._partitions.get((topic, partition))
        if entry is None or not isinstance(entry[1], HostedPartitionHandle):
            return None
        return entry[1].host

    def _open_dir(
        self,
        directory: Path,
        partitions: dict[TopicPartition, Path],
        recovery_points: dict[TopicPartition, int],
        log_starts: dict[TopicPartition, int],
    ) -> None:
        """Starts the actors of every partition in `directory`, at most `num.recovery.threads.per.data.dir`
        recovering at once (each actor recovers its own log in its `__init__`)."""
        batch = max(1, self.config.num_recovery_threads_per_data_dir)
        items = sorted(partitions.items())
        for start in range(0, len(items), batch):
            started = []
            for tp, folder in items[start : start + batch]:
                handle, ready = self._start_partition(
                    tp[0], tp[1], folder, recovery_points.get(tp, 0), log_starts.get(tp, 0)
                )
                started.append((tp, handle, ready))
            for tp, handle, ready in started:
                try:
                    ray.get(ready, timeout=READY_TIMEOUT_SECONDS)
                except Exception as exc:
                    logger.error("partition %s-%d in %s failed to load: %s", tp[0], tp[1], directory, exc)
                    self._dirs.mark_load_failed(directory)
                self._partitions[tp] = (directory, handle)

    def create_partition(self, topic: str, partition: int, config: dict[str, str] | None = None) -> PartitionPlacement:
        """The partition's placement, creating its folder (in the live dir with the fewest partitions)
        and actor if missing."""
        with self._lock:
            if config is not None:
                self._topic_configs[topic] = dict(config)
            existing = self._partitions.get((topic, partition))
            if existing is not None:
                self._check_online(existing[0], topic, partition)
                return PartitionPlacement(topic, partition, str(existing[0]))
            folder_name = file_names.partition_dir_name(topic, partition)
            errors = []
            for directory in self._dirs.placement_order(self._counts()):
                handle, ready = self._start_partition(topic, partition, directory / folder_name)
                try:
                    ray.get(ready, timeout=READY_TIMEOUT_SECONDS)
                except Exception as exc:
                    self._discard(handle, (topic, partition))
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, KafkaStorageError):
                        errors.append(f"{directory}: {cause}")
                        self._dirs.take_offline(directory, cause)
                        continue
                    if isinstance(cause, RaybrokerError):
                        raise cause from None
                    raise BrokerNotAvailableError(f"the actor of {folder_name} did not start: {exc}") from None
                self._partitions[(topic, partition)] = (directory, handle)
                return PartitionPlacement(topic, partition, str(directory))
            raise KafkaStorageError(f"cannot create {folder_name} in any live log dir ({'; '.join(errors)})")

    def _discard(self, handle: Any, tp: TopicPartition) -> None:
        """Drops a partition whose log did not open (its folder may be tried in another dir)."""
        if isinstance(handle, HostedPartitionHandle):
            self._stop_partition(tp, handle)
        else:
            ray.kill(handle, no_restart=True)

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Kafka-style async delete: the actor stops, the folder becomes `...-delete`, removed later."""
        with self._lock:
            entry = self._partitions.pop((topic, partition), None)
            if entry is None:
                return False
            directory, handle = entry
            try:
                ray.get(handle.close.remote())
            finally:
                self._stop_partition((topic, partition), handle)
            folder = directory / file_names.partition_dir_name(topic, partition)
            self._dirs.schedule_folder_delete(folder, topic, partition)
            self._cleaner_offsets.pop((topic, partition), None)
            self.checkpoint()
            return True

    def set_topic_config(self, topic: str, config: dict[str, str]) -> int:
        """New topic settings for this node's partitions of `topic`; returns how many were updated."""
        with self._lock:
            self._topic_configs[topic] = dict(config)
            handles = [handle for (t, _), (_, handle) in self._partitions.items() if t == topic]
        ray.get([handle.update_config.remote(self._log_config(topic)) for handle in handles])
        return len(handles)

    def partitions(self) -> list[PartitionPlacement]:
        with self._lock:
            return [PartitionPlacement(t, p, str(d)) for (t, p), (d, _) in sorted(self._partitions.items())]

    def partition_count(self) -> int:
        return len(self._partitions)

    def describe(self, topic: str | None = None) -> list[tuple[PartitionPlacement, PartitionState | None]]:
        """Placement and live state of this node's partitions (of `topic`, or all)."""
        with self._lock:
            items = [(tp, entry) for tp, entry in sorted(self._partitions.items()) if topic in (None, tp[0])]
        refs = [handle.state.remote() for _, (_, handle) in items]
        result = []
        for (tp, (directory, _)), ref in zip(items, refs, strict=True):
            try:
                state = ray.get(ref)
            except Exception:
                state = None
            result.append((PartitionPlacement(tp[0], tp[1], str(directory)), state))
        return result

    def dirs(self) -> dict[str, str | None]:
        """Each log dir and why it is offline (None when online)."""
        offline = self._dirs.offline_dirs
        return {str(d): offline.get(d) for d in self._dirs.log_dirs}

    def cluster_id(self) -> str:
        return self._dirs.cluster_id

    def _counts(self) -> dict[Path, int]:
        counts: dict[Path, int] = {}
        for directory, _ in self._partitions.values():
            counts[directory] = counts.get(directory, 0) + 1
        return counts

    def log_dir_failed(self, directory: str, reason: str) -> bool:
        """A partition's I/O error in `directory` (Kafka's LogDirFailureChannel): the dir goes offline; False if
        it already was, or is not one of this broker's dirs."""
        path = Path(directory)
        if path not in self._dirs.log_dirs:
            return False
        return self._dirs.take_offline(path, reason)

    def _close_partitions_of_offline_dir(self, directory: Path) -> None:
        """`LogDirs`' `on_offline`: every partition of the dir stops serving, its files closed without a flush."""
        reason = self._dirs.offline_dirs.get(directory, "I/O error")
        with self._lock:
            handles = [handle for d, handle in self._partitions.values() if d == directory]
        refs = [handle.go_offline.remote(reason) for handle in handles]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=OFFLINE_TIMEOUT_SECONDS)

    def _check_online(self, directory: Path, topic: str, partition: int) -> None:
        reason = self._dirs.offline_dirs.get(directory)
        if reason is not None:
            raise KafkaStorageError(f"partition {topic}-{partition} is offline: {reason}", path=directory)

    # --- scheduled work --------------------------------------------------------------------------

    def _run_scheduler(self) -> None:
        config = self.config
        tasks = [
            (config.log_retention_check_interval_ms, self.run_retention),
            (config.log_flush_offset_checkpoint_interval_ms, self.checkpoint_recovery_points),
            (config.log_flush_start_offset_checkpoint_interval_ms, self.checkpoint_log_start_offsets),
            (config.replica_high_watermark_checkpoint_interval_ms, self.checkpoint_high_watermarks),
            (config.log_flush_scheduler_interval_ms, self.flush_due),
            (config.log_cleaner_backoff_ms, self.run_cleaner),
            (config.replica_high_watermark_checkpoint_interval_ms, self.reopen_lost_partitions),
        ]
        now = SYSTEM_CLOCK.milliseconds()
        due = [now + config.log_initial_task_delay_ms for _ in tasks]
        while not self._stopping.wait(TICK_SECONDS):
            now = SYSTEM_CLOCK.milliseconds()
            for index, (interval, task) in enumerate(tasks):
                if now < due[index]:
                    continue
                due[index] = now + interval
                try:
                    task()
                except Exception as exc:
                    logger.exception("scheduled %s failed: %s", task.__name__, exc)

    def _each_partition(self, method: str, *args: Any) -> dict[TopicPartition, Any]:
        """Calls `method` on every online partition actor at once; failures are logged, not raised."""
        with self._lock:
            items = [(tp, d, h) for tp, (d, h) in self._partitions.items() if self._dirs.is_online(d)]
        refs = [getattr(handle, method).remote(*args) for _, _, handle in items]
        results = {}
        for (tp, directory, _), ref in zip(items, refs, strict=True):
            try:
                results[tp] = ray.get(ref)
            except Exception as exc:
                cause = getattr(exc, "cause", exc)
                if isinstance(cause, KafkaStorageError):
                    self._dirs.take_offline(directory, cause)
                logger.warning("%s of %s-%d failed: %s", method, tp[0], tp[1], cause)
        return results

    def reopen_lost_partitions(self) -> int:
        """Reopens, from disk, partitions a host should hold but does not (it restarted while this manager could
        not tell it which it held); returns how many. A no-op without hosts."""
        with self._lock:
            hosts = list(self._hosts)
        reopened = 0
        for host in hosts:
            held = {tuple(tp) for tp in ray.get(host.handle.partitions.remote(), timeout=READY_TIMEOUT_SECONDS)}
            with self._lock:
                lost = [(tp, f) for tp, f in host.partitions.items() if tp not in held and tp in self._partitions]
                for (topic, partition), folder in lost:
                    logger.warning("partition host %s lost %s-%d: reopening it", host.name, topic, partition)
                    recovery_point, log_start_offset = checkpointed_offsets(Path(folder))
                    opened = host.handle.open_partition.remote(
                        topic, partition, folder, self._log_config(topic), recovery_point, log_start_offset
                    )
                    ray.get(opened, timeout=READY_TIMEOUT_SECONDS)
                    reopened += 1
        return reopened

    def run_retention(self) -> int:
        """One retention pass on every partition, then delayed deletes; returns segments deleted."""
        deleted = sum(self._each_partition("delete_old_segments").values())
        self._each_partition("delete_due_files")
        self._dirs.delete_due_folders()
        return deleted

    def flush_due(self) -> int:
        return sum(self._each_partition("flush_if_due").values())

    def checkpoint_recovery_points(self) -> None:
        self.checkpoint([file_names.RECOVERY_POINT_CHECKPOINT, file_names.CLEANER_OFFSET_CHECKPOINT])

    def checkpoint_log_start_offsets(self) -> None:
        self.checkpoint([file_names.LOG_START_OFFSET_CHECKPOINT])

    def checkpoint_high_watermarks(self) -> None:
        self.checkpoint([file_names.REPLICATION_OFFSET_CHECKPOINT])

    def checkpoint(
        self, names: list[str] | None = None, states: dict[TopicPartition, PartitionState] | None = None
    ) -> None:
        """Writes checkpoint files (`names`, default all four) of every online dir from partition states."""
        states = self._each_partition("state") if states is None else states
        values = {
            file_names.RECOVERY_POINT_CHECKPOINT: {tp: s.recovery_point for tp, s in states.items()},
            file_names.LOG_START_OFFSET_CHECKPOINT: {
                tp: s.log_start_offset for tp, s in states.items() if s.log_start_offset > s.first_segment_base
            },
            file_names.REPLICATION_OFFSET_CHECKPOINT: {tp: s.high_watermark for tp, s in states.items()},
        }
        # Under the lock from reading the placement to the last write: the scheduler and a delete both write
        # (they would share `<name>.tmp`), and a partition deleted meanwhile must not be written back.
        with self._lock:
            placement = {tp: directory for tp, (directory, _) in self._partitions.items()}
            values[file_names.CLEANER_OFFSET_CHECKPOINT] = dict(self._cleaner_offsets)
            for directory in self._dirs.online_dirs:
                for name in names or list(values):
                    here = {tp: offset for tp, offset in values[name].items() if placement.get(tp) == directory}
                    self._dirs.write_checkpoint(directory, name, here)

    def run_cleaner(self) -> int:
        """Cleans the filthiest eligible compacted partitions, `log.cleaner.threads` at a time."""
        if not self.config.log_cleaner_enable or self.config.log_cleaner_threads == 0:
            return 0
        now = SYSTEM_CLOCK.milliseconds()
        with self._lock:
            compacted = {
                tp: (d, h)
                for tp, (d, h) in self._partitions.items()
                if self._dirs.is_online(d) and now >= self._cleaner_failures.get(tp, (0, 0))[1]
            }
            offsets = {tp: self._cleaner_offsets.get(tp) for tp in compacted}
        refs = {tp: handle.cleanable.remote(offsets[tp]) for tp, (_, handle) in compacted.items()}
        ranges: list[tuple[TopicPartition, CleanableRange]] = []
        for tp, ref in refs.items():
            try:
                found = ray.get(ref)
            except Exception as exc:
                self._cleaning_failed(tp, exc, now)
                continue
            if found is not None:
                ranges.append((tp, found))
        ranges.sort(key=lambda item: -item[1].dirty_ratio)
        chosen = ranges[: self.config.log_cleaner_threads]
        runs = [
            (tp, compacted[tp][1].clean.remote(r.first_dirty_offset, r.first_uncleanable_offset)) for tp, r in chosen
        ]
        cleaned = 0
        for tp, ref in runs:
            try:
                result = ray.get(ref)
            except Exception as exc:
                self._cleaning_failed(tp, exc, now)
                continue
            if not result.aborted:
                with self._lock:
                    self._cleaner_offsets[tp] = result.end_offset
                    self._cleaner_failures.pop(tp, None)
                cleaned += 1
        return cleaned

    def _cleaning_failed(self, tp: TopicPartition, error: BaseException, now_ms: int) -> None:
        with self._lock:
            failures = self._cleaner_failures.get(tp, (0, 0))[0] + 1
            backoff = failure_backoff_ms(self.config.log_cleaner_backoff_ms, failures)
            self._cleaner_failures[tp] = (failures, now_ms + backoff)
        logger.error("cleaning %s-%d failed (%d in a row), retry in %d ms: %s", tp[0], tp[1], failures, backoff, error)

    def uncleanable(self) -> dict[str, int]:
        """Partitions whose last cleaning failed, with the number of failures in a row."""
        with self._lock:
            return {f"{t}-{p}": failures for (t, p), (failures, _) in self._cleaner_failures.items()}

    # --- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> dict[str, int]:
        """Clean shutdown: every partition closes (flush, trim, markers), then the checkpoints and the
        log dirs' clean-shutdown markers are written and the locks released. Returns end offsets."""
        self._stopping.set()
        self._scheduler.join(timeout=30)
        with self._lock:
            items = list(self._partitions.items())
            refs = [(tp, handle.close.remote()) for tp, (_, handle) in items]
            states: dict[TopicPartition, PartitionState] = {}
            for tp, ref in refs:
                try:
                    states[tp] = ray.get(ref)
                except Exception as exc:
                    directory = self._partitions[tp][0]
                    logger.error("closing %s-%d failed: %s", tp[0], tp[1], exc)
                    self._dirs.mark_load_failed(directory)
            self.checkpoint(states=states)
            self._dirs.write_clean_shutdown_markers(self._dirs.online_dirs)
            self._dirs.release_all()
            for (topic, partition), (_, handle) in items:
                if not isinstance(handle, HostedPartitionHandle):
                    kill_and_wait(handle, partition_actor_name(topic, partition))
            for host in self._hosts:
                kill_and_wait(host.handle, host.name)
            self._hosts.clear()
            self._partitions.clear()
            return {f"{t}-{p}": state.log_end_offset for (t, p), state in states.items()}

    def ping(self) -> str:
        return self.node_id

"""The log-manager actor: one per Ray node, i.e. one broker, owning that node's `log.dirs`.

All its logic is the plain `storage.logdir.log_manager.LogManager` (placement by fewest partitions, offline
dirs, checkpoints, scheduled retention, flushes and cleaning, clean shutdown), unit-tested without Ray; see
that module for the guarantees and `storage.logdir.log_dirs` for the files. This actor gives it its Ray
collaborators and its remote API:

- `actors.server.ray_partitions.RayPartitions`: partition hosts of `log.partitions.per.process` partitions
  each, with `log.partitions.spare.processes` empty ones started ahead once the manager has started, or one
  partition actor per partition with `log.partitions.per.process` = 1 (that module says how they are found
  again after a restart);
- `actors.server.cleaner_actor.RayCleanerThreads`: the node's `log.cleaner.threads` cleaner actors, which run the heavy
  phase of each compaction pass outside the partitions' processes;
- the wall clock, and a thread that drives the manager's `storage.logdir.scheduler.Scheduler` every
  `TICK_SECONDS`, plus the Ray-only pass that reopens partitions a restarted host lost
  (`replica.high.watermark.checkpoint.interval.ms`);
- a thread that sends the controller this broker's heartbeat every `broker.heartbeat.interval.ms`: a broker
  silent for `broker.session.timeout.ms` is fenced (`actors.core.controller.controller`).

It keeps no state of its own beyond what is on disk: after a restart (Ray restarts it if it dies) the
manager rediscovers the folders, and the partition actors and hosts, which are named and detached, are found
again rather than duplicated. At each start it asks the controller which topics the cluster has: a folder of
any other topic was deleted while this node was down, and is set aside as `-stray` and deleted, not loaded.
Every call is idempotent. Topic configs and the cluster id are asked of the controller at each start too; topic
configs are Kafka's override properties and apply over the broker's `log.*` defaults.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from actors import heap_trim
from actors.calls import call, controller
from actors.core.quotas.replication_quotas import FOLLOWER, LEADER, SIDES, ReplicationQuotas, ReplicationThrottles
from actors.metrics.gauges import uncleanable_samples
from actors.metrics.names import FOLLOWER_REPLICATION_BYTE_RATE, LEADER_REPLICATION_BYTE_RATE
from actors.metrics.ray_export import exported_metrics
from actors.metrics.recorder import Sample
from actors.options import HOSTS_GROUP, QUOTAS_GROUP
from actors.server.cleaner_actor import RayCleanerThreads
from actors.server.partition_host import HostedPartitionSpec
from actors.server.ray_partitions import RayPartitions
from storage import file_names
from storage.arguments import is_int
from storage.clock import SYSTEM_CLOCK
from storage.config.broker_config import BrokerConfig
from storage.config.log_config import LogConfig
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError
from storage.logdir.log_manager import LogManager, PartitionPlacement
from storage.logdir.metadata_mirror import MirrorState
from storage.logdir.partition_handles import PartitionState
from storage.logdir.scheduler import Scheduler
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

# How often the scheduler thread wakes to see which task is due: short enough for tests that set
# intervals of a few hundred ms, long enough to cost nothing when idle.
TICK_SECONDS = 0.1
# How long shutdown waits for a scheduled pass in progress to end before it closes the partitions.
SCHEDULER_STOP_TIMEOUT_SECONDS = 30
# How old the controller's replication throttles may be when a replica asks the quotas: a throttle set by
# `kafka-reassign-partitions.sh --throttle` takes effect within this.
THROTTLES_MAX_AGE_S = 0.5
# How long startup waits for the controller's topic list; without it, no folder is taken for stray.
TOPICS_TIMEOUT_SECONDS = 60


class LogManagerActor:
    """One node's broker: the plain `LogManager` over Ray partitions; see the module docstring."""

    def __init__(
        self,
        node_id: str,
        broker_config: dict[str, str],
    ) -> None:
        heap_trim.start()
        self.node_id = node_id
        self.config = BrokerConfig.from_properties(broker_config)
        cluster_id, topic_configs = _cluster_metadata()
        self._partitions = RayPartitions(node_id, self.config)
        self._cleaners = RayCleanerThreads(node_id, self.config)
        self._manager = LogManager.from_broker_config(
            self.config,
            topic_configs={topic: self._topic_config(config) for topic, config in topic_configs.items()},
            clock=SYSTEM_CLOCK,
            cluster_id=cluster_id,
            partitions=self._partitions,
            cleaner_threads=self._cleaners.threads,
            on_replica_moved=self._replica_moved,
        )
        self._manager.startup(is_stray=_stray_partitions())
        self._partitions.drop_unopened()
        self._partitions.start_spares()
        self._scheduler = Scheduler(SYSTEM_CLOCK)
        self._manager.schedule(self._scheduler, self.config)
        self._scheduler.schedule(
            "reopen-lost-partitions",
            lambda: self._partitions.reopen_lost_partitions(self._manager.config_for),
            self.config.log_initial_task_delay_ms,
            self.config.replica_high_watermark_checkpoint_interval_ms,
        )
        self._stopping = threading.Event()
        self._scheduler_thread = threading.Thread(target=self._run_scheduler, name="log-manager-scheduler", daemon=True)
        self._scheduler_thread.start()
        # A thread of its own: a long scheduled pass (retention, a flush) must not delay a heartbeat into a fence.
        self._heartbeat_thread = threading.Thread(target=self._run_heartbeats, name="broker-heartbeat", daemon=True)
        self._heartbeat_thread.start()
        self._metrics = exported_metrics()
        self._metrics.add_gauges(self._uncleanable_gauges)
        self._replication_quotas = ReplicationQuotas(self.config, SYSTEM_CLOCK.milliseconds)
        self._throttles_read_at = float("-inf")
        self._metrics.add_gauges(self._replication_gauges)

    def _run_heartbeats(self) -> None:
        """The controller's `broker_heartbeat` every `broker.heartbeat.interval.ms` until shutdown; a heartbeat the
        controller does not answer within the interval is not waited for (the next one follows)."""
        interval_s = self.config.broker_heartbeat_interval_ms / 1000
        while not self._stopping.wait(interval_s):
            try:
                call(controller().broker_heartbeat.remote(self.node_id), timeout_s=interval_s)
            except RaybrokerError as exc:
                logger.debug("heartbeat not answered: %s", exc)

    def _topic_config(self, overrides: dict[str, str]) -> LogConfig:
        """A topic's override properties over the broker's `log.*` defaults."""
        return LogConfig.from_properties(overrides, base=self.config.log_config)

    def _run_scheduler(self) -> None:
        while not self._stopping.wait(TICK_SECONDS):
            self._scheduler.run_due()

    # --- replication quotas ----------------------------------------------------------------------

    @ray.method(concurrency_group=QUOTAS_GROUP)
    def replication_admit(self, side: str, topic: str, partition: int, recorded: int) -> float:
        """The node's replication quotas for one fetch of a throttled replica out of its ISR (`actors.core.quotas.
        replication_quotas.ReplicationQuotas.admit`), over the throttles as `replication_throttles` reads them."""
        if side not in SIDES or not isinstance(topic, str) or not is_int(partition) or not is_int(recorded):
            raise InvalidRequestError(f"not a replication quota question: {side!r} {topic!r} {partition!r}")
        self._read_throttles()
        return self._replication_quotas.admit(side, topic, partition, recorded)

    @ray.method(concurrency_group=QUOTAS_GROUP)
    def replication_throttles(self) -> ReplicationThrottles:
        """The controller's replication throttles of this node, read again when the last read is older than
        `THROTTLES_MAX_AGE_S` (kept as they were when it does not answer): what the node's partition processes
        check before asking `replication_admit`."""
        return self._read_throttles()

    def _read_throttles(self) -> ReplicationThrottles:
        now = time.monotonic()
        if now - self._throttles_read_at >= THROTTLES_MAX_AGE_S:
            try:
                throttles = call(
                    controller().replication_throttles.remote(self.node_id, self.config.node_id),
                    timeout_s=THROTTLES_MAX_AGE_S,
                )
            except RaybrokerError as exc:
                logger.debug("replication throttles not read: %s", exc)
            else:
                self._replication_quotas.update(throttles)
            self._throttles_read_at = now
        return self._replication_quotas.throttles

    # --- partitions ------------------------------------------------------------------------------

    def create_partition(
        self, topic: str, partition: int, config: dict[str, str] | None = None, topic_id: uuid.UUID | None = None
    ) -> PartitionPlacement:
        """The partition's placement, creating its folder (in the live dir with the fewest partitions) and
        actor if missing; `config`, when given, becomes the topic's overrides first, and `topic_id` is written to
        the folder's `partition.metadata`."""
        return self._manager.get_or_create_partition(
            topic, partition, None if config is None else self._topic_config(config), topic_id
        )

    def delete_partitions(self, topic: str, partitions: list[int]) -> list[int]:
        """Kafka-style async delete of this node's replicas of `partitions` (`LogManager.delete_logs`): each stops,
        its folder becomes `...-delete`, removed later; answers those the node had."""
        return self._manager.delete_logs(topic, partitions)

    def set_topic_config(self, topic: str, config: dict[str, str]) -> int:
        """New topic overrides for this node's partitions of `topic`; returns how many were updated."""
        return self._manager.set_topic_config(topic, self._topic_config(config))

    def partitions(self) -> list[PartitionPlacement]:
        return self._manager.placements()

    def partition_count(self) -> int:
        return len(self._manager.placements())

    def describe(self, topic: str | None = None) -> list[tuple[PartitionPlacement, PartitionState | None]]:
        """Placement and live state of this node's partitions (of `topic`, or all)."""
        return self._manager.describe(topic)

    def partition_host(self, topic: str, partition: int) -> Any | None:
        """The actor handle of the host holding (topic, partition), None if no host here holds it."""
        return self._partitions.host_of((topic, partition))

    def partition_hosts(self, keys: list[tuple[str, int]]) -> list[Any | None]:
        """`partition_host` of each (topic, partition), in order: one call for a client's first contact with many."""
        return [self._partitions.host_of(key) for key in keys]

    @ray.method(concurrency_group=HOSTS_GROUP)
    def partition_folder(self, topic: str, partition: int) -> str | None:
        """The folder of this node's partition (None if it has none), for its restarted actor, answered on a thread of
        its own and without the manager's lock, as `hosted_partitions`."""
        directory = self._manager.log_dir_of(topic, partition)
        return None if directory is None else str(directory / file_names.partition_dir_name(topic, partition))

    def alter_replica_log_dirs(self, dirs: dict[TopicPartition, str]) -> dict[TopicPartition, RaybrokerError | None]:
        """AlterReplicaLogDirs on this node (`LogManager.alter_replica_log_dirs`)."""
        if not isinstance(dirs, dict) or not all(
            isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and is_int(tp[1]) for tp in dirs
        ):
            raise InvalidRequestError("AlterReplicaLogDirs takes log dirs by (topic, partition)")
        return self._manager.alter_replica_log_dirs(dirs)

    def _replica_moved(self, placement: PartitionPlacement) -> None:
        """A partition moved to another log dir: its host reopens it there after a restart, and the controller records
        the replica's new dir (Kafka's AssignReplicasToDirs), so a disk moved to another node is recognized by it."""
        tp = (placement.topic, placement.partition)
        self._partitions.moved(tp, Path(placement.directory) / file_names.partition_dir_name(*tp))
        if placement.directory_id:
            call(
                controller().assign_replica_dir.remote(*tp, self.node_id, placement.directory_id),
                timeout_s=TOPICS_TIMEOUT_SECONDS,
            )

    @ray.method(concurrency_group=HOSTS_GROUP)
    def hosted_partitions(self, name: str) -> list[HostedPartitionSpec]:
        """What a restarted host reopens, answered on a thread of its own and without the manager's lock,
        which callers waiting on that very host may hold."""
        return self._partitions.hosted_partitions(name, self._manager.config_for)

    # --- log dirs and cleaning -------------------------------------------------------------------

    def dirs(self) -> dict[str, str | None]:
        """Each log dir and why it is offline (None when online)."""
        return self._manager.dirs()

    def cluster_id(self) -> str:
        return self._manager.cluster_id

    def log_dir_failed(self, directory: str, reason: str) -> bool:
        """A partition's I/O error in `directory`: the dir goes offline; False if it already was, or is not
        one of this broker's dirs."""
        return self._manager.log_dir_failed(Path(directory), reason)

    def _uncleanable_gauges(self) -> list[Sample]:
        dirs = [str(directory) for directory in self._manager.log_dirs]
        return uncleanable_samples(dirs, self._manager.placements(), self._manager.uncleanable())

    def _replication_gauges(self) -> list[Sample]:
        return [
            (LEADER_REPLICATION_BYTE_RATE, (), self._replication_quotas.rate(LEADER)),
            (FOLLOWER_REPLICATION_BYTE_RATE, (), self._replication_quotas.rate(FOLLOWER)),
        ]

    def uncleanable(self) -> dict[str, int]:
        """Partitions whose last cleaning failed, with the number of failures in a row."""
        return {f"{t}-{p}": failure.failures for (t, p), failure in self._manager.uncleanable().items()}

    # --- the metadata log's copy (`storage.logdir.metadata_mirror`), as the controller reaches it ---

    def metadata_state(self) -> MirrorState:
        return self._manager.metadata_mirror().state()

    def metadata_append(self, controller_epoch: int, offset: int, batches: bytes) -> MirrorState:
        return self._manager.metadata_mirror().append(controller_epoch, offset, batches)

    def metadata_truncate(self, controller_epoch: int, offset: int) -> MirrorState:
        return self._manager.metadata_mirror().truncate_to(controller_epoch, offset)

    def metadata_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._manager.metadata_mirror().end_offset_for_epoch(epoch)

    def metadata_read(self, offset: int, max_bytes: int) -> bytes:
        return self._manager.metadata_mirror().read(offset, max_bytes)

    # --- shutdown --------------------------------------------------------------------------------

    def shutdown(self) -> dict[str, int]:
        """Clean shutdown: the scheduler stops, every partition closes (flush, trim, markers), then the
        checkpoints and the log dirs' clean-shutdown markers are written, the locks released and the
        partition actors, hosts and cleaner actors stopped. Returns end offsets."""
        self._metrics.remove_gauges(self._uncleanable_gauges)
        self._metrics.remove_gauges(self._replication_gauges)
        self._stopping.set()
        self._scheduler_thread.join(timeout=SCHEDULER_STOP_TIMEOUT_SECONDS)
        # Before `stop_broker` unregisters this broker: a heartbeat after that would register it again.
        self._heartbeat_thread.join(timeout=SCHEDULER_STOP_TIMEOUT_SECONDS)
        states = self._manager.shutdown()
        self._partitions.shutdown()
        self._cleaners.shutdown()
        return {f"{t}-{p}": state.log_end_offset for (t, p), state in states.items()}

    def ping(self) -> str:
        return self.node_id


def _cluster_metadata() -> tuple[str, dict[str, dict[str, str]]]:
    """The cluster id and every topic's override properties, asked of the controller at every start, as
    `_stray_partitions` asks for the topics: Ray restarts this actor with its first arguments, which would not hold
    the topics created or altered since. The controller may still be starting (`start_broker` starts both at once,
    so their processes start side by side): the calls wait for it. A manager that cannot learn the topics' configs
    does not start; under the broker's `log.*` defaults it would delete records a topic's retention keeps."""
    ctrl = controller()
    try:
        cluster_id = call(ctrl.cluster_id.remote(), timeout_s=TOPICS_TIMEOUT_SECONDS)
        topic_configs = call(ctrl.topic_configs.remote(), timeout_s=TOPICS_TIMEOUT_SECONDS)
    except RaybrokerError as exc:
        raise BrokerNotAvailableError(f"the controller did not give the cluster's topic configs: {exc}") from exc
    return cluster_id, topic_configs


def _stray_partitions() -> Callable[[TopicPartition], bool] | None:
    """Kafka's `isStray` here: a partition whose topic the controller does not have. Asked at every start, not
    passed in: Ray restarts this actor with its first arguments, which would not list the topics created since.
    None (nothing is stray) when the controller does not answer: a folder is never deleted on a guess."""
    try:
        topics = frozenset(
            call(controller().list_topics.remote(include_internal=True), timeout_s=TOPICS_TIMEOUT_SECONDS)
        )
    except RaybrokerError as exc:
        if not exc.retriable:
            raise
        logger.warning("the controller did not list the topics (%s); no partition folder is taken for stray", exc)
        return None
    return lambda tp: tp[0] not in topics

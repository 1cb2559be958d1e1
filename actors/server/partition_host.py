"""The partition host: one actor process holding several partition logs (`log.partitions.per.process` > 1).

A partition actor costs a whole Python process (~129 MiB RSS, ~61 MiB of its own, ~1 s to start), so one
actor per partition caps a 24 GiB node near 400 partitions. A host runs one `PartitionLogActor` (the plain
class, not a Ray actor) per partition it holds, so a partition costs its open files and buffers only. Nothing
changes on disk: each partition keeps its own `<topic>-<partition>` folder, `.lock` and Kafka's files, and the
log dir's checkpoints stay the log manager's.

Clients hold an `actors.calls.HostedPartitionHandle`, whose `handle.append.remote(batch)` looks like a partition
actor's and becomes `host.write.remote(topic, partition, "append", batch)`: each public method of
`PartitionLogActor` goes to the host method of the concurrency group its `@ray.method` names
(`partition_method_group`), so a method added there is hosted too. The host keeps a partition actor's guarantees
with the same concurrency groups (`actors.options`):

- `write` (the default group, one thread, in call order) runs every write of every partition it holds, so a
  partition's appends are single-writer and applied in the order each caller sent them. The price: a slow
  write (an fsync with `flush.messages=1`, opening a big log) delays the other partitions of the same host.
- `read` (several threads) serves fetches and offset queries, never behind an append. Its threads serve every
  partition of the host, so the host's partitions share one pool of `LONG_POLL_SLOTS` (2 of the 4 threads) for
  long-poll fetches (`fetch`/`locate` with `max_wait_ms`): a fetch that finds the pool taken answers at once,
  and the other threads stay free for the other partitions' reads.
- `maintain` (one thread) runs retention, flushes and compaction, one partition at a time per host, as a
  partition actor's single maintenance thread does. A partition's maintenance and its closing exclude each
  other (a per-partition lock), so a pass never finds the log closed under it (`LogClosedError`).
- `replication` (several threads) serves its leaders' answers to followers' fetches and the waits of `acks=all`
  appends, which may each wait up to `replica.fetch.wait.max.ms` / `request.timeout.ms`.
- `shares` (several threads) serves ShareFetch, ShareAcknowledge and the share-group offset APIs; ShareFetches that
  wait for records share the host's pool of `SHARE_POLL_SLOTS` (4 of its 8 threads), so acknowledgements always
  find a thread.

The log manager's scheduled passes (checkpoints, retention, flushes, producer expiry) ask a host once for all the
partitions it holds (`read_each`, `maintain_each`), each partition's answer or error its own in the list answered: a
pass over 10,000 partitions is then a call per host, not 10,000 calls. A listener sends the reads that answer at once
(ListOffsets) it asks of a host in one pass of its event loop as one `read_many` call, the same way.

Errors are the partition log's own typed errors; a partition the host does not hold (deleted, or now in
another host after its topic was created again) answers `BrokerNotAvailableError`, which clients treat as
retriable and answer by looking the partition up again; a method of another group or none answers
`InvalidRequestError`.

Crash behaviour: the host is named, detached and restarted by Ray (`max_restarts=-1`) with the arguments of
its first start, which name no partition. A restarted host asks `resume` (the log manager) which partitions it
held and their current settings, and reopens each from disk before serving: the recovery point and log start
offset come from the log dir's checkpoints and the log is recovered from its recovery point (CRCs checked,
torn tail cut), so no acknowledged append is lost and no record removed by DeleteRecords comes back.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from actors import heap_trim
from actors.core.replication.follower import ReplicaSettings
from actors.core.replication.partition_server import LONG_POLL_SLOTS, SHARE_POLL_SLOTS
from actors.open_files import raise_open_file_limit
from actors.options import MAINTENANCE_GROUP, READ_GROUP, REPLICATION_GROUP, SHARES_GROUP
from actors.server.partition_log import PartitionLogActor
from actors.startup_objects import freeze_startup_objects
from actors.young_collections import widen_young_generation
from storage.errors import BrokerNotAvailableError, InvalidRequestError, RaybrokerError
from storage.logdir.log_dirs import checkpointed_offsets
from storage.partition.producer_state import PRODUCER_ID_EXPIRATION_MS
from storage.topic_partition import TopicPartition

logger = logging.getLogger(__name__)


def partition_method_group(method: str) -> str | None:
    """The concurrency group `PartitionLogActor.<method>` runs in (None: the default group, writes);
    `InvalidRequestError` unless it is a public method of that class."""
    function = getattr(PartitionLogActor, method, None) if not method.startswith("_") else None
    if not callable(function) or isinstance(function, type):
        raise InvalidRequestError(f"a partition has no method {method!r}")
    return getattr(function, "__ray_concurrency_group__", None)


def _check_group(group: str | None, method: str) -> None:
    """`InvalidRequestError` unless `method` is a partition method of concurrency group `group`."""
    if not isinstance(method, str) or partition_method_group(method) != group:
        raise InvalidRequestError(f"{method!r} is not a partition method of concurrency group {group or 'default'}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One partition's part of a batched host call: its answer, or the error it raised, which `unwrap` raises."""

    value: Any = None
    error: Exception | None = None

    def unwrap(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _outcome(work: Callable[[], Any]) -> Outcome:
    """`work()` as an `Outcome`: one partition's failure is its own, not the batch's."""
    try:
        return Outcome(work())
    except Exception as exc:
        return Outcome(error=exc)


@dataclass(frozen=True, slots=True)
class ReadCall:
    """One call of a `read_many`: a read-group method of one partition, with its arguments."""

    topic: str
    partition: int
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HostedPartitionSpec:
    """What a restarted host reopens a partition with: its folder and its topic's current settings."""

    topic: str
    partition: int
    directory: str
    config: dict[str, str]


class PartitionHostActor:
    """Several partition logs in one process; see the module docstring."""

    def __init__(
        self,
        name: str,
        cleaner_config: dict[str, str],
        resume: Callable[[], list[HostedPartitionSpec] | None] | None = None,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        replica_settings: ReplicaSettings | None = None,
        find_replica: Callable[[str, int, str], Any] | None = None,
    ) -> None:
        """`resume`, when given, answers None on a first start and the partitions to reopen after a restart;
        `producer_id_expiration_ms`, `replica_settings` and `find_replica` are passed to every partition here (see
        `PartitionLogActor`)."""
        self.name = name
        if ray.is_initialized():
            freeze_startup_objects()
            widen_young_generation()
        heap_trim.start()
        raise_open_file_limit()
        self._replica_settings = replica_settings
        self._find_replica = find_replica
        self._cleaner_config = dict(cleaner_config)
        self._producer_id_expiration_ms = producer_id_expiration_ms
        # Changed only on the write thread; the read and maintenance threads look entries up (atomic in CPython).
        self._logs: dict[TopicPartition, PartitionLogActor] = {}
        self._closing_locks: dict[TopicPartition, threading.Lock] = {}
        self._long_poll_slots = threading.BoundedSemaphore(LONG_POLL_SLOTS)
        self._share_poll_slots = threading.BoundedSemaphore(SHARE_POLL_SLOTS)
        for spec in (resume() if resume is not None else None) or []:
            self._logs[(spec.topic, spec.partition)] = self._new_log(
                spec.directory, spec.config, *checkpointed_offsets(Path(spec.directory))
            )
            self._closing_locks[(spec.topic, spec.partition)] = threading.Lock()
        if self._logs:
            logger.warning("partition host %s restarted and reopened %d partitions", name, len(self._logs))

    def _new_log(
        self,
        directory: str,
        config: dict[str, str],
        recovery_point: int,
        log_start_offset: int,
        high_watermark: int | None,
    ) -> PartitionLogActor:
        """The plain partition class opens (and recovers) the log; a failure is kept and raised by every call."""
        return PartitionLogActor(
            directory,
            config,
            recovery_point,
            log_start_offset,
            self._cleaner_config,
            long_poll_slots=self._long_poll_slots,
            share_poll_slots=self._share_poll_slots,
            producer_id_expiration_ms=self._producer_id_expiration_ms,
            replica_settings=self._replica_settings,
            find_replica=self._find_replica,
            high_watermark=high_watermark,
        )

    # --- placement (write thread) ----------------------------------------------------------------

    def open_partition(
        self,
        topic: str,
        partition: int,
        directory: str,
        config: dict[str, str],
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
    ) -> int:
        """Opens the partition's log here unless the host holds it already (idempotent); returns its log end
        offset, or raises why it did not open (as a partition actor's `ready` does). `high_watermark` as
        `PartitionLogActor`'s."""
        log = self._logs.get((topic, partition))
        if log is None:
            self._closing_locks.setdefault((topic, partition), threading.Lock())
            log = self._logs[(topic, partition)] = self._new_log(
                directory, config, recovery_point, log_start_offset, high_watermark
            )
        return log.ready()

    def remove_partition(self, topic: str, partition: int) -> bool:
        """Closes the partition's log (if still open) and forgets it; False if it was not held here."""
        log = self._logs.pop((topic, partition), None)
        if log is None:
            return False
        # A log that failed to open, or is closed already, has nothing left to close.
        with self._closing_locks.pop((topic, partition)), contextlib.suppress(RaybrokerError):
            log.close()
        return True

    # --- partition calls, one method per concurrency group ---------------------------------------

    def write(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """A method of the default group (writes, `ready`), on the host's single write thread."""
        if method == "close":
            with self._closing_locks.get((topic, partition)) or contextlib.nullcontext():
                return self._call(None, topic, partition, method, args, kwargs)
        return self._call(None, topic, partition, method, args, kwargs)

    @ray.method(concurrency_group=READ_GROUP)
    def read(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """A method of the read group (fetches, offsets, state), beside the writes."""
        return self._call(READ_GROUP, topic, partition, method, args, kwargs)

    @ray.method(concurrency_group=REPLICATION_GROUP)
    def replication(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """A method of the replication group (followers' fetches, `acks=all` waits), beside the rest."""
        return self._call(REPLICATION_GROUP, topic, partition, method, args, kwargs)

    @ray.method(concurrency_group=SHARES_GROUP)
    def shares(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """A method of the share group (ShareFetch, ShareAcknowledge, the share-group offset APIs), which may wait on
        a share-partition's state write, beside the rest."""
        return self._call(SHARES_GROUP, topic, partition, method, args, kwargs)

    @ray.method(concurrency_group=MAINTENANCE_GROUP)
    def maintain(self, topic: str, partition: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """A method of the maintenance group (retention, flushes, compaction), never while the log closes."""
        with self._closing_locks.get((topic, partition)) or contextlib.nullcontext():
            return self._call(MAINTENANCE_GROUP, topic, partition, method, args, kwargs)

    @ray.method(concurrency_group=READ_GROUP)
    def read_each(self, method: str, keys: list[TopicPartition]) -> list[Outcome]:
        """`read` of `method`, of no arguments, for each partition of `keys`, in order: the log manager's scheduled
        passes ask a host once for all its partitions rather than once per partition."""
        _check_group(READ_GROUP, method)
        return [_outcome(functools.partial(self.read, *key, method)) for key in keys]

    @ray.method(concurrency_group=READ_GROUP)
    def read_many(self, calls: list[ReadCall]) -> list[Outcome]:
        """Several `read`s, of any partitions held here, one after the other, each outcome its own: a listener sends the
        reads it asks of this host in one pass of its event loop as one call (`actors.server.host_reads`)."""
        for call in calls:
            _check_group(READ_GROUP, call.method)
        return [
            _outcome(functools.partial(self.read, call.topic, call.partition, call.method, *call.args, **call.kwargs))
            for call in calls
        ]

    @ray.method(concurrency_group=MAINTENANCE_GROUP)
    def maintain_each(self, method: str, keys: list[TopicPartition]) -> list[Outcome]:
        """`maintain` of `method`, of no arguments, for each partition of `keys`, in order (as `read_each`)."""
        _check_group(MAINTENANCE_GROUP, method)
        return [_outcome(functools.partial(self.maintain, *key, method)) for key in keys]

    def _call(
        self, group: str | None, topic: str, partition: int, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        _check_group(group, method)
        log = self._logs.get((topic, partition))
        if log is None:
            raise BrokerNotAvailableError(f"partition {topic}-{partition} is not hosted by {self.name}")
        return getattr(log, method)(*args, **kwargs)

    @ray.method(concurrency_group=READ_GROUP)
    def partitions(self) -> list[TopicPartition]:
        """The partitions this host holds (the log manager asks after its own restart)."""
        return sorted(self._logs.copy())

    @ray.method(concurrency_group=READ_GROUP)
    def ping(self) -> str:
        return self.name

"""The cleaner actors: a node's `log.cleaner.threads` cleaner threads (Kafka's `CleanerThread`s), each a process.

A compaction pass reads every segment of its dirty range and writes the cleaned copies: seconds of CPU per
gigabyte, most of it in Python. Run inside the partition's own process, it holds the GIL that every append
of that process needs, and a partition host holds ~100 partitions. So the heavy phase of a pass
(`storage.compaction.cleaner.Cleaner.clean_snapshot`) runs here, in an actor of its own on the log's node,
from the snapshot the partition took (`snapshot_for_cleaning`); the partition only swaps the `.cleaned`
segments in, under its lock (`swap_cleaned`), and the node's log manager schedules both
(`storage.compaction.cleaner_manager`). The actor needs nothing of the partition's process: the snapshot names
the files, which it opens read-only, and it writes the `.cleaned` files into the same folder. It runs at a lower
CPU priority than the partitions (`CLEANER_NICENESS`): on a node with few cores, a process of its own alone
does not keep a pass from slowing the appends.

`CleanerActor` is the plain class; `RayCleanerThreads` creates the actors (named `log-cleaner:<node>:<index>`,
pinned to the node, detached, restarted by Ray, options in `actors.options`), finds them again after a restart
of the log manager (`get_if_exists`), and hands the log manager one `CleanerThread` per actor. Each actor runs
one pass at a time and keeps one offset map (`log.cleaner.dedupe.buffer.size` / threads), allocated on its
first pass. An actor that dies mid-pass fails that pass (retried after `log.cleaner.backoff.ms`); the `.cleaned`
files it left are deleted by the next pass of that partition, or when the log is next opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray

from actors import heap_trim
from actors.calls import RayPending, kill_and_wait
from actors.metrics.ray_export import exported_metrics
from actors.metrics.recorder import BrokerMetrics
from actors.options import cleaner_name, cleaner_options
from storage.clock import SYSTEM_CLOCK
from storage.compaction.clean_result import CleanedLog
from storage.compaction.cleaner import Cleaner
from storage.compaction.cleaner_threads import CleanerThread
from storage.compaction.log_snapshot import LogSnapshot
from storage.config.broker_config import BrokerConfig
from storage.config.cleaner_config import CleanerConfig

# Niceness the cleaner process adds to its own: a pass is background work and must not take the CPU from the
# partition processes serving appends. Ray starts workers at 15 (`RAY_worker_niceness`), so a cleaner runs at 19:
# Linux weighs 15 at 36 and 19 at 15, and a host contending with a cleaner for one core gets ~70 % of it, not half.
# Measured with `append_during_compaction`: at equal niceness a cleaner actor gained nothing over a pass
# inside the host (append p99 ratio 0.94 and 0.97 in two runs); niced, 0.24.
CLEANER_NICENESS = 10


@dataclass(frozen=True, slots=True)
class CleanerStatistics:
    """What a cleaner actor did since it started: first phases done, and the bytes they read and wrote (a
    swap the partition then discards still counts)."""

    passes: int
    bytes_read: int
    bytes_written: int


class CleanerActor:
    """One cleaner thread; see the module docstring."""

    def __init__(self, cleaner_config: dict[str, str], metrics: BrokerMetrics | None = None) -> None:
        """`metrics` records each pass (default: the process's, exported to Ray)."""
        heap_trim.start()
        os.nice(CLEANER_NICENESS)
        self._cleaner = Cleaner(CleanerConfig.from_properties(cleaner_config), SYSTEM_CLOCK)
        self._statistics = CleanerStatistics(0, 0, 0)
        self._metrics = metrics if metrics is not None else exported_metrics()

    def clean(self, snapshot: LogSnapshot) -> CleanedLog:
        """The first phase of a pass over `snapshot` (`Cleaner.clean_snapshot`)."""
        cleaned = self._cleaner.clean_snapshot(snapshot)
        done, result = self._statistics, cleaned.result
        self._statistics = CleanerStatistics(
            done.passes + 1, done.bytes_read + result.bytes_read, done.bytes_written + result.bytes_written
        )
        if not result.aborted:
            self._metrics.cleaned(result.bytes_read, result.bytes_written, result.duration_ms / 1000)
        return cleaned

    def statistics(self) -> CleanerStatistics:
        return self._statistics


_Cleaner = ray.remote(CleanerActor)


class RayCleanerThread:
    """A cleaner actor as a `CleanerThread`."""

    __slots__ = ("actor",)

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def clean(self, snapshot: LogSnapshot) -> RayPending:
        return RayPending(self.actor.clean.remote(snapshot))


class RayCleanerThreads:
    """The `log.cleaner.threads` cleaner actors of one node (none when the cleaner is disabled)."""

    def __init__(self, node_id: str, config: BrokerConfig) -> None:
        cleaner_config = config.cleaner_config
        count = cleaner_config.log_cleaner_threads if cleaner_config.enabled else 0
        properties = cleaner_config.to_properties()
        self._names = [cleaner_name(node_id, index) for index in range(count)]
        self._actors = [
            _Cleaner.options(**cleaner_options(node_id, index)).remote(properties) for index in range(count)
        ]

    @property
    def threads(self) -> list[CleanerThread]:
        return [RayCleanerThread(actor) for actor in self._actors]

    def shutdown(self) -> None:
        """Kills the cleaner actors (after the log manager's scheduler stopped: no pass is running)."""
        actors, self._actors = self._actors, []
        for actor, name in zip(actors, self._names, strict=False):
            kill_and_wait(actor, name)

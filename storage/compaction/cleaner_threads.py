"""A broker's `log.cleaner.threads` cleaner threads (Kafka's `LogCleaner`): where the heavy phase of a pass runs.

A pass has two phases in two places (`storage.compaction.cleaner`): the log's owner snapshots it and later
swaps the cleaned segments in; in between, a cleaner thread reads the snapshot's segments, builds the offset
map and writes the `.cleaned` files (`Cleaner.clean_snapshot`). The cleaner manager
(`storage.compaction.cleaner_manager`) hands each pass it starts to one of the threads, which answer a
`Pending`, so passes on several threads run at once. Each thread owns one `Cleaner`, and with it one offset
map of `log.cleaner.dedupe.buffer.size` / threads bytes, allocated on its first pass.

- In process (`LocalCleanerThread`, what the storage-only `LogManager` uses): the phase runs in the caller's
  thread, at the call, one pass after the other.
- On Ray, each thread is a cleaner actor pinned to the log's node (`actors.server.cleaner_actor`): a partition host
  holding ~100 partitions then spends no GIL time on a pass but the snapshot and the swap, so its appends go on
  while one of its partitions is compacted.
"""

from __future__ import annotations

from typing import Protocol

from storage.clock import Clock
from storage.compaction.clean_result import CleanedLog
from storage.compaction.cleaner import Cleaner
from storage.compaction.log_snapshot import LogSnapshot
from storage.config.cleaner_config import CleanerConfig
from storage.pending import Pending, completed


class CleanerThread(Protocol):
    """One cleaner thread: runs the first phase of a pass wherever it lives."""

    def clean(self, snapshot: LogSnapshot) -> Pending[CleanedLog]:
        """`Cleaner.clean_snapshot(snapshot)`; its errors are raised by `result()`."""
        ...


class LocalCleanerThread:
    """A cleaner thread in this process: the phase runs at the call."""

    def __init__(self, cleaner: Cleaner) -> None:
        self.cleaner = cleaner

    def clean(self, snapshot: LogSnapshot) -> Pending[CleanedLog]:
        return completed(lambda: self.cleaner.clean_snapshot(snapshot))


def local_cleaner_threads(config: CleanerConfig, clock: Clock) -> list[CleanerThread]:
    """`log.cleaner.threads` in-process threads, each with its own cleaner."""
    return [LocalCleanerThread(Cleaner(config, clock)) for _ in range(config.log_cleaner_threads)]


__all__ = ["CleanerThread", "LocalCleanerThread", "local_cleaner_threads"]

"""Which log dir holds each of a broker's partitions, with how many each dir holds kept up to date.

A new partition goes to the live dir holding the fewest (`storage.logdir.log_manager`), so every creation compares the
dirs' counts: counted afresh each time, creating a topic of N partitions on a node cost O(N^2) (at 10,000 partitions,
~2 ms of the log manager's time per partition). `PartitionDirs` keeps the counts as partitions are placed, moved and
removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import ItemsView, Iterator, ValuesView
from pathlib import Path

from storage.topic_partition import TopicPartition


class PartitionDirs:
    """A mapping of partition to log dir (the subset of `dict`'s API the log manager uses) with per-dir counts."""

    __slots__ = ("_counts", "_dirs")

    def __init__(self) -> None:
        self._dirs: dict[TopicPartition, Path] = {}
        self._counts: Counter[Path] = Counter()

    def __getitem__(self, tp: TopicPartition) -> Path:
        return self._dirs[tp]

    def __setitem__(self, tp: TopicPartition, directory: Path) -> None:
        previous = self._dirs.get(tp)
        if previous is not None:
            self._counts[previous] -= 1
        self._dirs[tp] = directory
        self._counts[directory] += 1

    def __contains__(self, tp: object) -> bool:
        return tp in self._dirs

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._dirs)

    def __len__(self) -> int:
        return len(self._dirs)

    def get(self, tp: TopicPartition) -> Path | None:
        return self._dirs.get(tp)

    def pop(self, tp: TopicPartition) -> Path:
        """Removes `tp` and answers its dir; `KeyError` if it has none."""
        directory = self._dirs.pop(tp)
        self._counts[directory] -= 1
        return directory

    def clear(self) -> None:
        self._dirs.clear()
        self._counts.clear()

    def items(self) -> ItemsView[TopicPartition, Path]:
        return self._dirs.items()

    def values(self) -> ValuesView[Path]:
        return self._dirs.values()

    def count(self, directory: Path) -> int:
        """How many partitions `directory` holds."""
        return self._counts[directory]

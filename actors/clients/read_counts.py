"""How this process's reads of same-node partitions went: one count per kind of outcome, read together as the frozen
statistics dataclass whose fields name the kinds (`local_fetch.statistics()`, `local_tail.statistics()`).

Counts are per process and only grow; a reader compares two readings (tests and benchmarks check that reads took
the local path). Every reader thread of the process counts under one lock, so a reading is never torn.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Statistics = TypeVar("Statistics", bound="DataclassInstance")


class ReadCounts(Generic[Statistics]):
    """A count per field of `Statistics` (see the module docstring)."""

    def __init__(self, statistics: type[Statistics]) -> None:
        self._statistics = statistics
        self._lock = threading.Lock()
        self._counts = dict.fromkeys((field.name for field in dataclasses.fields(statistics)), 0)

    def count(self, kind: str) -> None:
        """One more read that went the way `kind` (a field of `Statistics`) names."""
        with self._lock:
            self._counts[kind] += 1

    def statistics(self) -> Statistics:
        """The counts now."""
        with self._lock:
            return self._statistics(**self._counts)


__all__ = ["ReadCounts"]

"""What the clients and the nemesis did, in the order they did it: the history a nemesis run writes and its checker
reads (`tests.reliability.nemesis.checker`).

An event is a flat dict with `time` (seconds since the run began, monotonic), `process` (the workload thread or
"nemesis") and `type`, plus the fields of its type:

- `send` (topic, partition, value): a producer hands a record to its client;
- `ack` (topic, partition, value, offset): the client says the record is written (acks=all);
- `fail` (topic, partition, value, error): the client says the record is not written, or may not be;
- `read` (topic, partition, offset, value, isolation): a consumer polled a record;
- `txn` (attempt, outcome: `commit`, `abort`, `fail` or `abandoned`, inputs, outputs): a transaction ended, its
  outcome as its client learned it (`abandoned`: left open, for the coordinator to abort on its timeout);
- `offsets` (group, offsets: `"topic/partition"` -> offset): a group's commit was acknowledged;
- `error` (error): a client call failed and the workload goes on;
- `fault` (action, target, detail): the nemesis began or ended a fault.

Values are text (the workloads write ASCII values). `History` is thread-safe; `write` saves it as JSON lines.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class History:
    """An append-only list of events; see the module docstring."""

    def __init__(self, events: list[Event] | None = None) -> None:
        self._events: list[Event] = list(events or [])
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def add(self, process: str, kind: str, **fields: Any) -> None:
        event = {"time": round(time.monotonic() - self._started, 4), "process": process, "type": kind, **fields}
        with self._lock:
            self._events.append(event)

    def events(self, kind: str | None = None) -> list[Event]:
        with self._lock:
            return [event for event in self._events if kind is None or event["type"] == kind]

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events())

    def write(self, path: Path) -> None:
        path.write_text("".join(json.dumps(event, sort_keys=True) + "\n" for event in self.events()))

    @classmethod
    def read(cls, path: Path) -> History:
        return cls([json.loads(line) for line in path.read_text().splitlines() if line.strip()])


def longest_ack_gaps(history: History) -> dict[str, tuple[float, float]]:
    """Per producing process, the longest time between two acknowledgements it got and when that gap began (both in
    seconds of the run): how long a fault stopped its writes."""
    last: dict[str, float] = {}
    longest: dict[str, tuple[float, float]] = {}
    for event in history.events("ack"):
        process, at = event["process"], float(event["time"])
        if process in last:
            gap = at - last[process]
            if gap > longest.get(process, (0.0, 0.0))[0]:
                longest[process] = (round(gap, 3), last[process])
        last[process] = at
    return longest

"""Keeping the objects a Ray process starts with out of Python's full garbage collections.

A process attached to Ray holds ~100,000 objects tracked by the cyclic garbage collector from the moment it
starts (Ray's modules and workers, pyarrow's, ours), and a full (generation 2) collection walks them all: 75-88 ms
measured, stopping every thread of the process. A producer sending 10,000 records a
second allocates enough for one every few seconds, and that one pause was the p99 of the `latency` benchmark
(send->ack max 60 ms, p99 6-10 ms, where the other records took 0.5 ms). Kafka's own scripts tune the JVM's
collector for the same reason (`-XX:MaxGCPauseMillis=20`).

`freeze_startup_objects()` collects once, then moves every object alive into the collector's permanent
generation (`gc.freeze`), once per process: later full collections walk only what was made since (0.01 ms right
after). The price is Python's documented one: a reference cycle among the frozen objects that later becomes
garbage is never collected (objects freed by reference counting still are), which for objects made while a
process starts is the same as living as long as the process. The producer and consumer call it when created,
the partition actors and hosts when they start, and the Kafka listener once it serves.
"""

from __future__ import annotations

import gc
import threading

_frozen = False
_lock = threading.Lock()


def freeze_startup_objects() -> None:
    """Moves the objects alive now out of later full collections (see the module docstring); once per process."""
    global _frozen
    with _lock:
        if _frozen:
            return
        _frozen = True
    gc.collect()
    gc.freeze()


__all__ = ["freeze_startup_objects"]

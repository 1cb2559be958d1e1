"""Append latency on a partition host while another of its partitions is compacted, with the heavy phase of the
pass in a cleaner actor (ours) and inside the host's own process (the baseline), in the same run.

A partition host (`log.partitions.per.process=100`) holds a plain partition and compacted ones. A driver thread
appends one 100-byte record at a time to the plain partition, back to back, timing each `append` call, while
the driver compacts one compacted partition of the same host in one of two placements:

- ours, as the broker's scheduler does it: the partition snapshots its log (`snapshot_for_cleaning`), the
  node's cleaner actor reads the segments and writes the `.cleaned` files (`actors.server.cleaner_actor`), the
  partition swaps them in (`swap_cleaned`);
- the baseline, the whole pass inside the host (`clean`, both phases on its maintenance thread), holding the
  GIL that the host's appends need.

Each compacted partition is filled with the same `COMPACTED_MIB` of 100-byte keyed records, every key written
twice (half of the log is superseded), and takes `min.cleanable.dirty.ratio=1.0` so that the broker's own
scheduler never picks it (a ratio never exceeds 1). The placements alternate, `REPEATS` passes each, each over
a fresh partition; the latencies of the appends started while a pass ran are pooled per placement. The figure is
ours p99 over the baseline's p99 (lower is better); the idle p99 (no pass running) is measured in the same run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import BenchContext, Figure, percentile
from storage.clock import SYSTEM_CLOCK
from storage.records.record_encoder import build_batch_from_columns

MIB = 1024 * 1024
HOSTED_PER_PROCESS = 100
VALUE_BYTES = 100
BATCH_RECORDS = 8_000  # ~1 MiB batches of 100-byte values and 12-byte keys
COMPACTED_MIB = 64
QUICK_COMPACTED_MIB = 16
REPEATS = 3
QUICK_REPEATS = 2
IDLE_S = 2.0
CALL_TIMEOUT_S = 600.0
GOAL_RATIO = 0.5
COMPACTED_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(8 * MIB), "min.cleanable.dirty.ratio": "1.0"}


def _keyed_batches(total_bytes: int) -> list[bytes]:
    """~1 MiB batches filling `total_bytes`, the second half repeating the first half's keys."""
    count = max(2, total_bytes // (BATCH_RECORDS * (VALUE_BYTES + 30)))
    half = count // 2
    now_ms = SYSTEM_CLOCK.milliseconds()
    distinct = [
        build_batch_from_columns(
            [b"v" * VALUE_BYTES] * BATCH_RECORDS,
            [b"key-%08d" % (index * BATCH_RECORDS + record) for record in range(BATCH_RECORDS)],
            [now_ms] * BATCH_RECORDS,
        )
        for index in range(half)
    ]
    return distinct + distinct


class Appender:
    """Appends one record at a time to a partition from a thread of its own, keeping (start, seconds) per call."""

    def __init__(self, handle: Any) -> None:
        from storage.records.record_batch import RecordBatchBuilder

        builder = RecordBatchBuilder()
        builder.append(None, b"a" * VALUE_BYTES, timestamp=SYSTEM_CLOCK.milliseconds())
        self._batch = builder.build()
        self._handle = handle
        self._stop = threading.Event()
        self.calls: list[tuple[float, float]] = []
        self._thread = threading.Thread(target=self._run, name="bench-appender", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from actors.calls import call

        while not self._stop.is_set():
            started = time.perf_counter()
            call(self._handle.append.remote(self._batch), timeout_s=CALL_TIMEOUT_S)
            self.calls.append((started, time.perf_counter() - started))

    def between(self, start: float, end: float) -> list[float]:
        """Milliseconds of the calls started in [start, end)."""
        return [seconds * 1000 for started, seconds in list(self.calls) if start <= started < end]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=CALL_TIMEOUT_S)


def _fill(handle: Any, batches: list[bytes]) -> None:
    from actors.calls import call

    for batch in batches:
        call(handle.append.remote(batch), timeout_s=CALL_TIMEOUT_S)


def _pass_in_host(handle: Any, cleaner: Any) -> Any:
    from actors.calls import call

    return call(handle.clean.remote(0, None), timeout_s=CALL_TIMEOUT_S)


def _pass_in_cleaner_actor(handle: Any, cleaner: Any) -> Any:
    from actors.calls import call

    snapshot = call(handle.snapshot_for_cleaning.remote(0, None), timeout_s=CALL_TIMEOUT_S)
    cleaned = call(cleaner.clean.remote(snapshot), timeout_s=CALL_TIMEOUT_S)
    return call(handle.swap_cleaned.remote(cleaned), timeout_s=CALL_TIMEOUT_S)


# Each placement runs one pass over a compacted partition (its handle, the cleaner actor) and answers its result.
PLACEMENTS: dict[str, Callable[[Any, Any], Any]] = {
    "cleaner actor": _pass_in_cleaner_actor,
    "in the host": _pass_in_host,
}


def measure(ctx: BenchContext, placements: list[str], repeats: int) -> tuple[dict[str, list[float]], list[float]]:
    """Append latencies (ms) during the passes of each placement, alternating, and with no pass running."""
    import ray

    from actors.calls import call, get_actor
    from actors.options import cleaner_name

    broker = ctx.environment.broker({"log.partitions.per.process": str(HOSTED_PER_PROCESS)})
    batches = _keyed_batches((QUICK_COMPACTED_MIB if ctx.quick else COMPACTED_MIB) * MIB)
    cleaner = get_actor(cleaner_name(ray.get_runtime_context().get_node_id(), 0))
    call(broker.controller.create_topic.remote("bench-appends", 1), timeout_s=CALL_TIMEOUT_S)
    plain = broker.partition("bench-appends", 0)
    host_pid = call(plain.state.remote()).pid
    appender = Appender(plain)
    during: dict[str, list[float]] = {name: [] for name in placements}
    try:
        time.sleep(IDLE_S)
        idle = appender.between(0.0, time.perf_counter())
        for repeat in range(repeats):
            for number, name in enumerate(placements if repeat % 2 == 0 else list(reversed(placements))):
                topic = f"bench-compact-{repeat}-{number}"
                call(broker.controller.create_topic.remote(topic, 1, COMPACTED_CONFIG), timeout_s=CALL_TIMEOUT_S)
                compacted = broker.partition(topic, 0)
                assert call(compacted.state.remote()).pid == host_pid, "the partitions must share one host"
                _fill(compacted, batches)
                started = time.perf_counter()
                result = PLACEMENTS[name](compacted, cleaner)
                ended = time.perf_counter()
                latencies = appender.between(started, ended)
                during[name].extend(latencies)
                ctx.progress(
                    f"  {name}: pass of {result.bytes_read / MIB:.0f} MiB in {ended - started:.2f} s, "
                    f"{len(latencies)} appends, p50 {percentile(sorted(latencies), 0.5):.2f} ms, "
                    f"p99 {percentile(sorted(latencies), 0.99):.2f} ms"
                )
                call(broker.controller.delete_topic.remote(topic), timeout_s=CALL_TIMEOUT_S)
    finally:
        appender.stop()
    call(broker.controller.delete_topic.remote("bench-appends"), timeout_s=CALL_TIMEOUT_S)
    return {name: sorted(values) for name, values in during.items()}, sorted(idle)


def run(ctx: BenchContext) -> list[Figure]:
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    during, idle = measure(ctx, list(PLACEMENTS), repeats)
    ours, baseline = during["cleaner actor"], during["in the host"]
    ratio = percentile(ours, 0.99) / percentile(baseline, 0.99)
    goal = (
        f"ratio <= {GOAL_RATIO} (p50 {percentile(ours, 0.5):.2f} vs {percentile(baseline, 0.5):.2f} ms; "
        f"no pass running: p50 {percentile(idle, 0.5):.2f}, p99 {percentile(idle, 0.99):.2f} ms; "
        f"{len(ours)} and {len(baseline)} appends during {repeats} passes each)"
    )
    return [
        Figure(
            "append_during_compaction",
            percentile(ours, 0.99),
            "ms p99",
            "the pass inside the host's process",
            percentile(baseline, 0.99),
            ratio,
            goal,
            ratio <= GOAL_RATIO,
        )
    ]

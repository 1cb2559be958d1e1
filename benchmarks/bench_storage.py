"""Storage benchmarks: the partition log's append, random reads, crash recovery and compaction, each beside the
raw file operation it is built on (no Ray).

| figure           | measured                                                        | baseline, same bytes        |
|------------------|-----------------------------------------------------------------|-----------------------------|
| `storage_append` | `Log.append` of pre-built uncompressed 1 MB batches (100-byte    | `os.write` to one file plus |
|                  | values): validation, offset assignment, write, indexes          | one CRC-32C pass over each  |
|                  |                                                                 | batch (Kafka's validation   |
|                  |                                                                 | floor)                      |
| `lookup`         | `Log.read(offset, 16 KiB)` at random offsets of a 1,000-segment  | - (p99 goal < 50 us)        |
|                  | log, after one read per segment opened its indexes (p50, and     |                             |
|                  | the CPU time per read, in the goal text)                         |                             |
| `recovery`       | `Log.open` of a log left without a clean-shutdown marker (16 KiB | sequential 1 MiB reads of   |
|                  | batches): every batch's CRC checked, both indexes rebuilt        | the same `.log` files       |
| `compaction`     | one `Cleaner.clean` pass over a log whose keys are 50 % updates  | reads of the same files     |
|                  | (goal >= 100 MB/s, not a ratio)                                 |                             |

Recovery and its baseline read from disk: the page cache of every file is dropped first (`fsync`, then
`POSIX_FADV_DONTNEED`). Sizes: append 256 MB, 1,000 segments, recovery 1 GiB, compaction 64 MiB; `--quick`
shrinks them to 32 MB, 100 segments, 64 MiB and 16 MiB; the measurement is the same.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import crc32c

from benchmarks.common import (
    BenchContext,
    Figure,
    absolute_figure,
    drop_page_cache_hint,
    percentile,
    throughput_figure,
    timer,
)
from storage.clock import SYSTEM_CLOCK
from storage.compaction.cleaner import Cleaner
from storage.config.cleaner_config import CleanerConfig
from storage.config.log_config import LogConfig
from storage.partition.log import Log
from storage.records.layout import ATTRIBUTES_OFFSET, CRC_OFFSET
from storage.records.record_encoder import build_batch_from_columns

MB = 1_000_000
MIB = 1024 * 1024
VALUE_BYTES = 100
APPEND_BATCH_RECORDS = 8_300  # ~1 MB batches of 100-byte values and 11-byte keys
SMALL_BATCH_RECORDS = 130  # ~16 KiB, Kafka's default batch.size
DISTINCT_BATCHES = 8
READ_CHUNK_BYTES = MIB
# Issue 18: a cleaning pass reads the log at >= 100 MB/s (a raw read of the page cache is ~100x faster, so
# the figure is judged on its own, not as a ratio).
COMPACTION_GOAL_MB_S = 100


def run(ctx: BenchContext) -> list[Figure]:
    return [_append(ctx), _lookup(ctx), _recovery(ctx), _compaction(ctx)]


def _batch(records: int, first_key: int, *, key_space: int | None = None) -> bytes:
    now_ms = SYSTEM_CLOCK.milliseconds()
    keys = [b"key-%07d" % ((first_key + index) % (key_space or 10**7)) for index in range(records)]
    values = [random.randbytes(VALUE_BYTES) for _ in range(records)]
    return build_batch_from_columns(values, keys, [now_ms + index // 1000 for index in range(records)])


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --- storage_append -------------------------------------------------------------------------------------


def append_batches(ctx: BenchContext) -> tuple[list[bytes], int]:
    """The distinct pre-built batches `storage_append` cycles through, and how many it appends a round."""
    total_batches = 32 if ctx.quick else 256
    return [
        _batch(APPEND_BATCH_RECORDS, index * APPEND_BATCH_RECORDS) for index in range(DISTINCT_BATCHES)
    ], total_batches


def round_bytes(batches: list[bytes], total_batches: int) -> int:
    """The bytes of a round of `total_batches` appends cycling through `batches`."""
    return sum(len(batches[index % len(batches)]) for index in range(total_batches))


def log_append_rate(ctx: BenchContext, batches: list[bytes], total_batches: int) -> float:
    """MB/s of one round: `Log.append` of each batch in turn to a new log."""
    folder = ctx.scratch("append-log")
    log = Log.open(folder / "bench-0", LogConfig())
    with timer() as elapsed:
        for index in range(total_batches):
            log.append(batches[index % len(batches)])
    log.close()
    _remove(folder)
    return round_bytes(batches, total_batches) / elapsed() / MB


def _append(ctx: BenchContext) -> Figure:
    batches, total_batches = append_batches(ctx)
    total_bytes = round_bytes(batches, total_batches)
    ctx.progress(f"storage_append: {total_batches} batches of {len(batches[0]):,} bytes")

    def checked_write_rate() -> float:
        """The least an append that validates as Kafka does can cost: each batch's CRC-32C checked over the bytes
        it covers, then one `write()`."""
        folder = ctx.scratch("append-raw")
        fd = os.open(folder / "raw.log", os.O_WRONLY | os.O_CREAT, 0o644)
        with timer() as elapsed:
            for index in range(total_batches):
                batch = batches[index % DISTINCT_BATCHES]
                if crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]) != int.from_bytes(
                    batch[CRC_OFFSET:ATTRIBUTES_OFFSET]
                ):
                    raise AssertionError("a benchmark batch has a wrong CRC")
                os.write(fd, batch)
        os.close(fd)
        _remove(folder)
        return total_bytes / elapsed() / MB

    ours, floor = _interleaved(3, lambda: log_append_rate(ctx, batches, total_batches), checked_write_rate)
    return throughput_figure(
        "storage_append",
        ours,
        "MB/s",
        "write() + CRC-32C",
        floor,
        None,
        "report: the raw-write floor; the goal is `storage_append_kafka`'s (>= 1.0x Kafka's log append, whose own "
        "ratio to its JVM's raw write that figure's goal text gives)",
    )


def _interleaved(repeats: int, ours: Callable[[], float], baseline: Callable[[], float]) -> tuple[float, float]:
    """Best of `repeats` of each, run alternately so that both see the same machine."""
    best_ours = best_baseline = 0.0
    for _ in range(repeats):
        best_baseline = max(best_baseline, baseline())
        best_ours = max(best_ours, ours())
    return best_ours, best_baseline


# --- lookup ---------------------------------------------------------------------------------------------


def _lookup(ctx: BenchContext) -> Figure:
    segments = 100 if ctx.quick else 1000
    batches_per_segment = 4
    reads = 2_000 if ctx.quick else 10_000
    folder = ctx.scratch("lookup")
    config = LogConfig(segment_bytes=batches_per_segment * 17_000)
    log = Log.open(folder / "bench-0", config)
    batch = _batch(SMALL_BATCH_RECORDS, 0)
    while log.num_segments < segments or log.active_segment.size < batches_per_segment * len(batch):
        log.append(batch)
    end = log.log_end_offset
    log.close()
    ctx.progress(f"lookup: {segments} segments, {end:,} records; {reads:,} random reads")
    log = Log.open(folder / "bench-0", config)
    for segment in log.log_segments():
        log.read(segment.base_offset, 16 * 1024)
    rng = random.Random(7)
    offsets = [rng.randrange(end) for _ in range(reads)]
    latencies_us: list[float] = []
    cpu_us: list[float] = []
    with timer():
        for offset in offsets:
            started, started_cpu = time.perf_counter(), time.thread_time()
            log.read(offset, 16 * 1024)
            latencies_us.append((time.perf_counter() - started) * 1e6)
            cpu_us.append((time.thread_time() - started_cpu) * 1e6)
    log.close()
    _remove(folder)
    latencies_us.sort()
    cpu_us.sort()
    p50, p99 = percentile(latencies_us, 0.5), percentile(latencies_us, 0.99)
    # The CPU time a read used, beside its wall time, tells a slow read from one the scheduler paused.
    goal = (
        f"p99 < 50 us (p50 {p50:.1f} us; CPU time p50 {percentile(cpu_us, 0.5):.1f} p99 "
        f"{percentile(cpu_us, 0.99):.1f} us; {segments} segments, indexes open)"
    )
    return absolute_figure("lookup", p99, "us p99", goal, p99 < 50)


# --- recovery -------------------------------------------------------------------------------------------


def _write_log(directory: Path, config: LogConfig, total_bytes: int, chunk: bytes) -> Log:
    log = Log.open(directory, config)
    while log.size_in_bytes < total_bytes:
        log.append(chunk)
    return log


def _log_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def _drop_cache(directory: Path) -> None:
    for path in directory.iterdir():
        if path.is_file():
            with open(path, "rb+") as file:
                os.fsync(file.fileno())
            drop_page_cache_hint(path)


def _read_files(paths: list[Path]) -> int:
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as file:
            while chunk := file.read(READ_CHUNK_BYTES):
                total += len(chunk)
    return total


def _recovery(ctx: BenchContext) -> Figure:
    total_bytes = 64 * MIB if ctx.quick else 1024 * MIB
    folder = ctx.scratch("recovery")
    directory = folder / "bench-0"
    # 64 batches of 16 KiB per append call: building the log takes a fraction of the time recovering it takes.
    chunk = b"".join(_batch(SMALL_BATCH_RECORDS, index * SMALL_BATCH_RECORDS) for index in range(64))
    config = LogConfig(segment_bytes=128 * MIB)
    _write_log(directory, config, total_bytes, chunk).close_without_marker()
    size = sum(path.stat().st_size for path in _log_files(directory))
    ctx.progress(f"recovery: {size / MIB:,.0f} MiB in {len(_log_files(directory))} segments")

    def recover_rate() -> float:
        _drop_cache(directory)
        with timer() as elapsed:
            log = Log.open(directory, config)
        recovered = log.size_in_bytes
        log.close_without_marker()
        if recovered != size:
            raise RuntimeError(f"recovery kept {recovered} of {size} bytes")
        return size / elapsed() / MB

    def raw_rate() -> float:
        _drop_cache(directory)
        with timer() as elapsed:
            read = _read_files(_log_files(directory))
        return read / elapsed() / MB

    ours, raw = _interleaved(2, recover_rate, raw_rate)
    _remove(folder)
    return throughput_figure("recovery", ours, "MB/s", "sequential read", raw, 0.25, "ratio >= 0.25")


# --- compaction -----------------------------------------------------------------------------------------


def _compaction(ctx: BenchContext) -> Figure:
    total_bytes = 16 * MIB if ctx.quick else 64 * MIB
    folder = ctx.scratch("compaction")
    config = LogConfig(cleanup_policy="compact", segment_bytes=(4 if ctx.quick else 32) * MIB)
    records_per_batch = SMALL_BATCH_RECORDS * 64
    total_records = total_bytes // (VALUE_BYTES + 30)
    # Every key is written twice, the second time in the second half of the log: 50 % of records are stale.
    key_space = total_records // 2
    log = Log.open(folder / "bench-0", config)
    first = 0
    while log.size_in_bytes < total_bytes:
        log.append(_batch(records_per_batch, first, key_space=key_space))
        first += records_per_batch
    log.roll()
    files = _log_files(log.directory)
    size = log.size_in_bytes
    ctx.progress(f"compaction: {size / MIB:,.0f} MiB, {log.log_end_offset:,} records, {key_space:,} keys")
    with timer() as raw_elapsed:
        _read_files(files)
    raw = size / raw_elapsed() / MB
    cleaner = Cleaner(CleanerConfig(), SYSTEM_CLOCK)
    cleaner.offset_map.clear()
    with timer() as elapsed:
        result = cleaner.clean(log, log.log_start_offset)
    ours = result.bytes_read / elapsed() / MB
    kept = result.messages_written / max(result.messages_read, 1)
    log.close()
    _remove(folder)
    goal = f">= {COMPACTION_GOAL_MB_S} MB/s ({result.messages_read:,} records read, {kept:.0%} kept)"
    figure = throughput_figure("compaction", ours, "MB/s", "raw read", raw, None, goal)
    return dataclasses.replace(figure, met=ours >= COMPACTION_GOAL_MB_S)

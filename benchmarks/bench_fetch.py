"""Fetch-path benchmarks: reading a whole partition from offset 0, through its actor and from the page cache.

| figure         | what                                                | baseline                                  |
|----------------|-----------------------------------------------------|-------------------------------------------|
| `fetch_remote` | MB/s fetching every batch from offset 0 through the | Ray moving the same chunks (same sizes,   |
|                | partition actor (`fetch`, 64 MiB per call, bytes    | same number of calls) from an actor's     |
|                | out of band through the object store), the next     | memory to this process: returned from a   |
|                | offset found by walking the batch headers           | method, so put in the object store there  |
|                |                                                     | and got here                              |
| `fetch_local`  | MB/s for a consumer on the partition's node reading | raw sequential `pread` of the segment     |
|                | it with `actors.clients.local_fetch.iter_fetches`   | files in 1 MiB chunks (the chunk of       |
|                | (the actor only locates each 64 MiB; the bytes are  | `storage.records.file_records`)           |
|                | mapped from the page cache), headers walked alike   |                                           |

The partition is filled once with 1 MB batches (32 MB quick, 256 MB full) in segments of a quarter of that, so
every read crosses segment rolls; both sides read page-cache-hot files. Each round measures the four in turn,
best of N each (noise only ever slows a run). Every run checks it read every byte of the log, and the local
run that no fetch fell back to the actor.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import BenchContext, Figure, throughput_figure, timer

MB = 1_000_000
# 1000 records of 1000 bytes: a ~1 MB batch, under Kafka's default max.message.bytes (1048588).
RECORDS_PER_BATCH = 1000
VALUE_BYTES = 1000
# What the baseline of `fetch_local` reads per call: `storage.records.file_records` iterates files in 1 MiB chunks.
RAW_READ_CHUNK_BYTES = 1024 * 1024
SEGMENTS = 4
REMOTE_GOAL_RATIO = 0.8
LOCAL_GOAL_RATIO = 0.5


def run(ctx: BenchContext) -> list[Figure]:
    import ray

    from actors.calls import this_node_id
    from actors.clients.local_fetch import BULK_FETCH_MAX_BYTES, iter_fetches, statistics

    broker = ctx.environment.broker()
    fill_batches = 32 if ctx.quick else 256
    repeats = 5 if ctx.quick else 7
    handle, node_id = _filled_partition(ctx, broker, fill_batches)
    state = ray.get(handle.state.remote())
    if node_id != this_node_id():
        raise RuntimeError(f"the partition runs on node {node_id}, not on this process's node")
    log_files = sorted(Path(state.directory).glob("*.log"))
    total_bytes = state.size_bytes
    end_offset = state.high_watermark
    ctx.progress(f"  fetch: {total_bytes / MB:.0f} MB in {len(log_files)} segments, {end_offset:,} records")

    chunk_sizes: list[int] = []

    def read_all(**options: Any) -> float:
        """Reads the partition from offset 0 to its end with `iter_fetches`; MB/s. Records the chunk sizes."""
        read = 0
        sizes = []
        with timer() as elapsed:
            for fetched in iter_fetches(handle, 0, end_offset, BULK_FETCH_MAX_BYTES, zero_copy=True, **options):
                records = fetched.records
                read += _whole_batch_bytes(records)
                sizes.append(len(records))
                del records, fetched
        if read != total_bytes:
            raise RuntimeError(f"read {read} bytes of the log's {total_bytes}")
        chunk_sizes[:] = sizes
        return read / MB / elapsed()

    def remote() -> float:
        return read_all(prefer_local=False)

    def local() -> float:
        before = statistics()
        speed = read_all(node_id=node_id)
        after = statistics()
        if after.fallbacks != before.fallbacks or after.actor_fetches != before.actor_fetches:
            raise RuntimeError("a local read fell back to the actor path")
        return speed

    def raw_read() -> float:
        read = 0
        with timer() as elapsed:
            for path in log_files:
                fd = os.open(path, os.O_RDONLY)
                try:
                    position = 0
                    while chunk := os.pread(fd, RAW_READ_CHUNK_BYTES, position):
                        position += len(chunk)
                finally:
                    os.close(fd)
                read += position
        if read != total_bytes:
            raise RuntimeError(f"the segment files hold {read} bytes, the log {total_bytes}")
        return read / MB / elapsed()

    remote()  # warms the actor's read path and records the chunk sizes the baseline moves
    holder = _chunk_holder_class().options(num_cpus=0).remote(sorted(set(chunk_sizes)))
    ray.get(holder.get.remote(chunk_sizes[0]))

    def ray_transfer() -> float:
        sizes = list(chunk_sizes)
        read = 0
        with timer() as elapsed:
            for size in sizes:
                read += len(ray.get(holder.get.remote(size)))
        return read / MB / elapsed()

    best = {"remote": 0.0, "ray": 0.0, "local": 0.0, "raw": 0.0}
    try:
        for attempt in range(repeats):
            best["remote"] = max(best["remote"], remote())
            best["ray"] = max(best["ray"], ray_transfer())
            best["local"] = max(best["local"], local())
            best["raw"] = max(best["raw"], raw_read())
            ctx.progress(
                f"  fetch {attempt + 1}/{repeats}: remote {best['remote']:,.0f} vs ray {best['ray']:,.0f} MB/s; "
                f"local {best['local']:,.0f} vs raw read {best['raw']:,.0f} MB/s"
            )
    finally:
        ray.kill(holder)
    return [
        throughput_figure(
            "fetch_remote",
            best["remote"],
            "MB/s",
            "Ray object store, actor -> driver (same chunks)",
            best["ray"],
            REMOTE_GOAL_RATIO,
            f"ratio >= {REMOTE_GOAL_RATIO} ({BULK_FETCH_MAX_BYTES >> 20} MiB fetches, zero copy)",
        ),
        throughput_figure(
            "fetch_local",
            best["local"],
            "MB/s",
            f"raw pread of the segment files ({RAW_READ_CHUNK_BYTES >> 20} MiB chunks)",
            best["raw"],
            LOCAL_GOAL_RATIO,
            f"ratio >= {LOCAL_GOAL_RATIO} ({BULK_FETCH_MAX_BYTES >> 20} MiB located, mapped from the page cache)",
        ),
    ]


def _filled_partition(ctx: BenchContext, broker: Any, batches: int) -> tuple[Any, str]:
    """A new one-partition topic holding `batches` ~1 MB batches; its actor handle and node."""
    import ray

    from actors import Admin
    from storage.records.record_batch import RecordBatchBuilder

    name = f"bench-fetch-{uuid.uuid4().hex[:8]}"
    batch_bytes = RECORDS_PER_BATCH * (VALUE_BYTES + 10)
    Admin(broker).create_topic(name, 1, {"segment.bytes": str(batches * batch_bytes // SEGMENTS)})
    handle = broker.partition(name, 0)
    builder = RecordBatchBuilder()
    value = os.urandom(VALUE_BYTES)
    now_ms = time.time_ns() // 1_000_000
    for _ in range(RECORDS_PER_BATCH):
        builder.append(None, value, timestamp=now_ms)
    batch = ray.put(builder.build())
    with timer() as elapsed:
        ray.get([handle.append.remote(batch) for _ in range(batches)])
    ctx.progress(f"  fetch: filled {name} with {batches} batches in {elapsed():.1f} s")
    return handle, broker.node_of(name, 0)


def _whole_batch_bytes(records: Any) -> int:
    """The bytes of a fetch's whole batches, walked as a consumer walks them (a fetch may end inside a batch,
    which the next fetch returns again)."""
    from storage.records.file_records import iter_any_batches

    return sum(batch.size_in_bytes for batch in iter_any_batches(records))


def _chunk_holder_class() -> Any:
    """The baseline's actor class, defined here so that Ray ships it by value (workers need not import
    `benchmarks`)."""
    import ray

    class ChunkHolder:
        """Holds one buffer per chunk size; `get(size)` returns it, through Ray's object store (> 100 KiB)."""

        def __init__(self, sizes: list[int]) -> None:
            self._chunks = {size: os.urandom(size) for size in sizes}

        def get(self, size: int) -> bytes:
            return self._chunks[size]

    return ray.remote(ChunkHolder)

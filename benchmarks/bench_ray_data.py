"""Ray Data over topics: `read_topic` and `write_topic` against Ray Data's own Kafka connectors through the Kafka
listener, and against Parquet, on the same rows in the same run.

| figure           | ours                                            | baseline                                        |
|------------------|-------------------------------------------------|-------------------------------------------------|
| `ray_data_read`  | rows/s of `read_topic(topic).materialize()`     | `ray.data.read_kafka(topic, bootstrap_servers=  |
|                  |                                                 | listener).materialize()`; goal text: against    |
|                  |                                                 | `ray.data.read_parquet` of the same rows too    |
| `ray_data_write` | rows/s of `write_topic(ds, topic, key="user",   | `ds.write_kafka(topic, listener,                |
|                  | value_format="json")`                           | key_field="user")` (JSON rows, its default)     |

Rows: those of `spark_ingest` (`benchmarks.bench_spark.prepare`): `ROWS` page views (`QUICK_ROWS` with --quick),
a 16-byte key and a ~60-byte msgpack value, in 8 partitions, and the same rows as one uncompressed Parquet file
per partition (not timed). Each read is timed from planning to the materialized Dataset (`materialize()`: every
block built and in the object store); the reads are interleaved, best of N each, and their row counts must be
equal. `read_kafka` runs as users run it (one task per partition, its consumer defaults), through a listener actor
as `raybroker start` runs one on each node (`start_kafka_listeners`; in this process, the listener shared the GIL
with the driver running Ray Data, and librdkafka's producers timed out flushing into it).

The written rows are the page views as a materialized Dataset of Python rows (`from_items`, `WRITE_BLOCKS` blocks):
both sinks write one JSON object per row keyed by the user (write_topic leaves the key column out of the value,
write_kafka keeps it), each into a topic of its own of 8 partitions, timed until the write returned (every record
acknowledged); interleaved, best of N, and after each write its topic must hold every row written so far.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from benchmarks.bench_spark import FEW_PARTITIONS, PAGES, ROWS, USERS, prepare
from benchmarks.common import BenchContext, Figure, best_rates, throughput_figure, timer

REPEATS = 3
# --quick runs each read and write once: a smoke run whose figures include each side's first-run warm-up (the
# full run takes the best of `REPEATS`).
QUICK_REPEATS = 1
# --quick rows: a tenth of `spark_ingest`'s 100k. At 100k this module's --quick run took 269 s with nothing else
# running, most of it in the four writes (write_kafka writes ~800 rows/s through the listener under load); at 20k
# it takes 195 s under a load average of 20, 104 s of them writing.
QUICK_ROWS = 10_000
READ_GOAL = 3.0
PARQUET_GOAL = 0.8
WRITE_GOAL = 3.0
# Blocks of the written Dataset, and write tasks run at once by either sink: one per core. With 8 at once,
# write_kafka's tasks failed its 30 s flush timeout with every core busy (1,335 of 12,500 messages
# still in flight), librdkafka's producers and the listener competing for the cores.
WRITE_BLOCKS = 8
WRITE_CONCURRENCY = 2
# write_kafka's tasks produce a whole block into librdkafka's queue, then give the final flush 30 s (Ray Data's
# `_FLUSH_TIMEOUT_S`): at 1M rows, 125,000 records a task, a task failed with 27,721 still in flight. A queue of at
# most 20,000 messages makes `produce` wait for deliveries as it goes (its BufferError path), so the flush starts
# with at most that many to deliver; the rate is still the listener's.
WRITE_KAFKA_CONFIG = {"queue.buffering.max.messages": 20_000}


def run(ctx: BenchContext) -> list[Figure]:
    import ray

    from actors.clients.broker import stop_kafka_listeners
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    rows = QUICK_ROWS if ctx.quick else ROWS
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    ctx.environment.broker()
    ray.data.DataContext.get_current().enable_progress_bars = False
    topic, parquet_dir = prepare(ctx, FEW_PARTITIONS, rows)
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0"})
    servers = start_kafka_listeners(config, ray.get_runtime_context().get_node_id()).bootstrap_servers
    try:
        read = _read(ctx, topic, str(parquet_dir), servers, rows, repeats)
        write = _write(ctx, servers, rows, repeats)
    finally:
        stop_kafka_listeners()
    return [read, write]


def _read(ctx: BenchContext, topic: str, parquet_dir: str, servers: str, rows: int, repeats: int) -> Figure:
    import ray

    from cluster.data import read_topic

    reads = {
        "read_topic": lambda: read_topic(topic).materialize(),
        "read_kafka": lambda: ray.data.read_kafka(topic, bootstrap_servers=servers).materialize(),
        "read_parquet": lambda: ray.data.read_parquet(parquet_dir).materialize(),
    }
    best, datasets = best_rates(reads, repeats, rows)
    counts = {name: dataset.count() for name, dataset in datasets.items()}
    if set(counts.values()) != {rows}:
        raise AssertionError(f"{topic}: the reads returned different row counts: {counts} (wanted {rows})")
    ctx.progress(
        f"  read {rows} rows: read_topic {best['read_topic']:,.0f} rows/s, read_kafka {best['read_kafka']:,.0f}, "
        f"read_parquet {best['read_parquet']:,.0f}"
    )
    parquet_ratio = best["read_topic"] / best["read_parquet"]
    figure = throughput_figure(
        "ray_data_read",
        best["read_topic"],
        "rows/s",
        "ray.data.read_kafka",
        best["read_kafka"],
        READ_GOAL,
        f"ratio >= {READ_GOAL} and >= {PARQUET_GOAL}x read_parquet (read_parquet {best['read_parquet']:,.0f} "
        f"rows/s: {parquet_ratio:.2f}x; {FEW_PARTITIONS} partitions, {rows} rows)",
    )
    return dataclasses.replace(figure, met=bool(figure.met) and parquet_ratio >= PARQUET_GOAL)


def _write(ctx: BenchContext, servers: str, rows: int, repeats: int) -> Figure:
    import ray

    from actors.clients.admin import Admin
    from cluster.data import write_topic
    from cluster.data.read_planning import plan_topic_read

    users = [f"user-{user:011d}" for user in range(USERS)]
    items = [
        {"user": users[index % USERS], "page": PAGES[index % len(PAGES)], "latency_ms": index % 400, "seq": index}
        for index in range(rows)
    ]
    dataset = ray.data.from_items(items, override_num_blocks=WRITE_BLOCKS).materialize()
    del items
    writes: dict[str, Any] = {
        "write_topic": lambda topic: write_topic(
            dataset, topic, key="user", value_format="json", concurrency=WRITE_CONCURRENCY
        ),
        "write_kafka": lambda topic: dataset.write_kafka(
            topic, servers, key_field="user", producer_config=WRITE_KAFKA_CONFIG, concurrency=WRITE_CONCURRENCY
        ),
    }
    # One topic per sink for every repeat, created before the clock runs.
    topics = {name: f"ray-data-{name}-{uuid.uuid4().hex[:8]}" for name in writes}
    for topic in topics.values():
        Admin().create_topic(topic, partitions=FEW_PARTITIONS)
    best = dict.fromkeys(writes, 0.0)
    for repeat in range(repeats):
        for name, write in writes.items():
            with timer() as elapsed:
                write(topics[name])
            best[name] = max(best[name], rows / elapsed())
            written = sum(plan_topic_read(topics[name]).end_offsets.values())
            if written != rows * (repeat + 1):
                raise AssertionError(f"{name}: {topics[name]} holds {written} records after {repeat + 1} writes")
    ctx.progress(
        f"  wrote {rows} rows: write_topic {best['write_topic']:,.0f} rows/s, write_kafka {best['write_kafka']:,.0f}"
    )
    return throughput_figure(
        "ray_data_write",
        best["write_topic"],
        "rows/s",
        "Dataset.write_kafka",
        best["write_kafka"],
        WRITE_GOAL,
        f"ratio >= {WRITE_GOAL} (JSON rows keyed by user, {FEW_PARTITIONS} partitions, {rows} rows)",
    )

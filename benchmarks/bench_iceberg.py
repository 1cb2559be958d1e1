"""Topics into Iceberg tables: raybroker's translation (`cluster.iceberg.translation`) against what Ray Data offers
for the same job, `ray.data.read_kafka(...).write_iceberg(...)`, on the same records in the same run; and Spark's scan
of the table it wrote (`iceberg_scan`, `benchmarks.iceberg_scan`).

| figure              | ours                                         | baseline                                        |
|---------------------|----------------------------------------------|-------------------------------------------------|
| `iceberg_lag_p99`   | ms from a record's append to the commit of   | none (absolute goal): p99 <= the topic's        |
|                     | the snapshot holding it, p99 over every      | `iceberg.target.lag.ms` (`LAG_TARGET_MS`) at    |
|                     | record, the translation driver running while | `OFFERED_MB_S` offered                          |
|                     | a producer offers `OFFERED_MB_S` for         |                                                 |
|                     | `LAG_RUN_S`                                  |                                                 |
| `iceberg_translate` | MB/s of record keys and values committed     | `ray.data.read_kafka(topic, bootstrap_servers=  |
|                     | into a `key_value` table by one translation  | listener).drop_columns(["headers"])             |
|                     | round (`translate_once`: read_committed from | .materialize().write_iceberg(table)` into a     |
|                     | the segments, Parquet written in Ray tasks,  | table of read_kafka's other columns, through a  |
|                     | one Iceberg commit)                          | listener actor as `raybroker start` runs one    |

The baseline leaves out `read_kafka`'s `headers` column and materializes the rest before writing, the shortest way
found that works in Ray 2.60: records without headers make `read_kafka` blocks whose `headers` is an empty struct,
which `write_iceberg` adds to the table (it evolves the table's schema from the first block its fused read gives it,
also past a `drop_columns` or `map_batches`) and Parquet cannot hold ("Cannot write struct type 'headers' with no
child field"); a table declaring `headers` as `read_kafka`'s map is refused ("Expected a struct, got: map"). Our
table keeps the headers.

Records: `spark_ingest`'s page views (`benchmarks.bench_spark.prepare`: a 16-byte key and a ~60-byte msgpack value)
in `PARTITIONS` partitions, `ROWS` of them (`QUICK_ROWS` with --quick). Both write into the same catalog (pyiceberg's
SQL catalog on SQLite with a file warehouse in the run's work dir, the broker's embedded default), each run into a
table of its own made before the clock starts; a run is timed until its commit returned. The sides alternate, best of
`REPEATS` each, and each table must then hold every record once.

The lag: the cluster's translation driver (`start_iceberg_driver`, its catalog in the work dir) translates a topic of
`PARTITIONS` partitions in `key_value` mode with `iceberg.target.lag.ms` = `LAG_TARGET_MS` while one producer thread
(the Python `Producer`, 1 KB values) offers `OFFERED_MB_S` for `LAG_RUN_S`, paced in steps of 10 ms. Once the table
holds every record, each record's lag is the commit time of the first snapshot whose offsets (its summary's
`raybroker.offsets`) pass it, less the record's timestamp: the time the broker appended it (the topic's
`message.timestamp.type` is LogAppendTime), so the figure is the table's lag behind the log, not the producer's
queueing too. The goal is met when the p99 is
within the target and the producer got the offered rate through; the figure's goal text says what it got.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
import uuid
from typing import Any

from benchmarks.bench_spark import prepare
from benchmarks.common import BenchContext, Figure, absolute_figure, percentile, throughput_figure, timer
from benchmarks.iceberg_scan import scan_figure

PARTITIONS = 16
LAG_TARGET_MS = 10_000
QUICK_LAG_TARGET_MS = 3_000
OFFERED_MB_S = 50.0
QUICK_OFFERED_MB_S = 2.0
LAG_RUN_S = 60.0
QUICK_LAG_RUN_S = 10.0
LAG_VALUE = b"x" * 1000
# The producer got the offered load through when it wrote at least this share of it.
OFFERED_SHARE = 0.9
CATCH_UP_S = 300.0
ROWS = 500_000
QUICK_ROWS = 20_000
REPEATS = 3
QUICK_REPEATS = 1
GOAL_RATIO = 3.0
NAMESPACE = "bench"


def run(ctx: BenchContext) -> list[Figure]:
    import ray

    from actors.clients.broker import stop_kafka_listeners
    from cluster.iceberg.catalog import CATALOG_NAME, catalog_properties, open_catalog
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    rows = QUICK_ROWS if ctx.quick else ROWS
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    broker = ctx.environment.broker()
    ray.data.DataContext.get_current().enable_progress_bars = False
    topic, _ = prepare(ctx, PARTITIONS, rows)
    home = ctx.scratch("iceberg")
    properties = catalog_properties(BrokerConfig.from_properties({"log.dirs": str(home / "meta")}))
    catalog = open_catalog(properties)
    catalog.create_namespace(NAMESPACE)
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0"})
    servers = start_kafka_listeners(config, ray.get_runtime_context().get_node_id()).bootstrap_servers
    catalog_kwargs = {"name": CATALOG_NAME, **properties}
    try:
        best = {"translate_once": 0.0, "write_iceberg": 0.0}
        payload = 0
        for repeat in range(repeats):
            ours = _ours_table(catalog, repeat)
            with timer() as elapsed:
                _translate(topic, ours, broker)
            best["translate_once"] = max(best["translate_once"], rows / elapsed())
            payload = _checked_payload(ours.refresh(), rows, "translate_once")
            theirs = _baseline_table(catalog, repeat)
            with timer() as elapsed:
                rows_read = ray.data.read_kafka(topic, bootstrap_servers=servers).drop_columns(["headers"])
                rows_read.materialize().write_iceberg(".".join(theirs.name()), catalog_kwargs=catalog_kwargs)
            best["write_iceberg"] = max(best["write_iceberg"], rows / elapsed())
            _checked_payload(theirs.refresh(), rows, "write_iceberg")
    finally:
        stop_kafka_listeners()
    megabytes = payload / rows / 1e6
    ours_mb, theirs_mb = best["translate_once"] * megabytes, best["write_iceberg"] * megabytes
    ctx.progress(
        f"  {rows} records into Iceberg: translate_once {best['translate_once']:,.0f} records/s ({ours_mb:.1f} MB/s), "
        f"read_kafka + write_iceberg {best['write_iceberg']:,.0f} ({theirs_mb:.1f} MB/s)"
    )
    return [
        _lag(ctx, home),
        scan_figure(ctx, ours.refresh(), properties, payload),
        throughput_figure(
            "iceberg_translate",
            ours_mb,
            "MB/s",
            "ray.data.read_kafka + write_iceberg",
            theirs_mb,
            GOAL_RATIO,
            f"ratio >= {GOAL_RATIO} (key and value bytes; {PARTITIONS} partitions, {rows} records, best of {repeats})",
        ),
    ]


def _translate(topic: str, table: Any, broker: Any) -> None:
    from cluster.iceberg.translation import translate_once

    translate_once(topic, table, broker)


def _ours_table(catalog: Any, repeat: int) -> Any:
    from cluster.iceberg.key_value_table import load_or_create_table

    return load_or_create_table(catalog, (NAMESPACE, f"translate_{repeat}_{uuid.uuid4().hex[:6]}"), "")


def _baseline_table(catalog: Any, repeat: int) -> Any:
    """A table of `read_kafka`'s columns but its headers, which `write_iceberg` appends to (it creates none)."""
    from ray.data._internal.datasource.kafka_datasource import KAFKA_MSG_SCHEMA

    schema = KAFKA_MSG_SCHEMA.remove(KAFKA_MSG_SCHEMA.get_field_index("headers"))
    return catalog.create_table((NAMESPACE, f"write_iceberg_{repeat}_{uuid.uuid4().hex[:6]}"), schema=schema)


def _checked_payload(table: Any, rows: int, name: str) -> int:
    """The key and value bytes of the table's rows; `AssertionError` unless it holds `rows` distinct records."""
    import pyarrow.compute as pc

    data = table.scan(selected_fields=("partition", "offset", "key", "value")).to_arrow()
    distinct = data.group_by(["partition", "offset"]).aggregate([]).num_rows
    if data.num_rows != rows or distinct != rows:
        raise AssertionError(f"{name}: the table holds {data.num_rows} rows, {distinct} distinct (wanted {rows})")
    return int(pc.sum(pc.binary_length(data["key"])).as_py()) + int(pc.sum(pc.binary_length(data["value"])).as_py())


def _lag(ctx: BenchContext, home: Any) -> Figure:
    """`iceberg_lag_p99` (see the module docstring)."""
    from actors.clients.admin import Admin
    from cluster.iceberg.catalog import catalog_properties, open_catalog
    from cluster.iceberg.translation_driver_actor import iceberg_driver_status, start_iceberg_driver
    from storage.config.broker_config import BrokerConfig

    target_ms = QUICK_LAG_TARGET_MS if ctx.quick else LAG_TARGET_MS
    offered = QUICK_OFFERED_MB_S if ctx.quick else OFFERED_MB_S
    run_s = QUICK_LAG_RUN_S if ctx.quick else LAG_RUN_S
    lag_home = home / "lag"
    config = BrokerConfig.from_properties({"log.dirs": str(lag_home / "meta")})
    properties = catalog_properties(config)
    topic = f"iceberg-lag-{uuid.uuid4().hex[:8]}"
    lag_config = {
        "iceberg.mode": "key_value",
        "iceberg.target.lag.ms": str(target_ms),
        "message.timestamp.type": "LogAppendTime",
    }
    Admin().create_topic(topic, PARTITIONS, config=lag_config)
    start_iceberg_driver(config)
    written = _offer(topic, offered, run_s)
    achieved = written * len(LAG_VALUE) / run_s / 1e6
    deadline = time.monotonic() + CATCH_UP_S
    while sum(p.table_offset for s in iceberg_driver_status(topic) for p in s.partitions) < written:
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: the table did not catch up: {iceberg_driver_status(topic)}")
        time.sleep(0.5)
    table = open_catalog(properties).load_table(("raybroker", topic))
    lags = _record_lags(table, written)
    commits = sorted(snapshot.timestamp_ms for snapshot in table.snapshots())
    gaps = [later - earlier for earlier, later in itertools.pairwise(commits)]
    apart_s = (statistics.median(gaps) / 1000, max(gaps) / 1000) if gaps else (0.0, 0.0)
    cadence = f"{len(commits)} commits, {apart_s[0]:.1f} s apart (longest {apart_s[1]:.1f} s)"
    Admin().delete_topic(topic)  # The driver, idle then, runs on with the broker the later benchmarks share.
    p99, p50 = percentile(lags, 0.99), percentile(lags, 0.5)
    ctx.progress(
        f"  Iceberg lag at {achieved:.1f} MB/s produced ({offered} offered, target {target_ms} ms): p50 {p50:.0f} ms, "
        f"p99 {p99:.0f} ms over {written} records; {cadence}"
    )
    met = p99 <= target_ms and achieved >= OFFERED_SHARE * offered
    return absolute_figure(
        "iceberg_lag_p99",
        p99,
        "ms",
        f"p99 <= iceberg.target.lag.ms ({target_ms} ms) at {offered:g} MB/s offered ({achieved:.1f} MB/s produced, "
        f"{PARTITIONS} partitions, {run_s:g} s; p50 {p50:.0f} ms; {cadence})",
        met,
    )


def _offer(topic: str, mb_s: float, run_s: float) -> int:
    """Sends `LAG_VALUE` records at `mb_s` for `run_s`, paced every 10 ms; how many were acknowledged."""
    from actors.clients.producer import Producer

    per_step = mb_s * 1e6 / len(LAG_VALUE) / 100
    sent = 0
    began = time.monotonic()
    with Producer(linger_ms=5) as producer:
        while (elapsed := time.monotonic() - began) < run_s:
            due = int(per_step * (elapsed * 100 + 1))
            for _ in range(due - sent):
                producer.send(topic, value=LAG_VALUE)
            sent = max(sent, due)
            time.sleep(max(0.0, began + (elapsed * 100 + 1) / 100 - time.monotonic()))
        producer.flush()
    return sent


def _record_lags(table: Any, written: int) -> list[float]:
    """Each row's lag in ms (see the module docstring), ascending; `AssertionError` unless the table holds `written`
    rows."""
    import numpy as np

    from cluster.iceberg.translation import OFFSETS_PROPERTY

    rows = table.scan(selected_fields=("partition", "offset", "timestamp")).to_arrow()
    if rows.num_rows != written:
        raise AssertionError(f"the lag table holds {rows.num_rows} rows, {written} were written")
    commits = sorted(
        (snapshot.timestamp_ms, json.loads(snapshot.summary.additional_properties[OFFSETS_PROPERTY]))
        for snapshot in table.snapshots()
        if snapshot.summary is not None and OFFSETS_PROPERTY in snapshot.summary.additional_properties
    )
    partitions = rows.column("partition").to_numpy()
    offsets = rows.column("offset").to_numpy()
    stamps = rows.column("timestamp").cast("int64").to_numpy() / 1000.0
    lags = np.empty(rows.num_rows)
    for partition in np.unique(partitions):
        ends = np.array([int(summary.get(str(partition), 0)) for _, summary in commits])
        times = np.array([committed for committed, _ in commits], dtype=float)
        mine = partitions == partition
        index = np.searchsorted(ends, offsets[mine], side="right")
        lags[mine] = times[index] - stamps[mine]
    return sorted(lags.tolist())

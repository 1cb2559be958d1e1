"""Topics into Iceberg tables: raybroker's translation (`cluster.iceberg.translation`) against what Ray Data offers
for the same job, `ray.data.read_kafka(...).write_iceberg(...)`, on the same records in the same run.

| figure              | ours                                         | baseline                                        |
|---------------------|----------------------------------------------|-------------------------------------------------|
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
"""

from __future__ import annotations

import uuid
from typing import Any

from benchmarks.bench_spark import prepare
from benchmarks.common import BenchContext, Figure, throughput_figure, timer

PARTITIONS = 16
ROWS = 500_000
QUICK_ROWS = 20_000
REPEATS = 3
QUICK_REPEATS = 1
GOAL_RATIO = 3.0
NAMESPACE = "bench"


def run(ctx: BenchContext) -> list[Figure]:
    import ray

    from actors.clients.broker import stop_kafka_listeners
    from cluster.iceberg.catalog import CATALOG_NAME, open_catalog
    from cluster.protocol.listener_actor import start_kafka_listeners
    from storage.config.broker_config import BrokerConfig

    rows = QUICK_ROWS if ctx.quick else ROWS
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    broker = ctx.environment.broker()
    ray.data.DataContext.get_current().enable_progress_bars = False
    topic, _ = prepare(ctx, PARTITIONS, rows)
    home = ctx.scratch("iceberg")
    properties = {"type": "sql", "uri": f"sqlite:///{home / 'catalog.db'}", "warehouse": (home / "wh").as_uri()}
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
        throughput_figure(
            "iceberg_translate",
            ours_mb,
            "MB/s",
            "ray.data.read_kafka + write_iceberg",
            theirs_mb,
            GOAL_RATIO,
            f"ratio >= {GOAL_RATIO} (key and value bytes; {PARTITIONS} partitions, {rows} records, best of {repeats})",
        )
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

"""`iceberg_scan`: Spark reading a topic's Iceberg table through Iceberg's own Spark runtime, against Spark reading a
plain Parquet copy of the same data files, in the same session and run (`bench_iceberg` calls it on the table its
translation wrote).

| figure         | ours                                            | baseline                                        |
|----------------|-------------------------------------------------|-------------------------------------------------|
| `iceberg_scan` | MB/s of record keys and values scanned by       | the same query over `spark.read.parquet(copy)`, |
|                | `spark.table("raybroker.<ns>.<table>")`         | the table's data files copied to a folder of    |
|                | (Iceberg's Spark runtime, the broker's catalog  | their own: no catalog, no manifests             |
|                | registered by `cluster.spark.iceberg_runtime`)  |                                                 |

The query reads every record column but the headers and aggregates per partition (count, key and value bytes, the
last offset, the first timestamp), so Spark decodes them all and returns a few rows; both sides must give the same
answer. Each side runs once untimed first (its first query took 2-5 s, against 0.3-1 s later: the JVM's JIT and class
loading), then the sides alternate, best of `REPEATS` (`QUICK_REPEATS` with --quick). The goal: the table is scanned at
least as fast as its files alone (`GOAL_RATIO`): the catalog and the manifests cost nothing that counts.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from benchmarks.common import BenchContext, Figure, best_rates, throughput_figure

REPEATS = 5
QUICK_REPEATS = 2
GOAL_RATIO = 1.0


def scan_figure(ctx: BenchContext, table: Any, properties: Mapping[str, str], payload: int) -> Figure:
    """`iceberg_scan` over `table` (a pyiceberg table of the catalog of `properties` holding `payload` bytes of keys
    and values); see the module docstring."""
    from benchmarks.bench_spark import start_spark
    from cluster.spark.iceberg_runtime import register_iceberg_catalog, spark_table_name

    spark = start_spark(ctx)
    register_iceberg_catalog(spark, properties)
    copy = _parquet_copy(ctx, table)
    name = spark_table_name(table.name())
    rows = table.current_snapshot().summary.additional_properties.get("total-records")
    repeats = QUICK_REPEATS if ctx.quick else REPEATS
    runs = {"iceberg": lambda: _query(spark.table(name)), "parquet": lambda: _query(spark.read.parquet(str(copy)))}
    for run in runs.values():  # Untimed: the first query of each side took 2-5 s here (the JVM's JIT, class loading).
        run()
    rates, answers = best_rates(runs, repeats, 1)
    if answers["iceberg"] != answers["parquet"]:
        raise AssertionError(f"iceberg_scan: the table answered {answers['iceberg']}, its files {answers['parquet']}")
    ours_mb, theirs_mb = rates["iceberg"] * payload / 1e6, rates["parquet"] * payload / 1e6
    ctx.progress(f"  Spark scan of {rows} records: Iceberg table {ours_mb:.1f} MB/s, its Parquet files {theirs_mb:.1f}")
    return throughput_figure(
        "iceberg_scan",
        ours_mb,
        "MB/s",
        "spark.read.parquet of the table's files",
        theirs_mb,
        GOAL_RATIO,
        f"ratio >= {GOAL_RATIO} (key and value bytes; {rows} records, best of {repeats})",
    )


def _parquet_copy(ctx: BenchContext, table: Any) -> Path:
    """A new folder holding a copy of each data file of the table's current snapshot."""
    folder = ctx.scratch("iceberg-parquet")
    for task in table.scan().plan_files():
        source = Path(urlparse(task.file.file_path).path)
        shutil.copyfile(source, folder / source.name)
    return folder


def _query(frame: Any) -> list[tuple[Any, ...]]:
    """The per-partition aggregate both sides run (see the module docstring), its rows sorted."""
    from pyspark.sql import functions as F

    aggregated = frame.groupBy("partition").agg(
        F.count("*"),
        F.sum(F.length("key")),
        F.sum(F.length("value")),
        F.max("offset"),
        F.min("timestamp"),
        F.countDistinct("timestamp_type"),
    )
    return sorted(tuple(row) for row in aggregated.collect())

"""One read over a topic's Iceberg table and its log: `read_topic(..., history="table")`.

A topic kept as a `key_value` Iceberg table (`iceberg.mode`, `cluster.iceberg`) has its history in the table, also
past the log's retention. This read takes each topic's table at its current snapshot, whose summary says up to which
offset of each partition the table holds the committed records (`cluster.iceberg.topic_tables`), and
the log from those offsets on (a partition the table has nothing of, from the log start), and gives them as one
Dataset with `read_topic`'s rows: the table's rows turned back into the Kafka schema (`topic` added, its
`timestamp_type` as `timestampType`) and decoded by the same `ReadSettings` as the log's. The snapshot and the log's
ends are fixed when the read is planned, so it equals a full read of the topic while the log still holds it all:
each record once, the table's and the log's parts meeting at the snapshot's offsets.

The table is read with Ray Data's `read_iceberg` at that snapshot, through the catalog the broker's translation
driver uses (its properties asked of the driver actor: `iceberg_catalog_properties`). What such a read accepts:
the whole history (`start` "earliest") up to where a read_committed read ends (`end` "latest"), the table holding
committed records only; other bounds, isolation levels and table modes (`value_json`, `value_msgpack`, whose
tables hold parsed columns) are refused with `InvalidRequestError` before anything is read. A topic whose table
has no snapshot yet is read from its log alone. Records deleted from the log before they reached the table are data
loss, as for any read (`fail_on_data_loss`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import pyarrow as pa
import ray
from ray.data import Dataset

from cluster.data.datasource import ReadSettings, read_plan, read_settings
from cluster.data.read_planning import Bound, plan_topic_read
from cluster.iceberg.catalog import CATALOG_NAME
from cluster.iceberg.topic_tables import table_snapshots
from cluster.iceberg.translation_driver_actor import iceberg_catalog_properties
from cluster.records.arrow_records import kafka_arrow_schema
from cluster.records.isolation import READ_COMMITTED
from storage.errors import InvalidRequestError


def read_table_and_tail(
    topics: str | Sequence[str],
    *,
    start: Bound,
    end: Bound,
    isolation: str,
    columns: Sequence[str] | None,
    value_format: str,
    value_schema: pa.DataType | pa.Schema | None,
    fail_on_data_loss: bool,
    override_num_blocks: int | None,
) -> Dataset:
    """The topics' tables and the logs after them, as one Dataset (see the module docstring)."""
    if start != "earliest" or end != "latest" or isolation != READ_COMMITTED:
        raise InvalidRequestError(
            "history='table' reads the whole history a read_committed read sees: start='earliest', end='latest' "
            f"and isolation='read_committed' (got start={start!r}, end={end!r}, isolation={isolation!r})"
        )
    names = [topics] if isinstance(topics, str) else list(topics)
    properties = iceberg_catalog_properties()
    snapshots = table_snapshots(names, properties)
    tail_starts = {topic: snapshot.offsets for topic, snapshot in snapshots.items() if snapshot.offsets}
    plan = plan_topic_read(names, start=tail_starts, end=end, isolation=isolation, fail_on_data_loss=fail_on_data_loss)
    settings = read_settings(
        plan, columns=columns, value_format=value_format, value_schema=value_schema, fail_on_data_loss=fail_on_data_loss
    )
    parts = [read_plan(plan, settings, override_num_blocks)]
    catalog_kwargs = {"name": CATALOG_NAME, **properties}
    for topic, snapshot in sorted(snapshots.items()):
        table = ray.data.read_iceberg(
            table_identifier=snapshot.identifier, snapshot_id=snapshot.snapshot_id, catalog_kwargs=catalog_kwargs
        )
        parts.append(table.map_batches(partial(_kafka_rows, topic, settings), batch_format="pyarrow"))
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def _kafka_rows(topic: str, settings: ReadSettings, rows: pa.Table) -> pa.Table:
    """A block of a topic's table as `read_topic`'s rows: the Kafka schema's columns (`topic` added, the table's
    `timestamp_type` as `timestampType`), decoded by the read's settings."""
    schema = kafka_arrow_schema(settings.include_headers)
    columns = {
        "key": rows.column("key"),
        "value": rows.column("value"),
        "topic": pa.array([topic] * rows.num_rows, pa.string()),
        "partition": rows.column("partition"),
        "offset": rows.column("offset"),
        "timestamp": rows.column("timestamp"),
        "timestampType": rows.column("timestamp_type"),
    }
    if settings.include_headers:
        columns["headers"] = rows.column("headers")
    kafka = pa.table([columns[field.name] for field in schema], names=schema.names).cast(schema)
    batches = kafka.combine_chunks().to_batches()
    if not batches:
        return settings.schema.empty_table()
    return pa.concat_tables([settings.rows(batch) for batch in batches])

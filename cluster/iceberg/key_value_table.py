"""A topic's Iceberg table in `key_value` mode: its schema, its partition spec, and record batches made its rows.

| column         | Iceberg type                                   | from the record                             |
|----------------|------------------------------------------------|---------------------------------------------|
| partition      | int                                            | its partition                               |
| offset         | long                                           | its offset                                  |
| timestamp      | timestamptz (us)                               | its timestamp (ms, as microseconds)         |
| timestamp_type | int                                            | 0 CreateTime, 1 LogAppendTime, -1 magic 0   |
| key            | binary                                         | its key, any bytes (null: no key)           |
| value          | binary                                         | its value, any bytes (null: a tombstone)    |
| headers        | list<struct<key: string, value: binary>>       | its headers (null when it has none)         |

Every column is optional, as the Arrow columns decoded from the log are nullable (a required Iceberg field would
refuse them). `(partition, offset)` identifies a row: the translation writes each record once. The partition spec is
`iceberg.partition.spec`'s terms (`storage.config.iceberg_topic_config`) as Iceberg's transforms.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from storage.config.iceberg_topic_config import PartitionTerm, parse_partition_spec
from storage.config.iceberg_value_schema import ValueColumn

KEY_VALUE_SCHEMA = Schema(
    NestedField(1, "partition", IntegerType(), required=False),
    NestedField(2, "offset", LongType(), required=False),
    NestedField(3, "timestamp", TimestamptzType(), required=False),
    NestedField(4, "timestamp_type", IntegerType(), required=False),
    NestedField(5, "key", BinaryType(), required=False),
    NestedField(6, "value", BinaryType(), required=False),
    NestedField(
        7,
        "headers",
        ListType(
            8,
            StructType(
                NestedField(9, "key", StringType(), required=False),
                NestedField(10, "value", BinaryType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
    ),
)
# The first id of a partition field, as Iceberg numbers them.
_FIRST_PARTITION_FIELD_ID = 1000


def partition_spec(
    text: str, schema: Schema = KEY_VALUE_SCHEMA, value_columns: tuple[ValueColumn, ...] | None = None
) -> PartitionSpec:
    """`iceberg.partition.spec`'s value as an Iceberg partition spec over `KEY_VALUE_SCHEMA`, or over a value mode's
    schema and its value columns."""
    fields = []
    for index, term in enumerate(parse_partition_spec(text, value_columns)):
        source = schema.find_field(term.column)
        name = term.column if term.transform == "identity" else f"{term.column}_{term.transform}"
        fields.append(PartitionField(source.field_id, _FIRST_PARTITION_FIELD_ID + index, _transform(term), name))
    return PartitionSpec(*fields)


def load_or_create_table(catalog: Catalog, identifier: tuple[str, str], spec_text: str) -> Table:
    """The topic's `key_value` table, created (with its namespace) on first use with the schema and partition
    spec."""
    return create_table(catalog, identifier, KEY_VALUE_SCHEMA, partition_spec(spec_text))


def create_table(catalog: Catalog, identifier: tuple[str, str], schema: Schema, spec: PartitionSpec) -> Table:
    """The table, created (with its namespace) on first use with `schema` and `spec`."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(identifier[0])
    return catalog.create_table(identifier, schema=schema, partition_spec=spec)


def table_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A decoded batch (`cluster.records.arrow_records`, with headers) as the table's columns (pyiceberg matches
    them to the schema by name when it writes them)."""
    columns = ("partition", "offset", "timestamp", "timestampType", "key", "value", "headers")
    return pa.RecordBatch.from_arrays(
        [batch.column(name) for name in columns], names=[field.name for field in KEY_VALUE_SCHEMA.fields]
    )


def _transform(term: PartitionTerm) -> Transform[Any, Any]:
    transforms: dict[str, Transform[Any, Any]] = {
        "identity": IdentityTransform(),
        "year": YearTransform(),
        "month": MonthTransform(),
        "day": DayTransform(),
        "hour": HourTransform(),
    }
    if term.transform == "bucket":
        return BucketTransform(term.width)
    if term.transform == "truncate":
        return TruncateTransform(term.width)
    return transforms[term.transform]

"""A topic's Iceberg table in the value modes (`value_json`, `value_msgpack`), and its dead-letter table.

The table's columns: the record's own, then the value's (`iceberg.value.schema`, `storage.config.iceberg_value_schema`):

| column     | Iceberg type     | from the record                                                          |
|------------|------------------|--------------------------------------------------------------------------|
| partition  | int              | its partition                                                            |
| offset     | long             | its offset                                                               |
| timestamp  | timestamptz (us) | its timestamp                                                            |
| (value's)  | as declared      | the value's field of that name (absent or null: null; required: a dead letter) |

A record whose value does not fit (not JSON / msgpack, not an object / a map, a field of the wrong type or out of
range, a required field absent, no value at all) becomes a row of the dead-letter table `<table>_dlq`: the
`key_value` columns (`cluster.iceberg.key_value_table`: its key, value and headers as bytes) and `error`, the reason.
Fields the schema does not name are ignored. `(partition, offset)` identifies a row in either table; each record
lands in exactly one of them (`cluster.iceberg.translation` commits both). The table's columns only grow with the
config, and widen as Iceberg promotes types (`evolve`).

Values are decoded record by record in Python (`json.loads`, `msgpack.unpackb`): column-wise decoding is left for
when the throughput is measured.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from cluster.iceberg.key_value_table import KEY_VALUE_SCHEMA, create_table, partition_spec, table_rows
from storage.config.iceberg_value_schema import ValueColumn, parse_value_schema
from storage.errors import IcebergCatalogError

DEAD_LETTER_SUFFIX = "_dlq"
ERROR_COLUMN = "error"
DEAD_LETTER_SCHEMA = Schema(
    *KEY_VALUE_SCHEMA.fields,
    NestedField(KEY_VALUE_SCHEMA.highest_field_id + 1, ERROR_COLUMN, StringType(), required=False),
)
_RECORD_FIELDS = (
    NestedField(1, "partition", IntegerType(), required=False),
    NestedField(2, "offset", LongType(), required=False),
    NestedField(3, "timestamp", TimestamptzType(), required=False),
)
_ICEBERG_TYPES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamptz": TimestamptzType(),
}
_ARROW_TYPES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
_INT_BOUNDS = {"int": 2**31, "long": 2**63}
# The type changes Iceberg applies to a column whose rows are written (its spec's type promotions, of the types a
# value schema declares).
PROMOTIONS = (("int", "long"), ("float", "double"))
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class UnfitValueError(Exception):
    """A value that does not fit the schema; its message is the dead-letter row's `error`."""


def value_schema(columns: tuple[ValueColumn, ...]) -> Schema:
    """The table's schema: the record's columns, then the value's (ids in the schema's order)."""
    fields = [
        NestedField(len(_RECORD_FIELDS) + index + 1, column.name, _ICEBERG_TYPES[column.type], required=column.required)
        for index, column in enumerate(columns)
    ]
    return Schema(*_RECORD_FIELDS, *fields)


def dead_letter_identifier(identifier: tuple[str, str]) -> tuple[str, str]:
    """`<table>_dlq` in the table's namespace."""
    return identifier[0], identifier[1] + DEAD_LETTER_SUFFIX


def load_or_create_value_tables(
    catalog: Catalog, identifier: tuple[str, str], mode: str, value_schema_text: str, spec_text: str
) -> tuple[Table, Table, ValueRows]:
    """A value mode topic's table and dead-letter table, created on first use (the dead-letter table unpartitioned:
    the spec may name the value's columns, which it has not), and how its values become rows."""
    columns = parse_value_schema(value_schema_text)
    schema = value_schema(columns)
    table = create_table(catalog, identifier, schema, partition_spec(spec_text, schema, columns))
    dead_letters = create_table(catalog, dead_letter_identifier(identifier), DEAD_LETTER_SCHEMA, PartitionSpec())
    return table, dead_letters, ValueRows(mode.removeprefix("value_"), evolve(table, columns))


def evolve(table: Table, columns: tuple[ValueColumn, ...]) -> tuple[ValueColumn, ...]:
    """The table's value columns once `iceberg.value.schema`'s changes are applied to it, as Iceberg allows: a new
    column is added (optional: the rows already written have none), a column widened as Iceberg promotes types (int
    to long, float to double) is promoted, and a column the config no longer names stays (filled while values still
    have it), so the table's columns only grow. Any other change of a column's type, or a new column declared
    required, cannot be applied to the rows already written: `IcebergCatalogError` with the reason, which pauses the
    topic until the config is set back."""
    existing = [
        ValueColumn(field.name, str(field.field_type), field.required)
        for field in table.schema().fields[len(_RECORD_FIELDS) :]
    ]
    by_name = {column.name: column for column in existing}
    added, promoted = [], {}
    for column in columns:
        old = by_name.get(column.name)
        if old is None:
            if column.required:
                raise IcebergCatalogError(
                    f"table {table.name()}: new column {column.name!r} cannot be required (the rows written have none)"
                )
            added.append(column)
        elif old.type != column.type:
            if (old.type, column.type) not in PROMOTIONS:
                raise IcebergCatalogError(
                    f"table {table.name()}: column {column.name!r} is {old.type}, iceberg.value.schema says "
                    f"{column.type} (Iceberg widens only {', '.join(f'{a} to {b}' for a, b in PROMOTIONS)})"
                )
            promoted[column.name] = column.type
    if added or promoted:
        with table.update_schema() as update:
            for name, kind in promoted.items():
                update.update_column(name, field_type=_ICEBERG_TYPES[kind])
            for column in added:
                update.add_column(column.name, _ICEBERG_TYPES[column.type])
    widened = [ValueColumn(c.name, promoted.get(c.name, c.type), c.required) for c in existing]
    return (*widened, *added)


@dataclass(frozen=True)
class ValueRows:
    """How a value mode makes rows: the value's format (`json` or `msgpack`) and columns. Sent to the writer tasks."""

    format: str
    columns: tuple[ValueColumn, ...]

    def split(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
        """A decoded batch (`cluster.records.arrow_records`, with headers) as the table's rows and the dead-letter
        table's rows (see the module docstring)."""
        decode = _decoder(self.format)
        kept: list[int] = []
        cells: list[list[Any]] = [[] for _ in self.columns]
        dead: list[int] = []
        errors: list[str] = []
        for index, value in enumerate(batch.column("value").to_pylist()):
            try:
                row = _row(decode, value, self.columns)
            except UnfitValueError as exc:
                dead.append(index)
                errors.append(str(exc))
                continue
            kept.append(index)
            for column_cells, cell in zip(cells, row, strict=True):
                column_cells.append(cell)
        arrow_schema = value_schema(self.columns).as_arrow()
        taken = batch.take(pa.array(kept, type=pa.int64()))
        record_columns = [taken.column(name) for name in ("partition", "offset", "timestamp")]
        value_columns = [
            pa.array(column_cells, type=_ARROW_TYPES[column.type])
            for column, column_cells in zip(self.columns, cells, strict=True)
        ]
        rows = pa.RecordBatch.from_arrays(
            [*record_columns, *value_columns], schema=_arrow_schema(arrow_schema, record_columns, value_columns)
        )
        dead_rows = table_rows(batch.take(pa.array(dead, type=pa.int64())))
        dead_rows = dead_rows.append_column(ERROR_COLUMN, pa.array(errors, type=pa.string()))
        return rows, dead_rows


def _arrow_schema(schema: pa.Schema, *columns: list[pa.Array]) -> pa.Schema:
    """The table's Arrow schema with the Arrow types of the columns built (pyiceberg's `as_arrow` may name
    `large_*` types where the batch has the plain ones; the writer casts either)."""
    arrays = [array for group in columns for array in group]
    return pa.schema(
        [pa.field(field.name, array.type, nullable=field.nullable) for field, array in zip(schema, arrays, strict=True)]
    )


def _decoder(value_format: str) -> Callable[[bytes], Any]:
    if value_format == "json":
        return json.loads
    return lambda data: msgpack.unpackb(data, raw=False, strict_map_key=False)


def _row(decode: Callable[[bytes], Any], value: bytes | None, columns: tuple[ValueColumn, ...]) -> list[Any]:
    if value is None:
        raise UnfitValueError("no value (a tombstone)")
    try:
        fields = decode(value)
    except Exception as exc:  # json's ValueError, msgpack's several exception types: all mean "does not decode".
        raise UnfitValueError(f"value does not decode: {type(exc).__name__}: {exc}") from None
    if not isinstance(fields, dict):
        raise UnfitValueError(f"value is a {type(fields).__name__}, not an object")
    row: list[Any] = []
    for column in columns:
        cell = fields.get(column.name)
        if cell is None:
            if column.required:
                raise UnfitValueError(f"required field {column.name!r} is absent or null")
            row.append(None)
            continue
        row.append(_cell(column, cell))
    return row


def _cell(column: ValueColumn, cell: Any) -> Any:
    """A field's value as its column's Python value; `UnfitValueError` naming the field when it does not fit."""
    kind = column.type
    fits = False
    result: Any = cell
    if kind == "boolean":
        fits = isinstance(cell, bool)
    elif kind in _INT_BOUNDS:
        fits = isinstance(cell, int) and not isinstance(cell, bool) and -_INT_BOUNDS[kind] <= cell < _INT_BOUNDS[kind]
    elif kind in ("float", "double"):
        fits = isinstance(cell, int | float) and not isinstance(cell, bool)
        result = float(cell) if fits else cell
    elif kind == "string":
        fits = isinstance(cell, str)
    elif kind == "binary":
        fits = isinstance(cell, bytes | str)
        result = cell.encode() if isinstance(cell, str) else cell
    elif kind == "date":
        result = _parsed(datetime.date.fromisoformat, cell)
        fits = result is not None
    else:
        result = _timestamp(cell, with_zone=kind == "timestamptz")
        fits = result is not None
    if not fits:
        raise UnfitValueError(f"field {column.name!r}: {cell!r} does not fit {kind}")
    return result


def _timestamp(cell: Any, with_zone: bool) -> datetime.datetime | None:
    """ISO 8601 text (no zone: UTC) or epoch milliseconds, as a UTC datetime (naive for `timestamp`)."""
    if isinstance(cell, int) and not isinstance(cell, bool):
        try:
            moment = _EPOCH + datetime.timedelta(milliseconds=cell)
        except OverflowError:
            return None
    else:
        moment = _parsed(datetime.datetime.fromisoformat, cell)
        if moment is None:
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.UTC)
    moment = moment.astimezone(datetime.UTC)
    return moment if with_zone else moment.replace(tzinfo=None)


def _parsed(parse: Callable[[str], Any], cell: Any) -> Any:
    if not isinstance(cell, str):
        return None
    try:
        return parse(cell)
    except ValueError:
        return None

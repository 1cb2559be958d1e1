"""Record values -> typed Arrow columns: the value formats of both bridges (Spark's `valueFormat`, Ray Data's
`value_format`), decided here once so that the two give the same rows.

| format    | value bytes           | columns                         |
|-----------|-----------------------|---------------------------------|
| `binary`  | anything              | `value binary`, unchanged       |
| `string`  | UTF-8 text            | `value string`                  |
| `json`    | one UTF-8 JSON value  | the schema's fields (see below) |
| `msgpack` | one MessagePack value | the schema's fields             |

The value type is given or inferred from a sample of decoded values (`infer_value_type`, as Arrow types): `bool`
-> bool, `int` -> int64, `float` -> float64, `str` -> string, `bytes` -> binary, `datetime` -> timestamp[us, UTC],
lists -> list, maps with string keys -> struct (fields in first-seen order), other maps -> map; two samples of
different types merge into the wider one (int64 and float64 -> float64, struct fields united), any other mix ->
string, and a field seen only as null -> string, as Spark's JSON inference does (the Spark bridge turns these
types into Spark's with pyspark's own Arrow mapping).

Layout (`value_layout`): a struct type's fields replace the `value` column (`key, <fields...>, topic, partition,
offset, timestamp, timestampType[, headers]`); any other type gives one column `value`. A field named like a Kafka
column wins the name and the Kafka column becomes `kafka_<name>` (`kafka_timestamp`). Decoding
(`ArrowValueDecoder`) is permissive, as Spark's `from_json` is by default: a value that does not decode, or is not a
map for a struct type, gives nulls; a field whose value does not convert to the field's type is null (a string
field takes any value's text).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa
import pyarrow.compute as pc

from storage.errors import InvalidRequestError

VALUE_FORMATS = ("binary", "string", "json", "msgpack")
# Formats whose values decode into a typed schema (given or inferred), rather than a fixed `value` column.
SCHEMA_FORMATS = frozenset({"json", "msgpack"})
KAFKA_COLUMN_PREFIX = "kafka_"
# Values sampled to infer a schema when none is given (Spark's JSON inference reads every value; a bounded
# sample keeps planning under a second).
DEFAULT_SAMPLE_SIZE = 1000
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check_value_format(value_format: str, option: str = "valueFormat") -> str:
    """`value_format` if it is one of `VALUE_FORMATS`, else `InvalidRequestError` naming the caller's `option`."""
    if value_format not in VALUE_FORMATS:
        raise InvalidRequestError(f"{option} must be one of {', '.join(VALUE_FORMATS)}, got {value_format!r}")
    return value_format


def python_value(value_format: str, data: bytes) -> Any:
    """One value decoded as the format's Python object; None when it does not decode."""
    try:
        if value_format == "msgpack":
            return msgpack.unpackb(data, raw=False, strict_map_key=False, timestamp=3)
        if value_format == "json":
            return json.loads(data.decode("utf-8"))
        if value_format == "string":
            return data.decode("utf-8")
    except (ValueError, TypeError, RecursionError):
        # msgpack's ExtraData, FormatError and StackError are ValueErrors, as are JSON and UTF-8 decode errors.
        return None
    return data


def decode_strings(values: pa.Array) -> pa.Array:
    """A binary column as UTF-8 text (the `string` format); a value that is not UTF-8 is decoded with U+FFFD in
    place of its bad bytes rather than failing the read."""
    try:
        return pc.cast(values, pa.string())
    except pa.ArrowInvalid:
        return pa.array(
            [None if data is None else data.decode("utf-8", errors="replace") for data in values.to_pylist()],
            type=pa.string(),
        )


# --- inference -------------------------------------------------------------------------------------------


def infer_value_type(values: Iterable[Any]) -> pa.DataType | None:
    """The Arrow type of sampled Python values (see the module docstring); None when all are None."""
    merged: pa.DataType = pa.null()
    for value in values:
        merged = _merge(merged, _type_of(value))
    return None if pa.types.is_null(merged) else _nulls_as_strings(merged)


def _type_of(value: Any) -> pa.DataType:
    if value is None:
        return pa.null()
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64() if INT64_MIN <= value <= INT64_MAX else pa.float64()
    if isinstance(value, float):
        return pa.float64()
    if isinstance(value, str):
        return pa.string()
    if isinstance(value, bytes | bytearray):
        return pa.binary()
    if isinstance(value, datetime.datetime):
        return TIMESTAMP_TYPE
    if isinstance(value, list | tuple):
        element: pa.DataType = pa.null()
        for item in value:
            element = _merge(element, _type_of(item))
        return pa.list_(element)
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return pa.struct([pa.field(key, _type_of(item)) for key, item in value.items()])
        key_type: pa.DataType = pa.null()
        item_type: pa.DataType = pa.null()
        for key, item in value.items():
            key_type = _merge(key_type, _type_of(key))
            item_type = _merge(item_type, _type_of(item))
        return pa.map_(key_type, item_type)
    return pa.string()


def _merge(left: pa.DataType, right: pa.DataType) -> pa.DataType:
    if pa.types.is_null(left):
        return right
    if pa.types.is_null(right) or left == right:
        return left
    numeric = (pa.int64(), pa.float64())
    if left in numeric and right in numeric:
        return pa.float64()
    if pa.types.is_struct(left) and pa.types.is_struct(right):
        fields = {field.name: field.type for field in left}
        for field in right:
            fields[field.name] = _merge(fields.get(field.name, pa.null()), field.type)
        return pa.struct([pa.field(name, data_type) for name, data_type in fields.items()])
    if pa.types.is_list(left) and pa.types.is_list(right):
        return pa.list_(_merge(left.value_type, right.value_type))
    if pa.types.is_map(left) and pa.types.is_map(right):
        return pa.map_(_merge(left.key_type, right.key_type), _merge(left.item_type, right.item_type))
    return pa.string()


def _nulls_as_strings(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_null(data_type):
        return pa.string()
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(field.name, _nulls_as_strings(field.type)) for field in data_type])
    if pa.types.is_list(data_type):
        return pa.list_(_nulls_as_strings(data_type.value_type))
    if pa.types.is_map(data_type):
        return pa.map_(_nulls_as_strings(data_type.key_type), _nulls_as_strings(data_type.item_type))
    return data_type


# --- layout ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValueLayout:
    """The output columns, in order: for each, the Kafka column it copies (None: it comes from the value)."""

    arrow_schema: pa.Schema
    sources: tuple[str | None, ...]
    value_is_struct: bool

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.arrow_schema.names)

    @property
    def value_fields(self) -> tuple[str, ...]:
        return tuple(name for name, source in zip(self.names, self.sources, strict=True) if source is None)


def value_layout(kafka_schema: pa.Schema, value_type: pa.DataType) -> ValueLayout:
    """The output schema when the `value` column of `kafka_schema` is decoded into `value_type`."""
    is_struct = pa.types.is_struct(value_type)
    decoded = list(value_type) if is_struct else [pa.field("value", value_type)]
    decoded_names = {field.name for field in decoded}
    fields: list[pa.Field] = []
    sources: list[str | None] = []
    for field in kafka_schema:
        if field.name == "value":
            fields.extend(decoded)
            sources.extend([None] * len(decoded))
        else:
            name = KAFKA_COLUMN_PREFIX + field.name if field.name in decoded_names else field.name
            fields.append(field.with_name(name))
            sources.append(field.name)
    return ValueLayout(pa.schema(fields), tuple(sources), is_struct)


# --- decoding --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArrowValueDecoder:
    """Replaces the binary `value` column of Kafka-schema Arrow batches by the layout's decoded columns (picklable:
    it travels to the read tasks)."""

    value_format: str
    schema: pa.Schema
    sources: tuple[str | None, ...]
    value_is_struct: bool

    @classmethod
    def for_layout(cls, value_format: str, layout: ValueLayout) -> ArrowValueDecoder:
        return cls(value_format, layout.arrow_schema, layout.sources, layout.value_is_struct)

    def assemble(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        objects = [
            None if data is None else python_value(self.value_format, data)
            for data in batch.column("value").to_pylist()
        ]
        rows = [item if isinstance(item, dict) else None for item in objects] if self.value_is_struct else []
        columns = []
        for field, source in zip(self.schema, self.sources, strict=True):
            if source is not None:
                columns.append(batch.column(source))
            elif self.value_is_struct:
                columns.append(_to_arrow([None if row is None else row.get(field.name) for row in rows], field.type))
            else:
                columns.append(_to_arrow(objects, field.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _to_arrow(values: Sequence[Any], arrow_type: pa.DataType) -> pa.Array:
    """`values` as an Arrow array of `arrow_type`; values that do not convert become null (or text, for strings)."""
    try:
        return pa.array(values, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([_convert_one(value, arrow_type) for value in values], type=arrow_type)


def _convert_one(value: Any, arrow_type: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if isinstance(value, str):
            return value
        if isinstance(value, bytes | bytearray):
            return bytes(value).decode("utf-8", errors="replace")
        return json.dumps(value, default=str, ensure_ascii=False)
    try:
        return pa.scalar(value, type=arrow_type).as_py()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return None

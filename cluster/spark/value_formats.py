"""Record values -> typed columns: the `valueFormat` option of `cluster.spark.kafka_source`.

| format    | value bytes           | columns                         | decoded by                          |
|-----------|-----------------------|---------------------------------|-------------------------------------|
| `binary`  | anything              | `value binary`, unchanged       | nothing                             |
| `string`  | UTF-8 text            | `value string`                  | Spark's JVM (a cast)                |
| `json`    | one UTF-8 JSON value  | the schema's fields (see below) | Spark's JVM (`from_json`)           |
| `msgpack` | one MessagePack value | the schema's fields             | the read task, into Arrow (Python)  |

The schema is given (a DDL string such as `"user string, page string, latency_ms long"`, or a pyspark
`DataType`) or inferred from a sample of decoded values (`infer_value_type`): `bool` -> boolean, `int` -> long,
`float` -> double, `str` -> string, `bytes` -> binary, `datetime` -> timestamp, lists -> array, maps with string
keys -> struct (fields in first-seen order), other maps -> map; two samples of different types merge into the
wider one (long and double -> double, struct fields united), any other mix -> string, and a field seen only as
null -> string, as Spark's JSON inference does.

Layout: a struct schema's fields replace the `value` column (`key, <fields...>, topic, partition, offset,
timestamp, timestampType[, headers]`); any other schema gives one column `value`. A field named like a Kafka
column wins the name and the Kafka column becomes `kafka_<name>` (`kafka_timestamp`). Decoding is permissive,
as `from_json`'s default mode: a value that does not decode, or is not a map for a struct schema, gives nulls;
a field whose value does not convert to the field's type is null (a string field takes any value's text).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import msgpack
import pyarrow as pa
from pyspark.errors import ParseException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DataType, NullType, StructField, StructType, _parse_datatype_string

from storage.errors import InvalidRequestError

VALUE_FORMATS = ("binary", "string", "json", "msgpack")
# Formats decoded in Python inside the read task; the others are Spark expressions over the binary column.
PYTHON_FORMATS = frozenset({"msgpack"})
KAFKA_COLUMN_PREFIX = "kafka_"
# Values sampled to infer a schema when none is given (Spark's JSON inference reads every value; a bounded
# sample keeps planning under a second).
DEFAULT_SAMPLE_SIZE = 1000


def check_value_format(value_format: str) -> str:
    if value_format not in VALUE_FORMATS:
        raise InvalidRequestError(f"valueFormat must be one of {', '.join(VALUE_FORMATS)}, got {value_format!r}")
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


# --- schemas ---------------------------------------------------------------------------------------------


def parse_schema(schema: str | DataType) -> DataType:
    """A DDL string (`"a long, b string"`, `"array<int>"`) or a pyspark `DataType`, as a `DataType`.

    Parsing DDL goes through Spark's own parser, so it needs a running SparkContext.
    """
    if isinstance(schema, DataType):
        return schema
    try:
        return _parse_datatype_string(schema)
    except ParseException as exc:
        raise InvalidRequestError(f"valueSchema {schema!r} is not a Spark DDL type: {exc}") from None


def infer_value_type(values: Iterable[Any]) -> DataType | None:
    """The Spark type of sampled Python values (see the module docstring); None when all are None."""
    merged: DataType = NullType()
    for value in values:
        merged = _merge(merged, _type_of(value))
    return None if isinstance(merged, NullType) else _nulls_as_strings(merged)


def _type_of(value: Any) -> DataType:
    if value is None:
        return T.NullType()
    if isinstance(value, bool):
        return T.BooleanType()
    if isinstance(value, int):
        return T.LongType() if -(2**63) <= value < 2**63 else T.DoubleType()
    if isinstance(value, float):
        return T.DoubleType()
    if isinstance(value, str):
        return T.StringType()
    if isinstance(value, bytes | bytearray):
        return T.BinaryType()
    if isinstance(value, datetime.datetime):
        return T.TimestampType()
    if isinstance(value, list | tuple):
        element: T.DataType = T.NullType()
        for item in value:
            element = _merge(element, _type_of(item))
        return T.ArrayType(element, True)
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return T.StructType([T.StructField(key, _type_of(item), True) for key, item in value.items()])
        key_type: T.DataType = T.NullType()
        value_type: T.DataType = T.NullType()
        for key, item in value.items():
            key_type = _merge(key_type, _type_of(key))
            value_type = _merge(value_type, _type_of(item))
        return T.MapType(key_type, value_type, True)
    return T.StringType()


def _merge(left: DataType, right: DataType) -> DataType:
    if isinstance(left, T.NullType):
        return right
    if isinstance(right, T.NullType) or left == right:
        return left
    numeric = (T.LongType, T.DoubleType)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return T.DoubleType()
    if isinstance(left, T.StructType) and isinstance(right, T.StructType):
        fields = {field.name: field.dataType for field in left.fields}
        for field in right.fields:
            fields[field.name] = _merge(fields.get(field.name, T.NullType()), field.dataType)
        return T.StructType([T.StructField(name, data_type, True) for name, data_type in fields.items()])
    if isinstance(left, T.ArrayType) and isinstance(right, T.ArrayType):
        return T.ArrayType(_merge(left.elementType, right.elementType), True)
    if isinstance(left, T.MapType) and isinstance(right, T.MapType):
        return T.MapType(_merge(left.keyType, right.keyType), _merge(left.valueType, right.valueType), True)
    return T.StringType()


def _nulls_as_strings(data_type: DataType) -> DataType:
    if isinstance(data_type, T.NullType):
        return T.StringType()
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, _nulls_as_strings(f.dataType), True) for f in data_type.fields])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_nulls_as_strings(data_type.elementType), True)
    if isinstance(data_type, T.MapType):
        return T.MapType(_nulls_as_strings(data_type.keyType), _nulls_as_strings(data_type.valueType), True)
    return data_type


# --- layout ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ValueLayout:
    """The output columns, in order: for each, the Kafka column it copies (None: it comes from the value)."""

    spark_schema: StructType
    sources: tuple[str | None, ...]
    value_is_struct: bool

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.spark_schema.names)

    @property
    def value_fields(self) -> tuple[str, ...]:
        return tuple(name for name, source in zip(self.names, self.sources, strict=True) if source is None)

    @property
    def arrow_schema(self) -> pa.Schema:
        return to_arrow_schema(self.spark_schema)


def value_layout(kafka_schema: StructType, value_type: DataType) -> ValueLayout:
    """The output schema when the `value` column of `kafka_schema` is decoded into `value_type`."""
    is_struct = isinstance(value_type, StructType)
    decoded = list(value_type.fields) if isinstance(value_type, StructType) else [StructField("value", value_type)]
    decoded_names = {field.name for field in decoded}
    fields: list[StructField] = []
    sources: list[str | None] = []
    for field in kafka_schema.fields:
        if field.name == "value":
            fields.extend(decoded)
            sources.extend([None] * len(decoded))
        else:
            name = KAFKA_COLUMN_PREFIX + field.name if field.name in decoded_names else field.name
            fields.append(StructField(name, field.dataType, field.nullable))
            sources.append(field.name)
    return ValueLayout(StructType(fields), tuple(sources), is_struct)


# --- decoding in Python (inside read tasks) --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArrowValueDecoder:
    """Replaces the binary `value` column of Kafka-schema Arrow batches by the layout's decoded columns (picklable:
    it travels to Spark's Python workers)."""

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


# --- decoding in Spark (JVM expressions, or a mapInArrow for Python formats) -----------------------------


def json_columns(value_type: DataType, layout: ValueLayout) -> list[Column]:
    """Spark expressions turning a Kafka-schema DataFrame (binary `value`) into the layout's columns (`json`)."""
    # pyspark's annotation names struct and array types only; Spark's from_json takes a map type, too.
    decoded = F.from_json(F.col("value").cast("string"), value_type)  # type: ignore[arg-type]
    columns: list[Column] = []
    for name, source in zip(layout.names, layout.sources, strict=True):
        if source is not None:
            columns.append(F.col(source).alias(name))
        elif layout.value_is_struct:
            columns.append(decoded.getField(name).alias(name))
        else:
            columns.append(decoded.alias(name))
    return columns


def decode_values(
    df: DataFrame,
    value_format: str,
    value_schema: str | DataType | None = None,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
) -> DataFrame:
    """Decodes the binary `value` column of any DataFrame with Spark's Kafka-source schema.

    Without `value_schema` the type is inferred from up to `sample_size` values (taken with `limit`, through
    Arrow); with no value to infer from, `value` stays binary.
    """
    check_value_format(value_format)
    if value_format == "binary":
        return df
    if value_format == "string":
        return df.withColumn("value", F.col("value").cast("string"))
    if value_schema is not None:
        value_type = parse_schema(value_schema)
    else:
        # Through Arrow, as a pandas DataFrame (pyspark annotates `toPandas` with a protocol that has no `[]`).
        sample_frame: Any = df.select("value").limit(sample_size).toPandas()
        sample = sample_frame["value"]
        inferred = infer_value_type(python_value(value_format, bytes(data)) for data in sample if data is not None)
        if inferred is None:
            return df
        value_type = inferred
    layout = value_layout(df.schema, value_type)
    if value_format not in PYTHON_FORMATS:
        return df.select(*json_columns(value_type, layout))
    decoder = ArrowValueDecoder.for_layout(value_format, layout)
    return df.mapInArrow(partial(_decode_batches, decoder), layout.spark_schema)


def _decode_batches(decoder: ArrowValueDecoder, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    for batch in batches:
        yield decoder.assemble(batch)

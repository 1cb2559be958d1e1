"""Record values -> typed Spark columns: the `valueFormat` option of `cluster.spark.kafka_source`.

The formats, the inference rules, the layout of the decoded columns and the permissive decoding are those of
`cluster.records.value_formats`, shared with Ray Data's source; this module gives them Spark's types and decides
where each format is decoded:

| format    | decoded by                          |
|-----------|-------------------------------------|
| `binary`  | nothing                             |
| `string`  | Spark's JVM (a cast)                |
| `json`    | Spark's JVM (`from_json`)           |
| `msgpack` | the read task, into Arrow (Python)  |

The schema is given (a DDL string such as `"user string, page string, latency_ms long"`, or a pyspark `DataType`)
or inferred from a sample of decoded values (the shared Arrow inference, turned into Spark types by pyspark's own
Arrow mapping).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.errors import ParseException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema, to_arrow_type
from pyspark.sql.types import DataType, StructField, StructType, _parse_datatype_string

from cluster.records import value_formats
from cluster.records.value_formats import DEFAULT_SAMPLE_SIZE, ArrowValueDecoder, check_value_format, python_value
from storage.errors import InvalidRequestError

# Formats decoded in Python inside the read task; the others are Spark expressions over the binary column.
PYTHON_FORMATS = frozenset({"msgpack"})


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
    """The Spark type of sampled Python values (`cluster.records.value_formats.infer_value_type`'s rules); None
    when all are None."""
    inferred = value_formats.infer_value_type(values)
    return None if inferred is None else from_arrow_type(inferred)


@dataclass(frozen=True, slots=True)
class ValueLayout:
    """The shared layout (`arrow`) with Spark's types: `spark_schema` has the layout's columns, in order."""

    spark_schema: StructType
    arrow: value_formats.ValueLayout

    @property
    def names(self) -> tuple[str, ...]:
        return self.arrow.names

    @property
    def sources(self) -> tuple[str | None, ...]:
        return self.arrow.sources

    @property
    def value_is_struct(self) -> bool:
        return self.arrow.value_is_struct

    @property
    def arrow_schema(self) -> pa.Schema:
        return self.arrow.arrow_schema


def value_layout(kafka_schema: StructType, value_type: DataType) -> ValueLayout:
    """The output schema when the `value` column of `kafka_schema` is decoded into `value_type`."""
    arrow = value_formats.value_layout(to_arrow_schema(kafka_schema), to_arrow_type(value_type))
    decoded = {field.name: field for field in value_type.fields} if isinstance(value_type, StructType) else {}
    fields = []
    for name, source in zip(arrow.names, arrow.sources, strict=True):
        if source is not None:
            kafka_field = kafka_schema[source]
            fields.append(StructField(name, kafka_field.dataType, kafka_field.nullable))
        else:
            fields.append(decoded.get(name) or StructField(name, value_type))
    return ValueLayout(StructType(fields), arrow)


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
    decoder = ArrowValueDecoder.for_layout(value_format, layout.arrow)
    return df.mapInArrow(partial(_decode_batches, decoder), layout.spark_schema)


def _decode_batches(decoder: ArrowValueDecoder, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    for batch in batches:
        yield decoder.assemble(batch)

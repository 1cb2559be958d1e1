"""Topics -> a Spark DataFrame with Spark's Kafka-source schema, read from the partition actors (batch queries).

`read_topics(spark, topics=...)` is `spark.read.format("kafka")` for raybroker: the same option names and value
formats, the same columns (`key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int`, and `headers array<struct<key:string,value:binary>>` with `includeHeaders`).

| option                                | values                                             | default    |
|---------------------------------------|----------------------------------------------------|------------|
| `topics` (Spark: `subscribe`)         | a list, or one comma-separated string              | -          |
| `assign`                              | `{"t":[0,1]}` (JSON or a dict)                     | -          |
| `startingOffsets`                     | `earliest`, `latest`, `{"t":{"0":23,"1":-2}}`      | `earliest` |
| `endingOffsets`                       | `latest`, `{"t":{"0":50,"1":-1}}`                  | `latest`   |
| `startingTimestamp`/`endingTimestamp` | ms; every partition from/until the first record at | -          |
|                                       | or after it (wins over `...OffsetsByTimestamp`)    |            |
| `startingOffsetsByTimestamp`,         | `{"t":{"0":1700000000000}}`                        | -          |
| `endingOffsetsByTimestamp`            |                                                    |            |
| `startingOffsetsByTimestampStrategy`  | `error`, `latest`: when no record is that new      | `error`    |
| `minPartitions`                       | split big partitions into about this many ranges   | none       |
| `failOnDataLoss`                      | fail, or skip, when planned records were deleted   | true       |
| `isolationLevel` (Spark: the consumer | `read_committed`, `read_uncommitted`               | `read_     |
| option `kafka.isolation.level`)       |                                                    | committed` |
| `includeHeaders`                      | add the `headers` column                           | false      |
| `valueFormat`, `valueSchema`          | decode values (`cluster.spark.spark_value_formats`)      | `binary`   |
| `history`                             | `log`, or `table`: a topic's Iceberg table, then   | `log`      |
|                                       | its log (`cluster.spark.iceberg_history`)          |            |

Offsets are planned on the driver (`cluster.spark.planning`: the semantics of the offset options, the consistent
snapshot, how ranges become Spark tasks) and read in the executors' JVM (`cluster.spark.segment_source`: a
DataSource V2 source that reads the located segment files and decodes them into columnar batches) when the session
has its jar and the values need no Python decoder; else in Spark's Python workers (`cluster.spark.reading`, over
`cluster.records.range_reading`: fetching, decoding, data loss), as a `spark.range` of task numbers through
`mapInArrow(reading.read_task)`. Both give the same rows. `planned_read(df)` gives the plan back, whose
`ending_offsets_json()` starts the next read where this one ended.

Isolation: the bridge reads `read_committed` by default, where Spark's Kafka source (through Kafka's consumer)
defaults to `read_uncommitted`: a DataFrame is a pipeline's input, and it must not compute on records their
producer aborted, nor on a transaction that may still abort. `latest` is then the last stable offset, and aborted
transactions' records are dropped (`cluster.records.isolation`); `isolationLevel="read_uncommitted"` reads as Spark.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cluster.records.range_reading import sample_values
from cluster.records.value_formats import DEFAULT_SAMPLE_SIZE, ArrowValueDecoder, check_value_format, python_value
from cluster.runtime import gcs_address
from cluster.spark.planning import ReadPlan, plan_read
from cluster.spark.reading import read_task
from cluster.spark.segment_source import segment_dataframe
from cluster.spark.spark_value_formats import (
    PYTHON_FORMATS,
    ValueLayout,
    infer_value_type,
    json_columns,
    parse_schema,
    value_layout,
)
from storage.errors import InvalidRequestError

_plans: weakref.WeakKeyDictionary[Any, ReadPlan] = weakref.WeakKeyDictionary()


def kafka_spark_schema(include_headers: bool = False) -> T.StructType:
    """Spark's Kafka-source schema."""
    fields = [
        T.StructField("key", T.BinaryType()),
        T.StructField("value", T.BinaryType()),
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("timestampType", T.IntegerType()),
    ]
    if include_headers:
        header = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])
        fields.append(T.StructField("headers", T.ArrayType(header)))
    return T.StructType(fields)


def _with_topic_index(schema: T.StructType, topic_column: str) -> T.StructType:
    """The read task's output schema: `schema` with an int topic index in place of the topic name."""
    return T.StructType(
        [T.StructField(topic_column, T.IntegerType()) if field.name == topic_column else field for field in schema]
    )


def _topic_names(topics: tuple[str, ...], topic_column: str) -> Column:
    """The topic names back from the read task's indexes, computed in the JVM.

    A topic name per row costs its bytes on the way from Python to the JVM and again in each row there: 29 of the
    ~140 bytes a row of the benchmark's records took. As an expression over a 4-byte index it costs nothing when
    the query does not use it (Spark prunes it) and one array lookup when it does.
    """
    if len(topics) == 1:
        return F.lit(topics[0])
    return F.element_at(F.array(*[F.lit(topic) for topic in topics]), F.col(topic_column) + 1)


def read_plan(
    spark: SparkSession,
    plan: ReadPlan,
    *,
    includeHeaders: bool = False,
    valueFormat: str = "binary",
    valueSchema: str | T.DataType | None = None,
    sampleSize: int = DEFAULT_SAMPLE_SIZE,
    jvm: bool = True,
) -> DataFrame:
    """The DataFrame of a planned read (see the module docstring); `planned_read(df)` gives the plan back. `jvm`
    lets the executors' JVM read and decode the records when it can (`cluster.spark.segment_source`; not for
    values decoded in Python); False always reads in Spark's Python workers."""
    check_value_format(valueFormat)
    kafka_schema = kafka_spark_schema(includeHeaders)
    value_type: T.DataType | None = None
    if valueFormat in ("json", "msgpack"):
        if valueSchema is not None:
            value_type = parse_schema(valueSchema)
        else:
            sample = sample_values(plan.ranges, sampleSize, plan.isolation)
            value_type = infer_value_type(python_value(valueFormat, data) for data in sample)
    layout = None if value_type is None else value_layout(kafka_schema, value_type)
    decoder = None
    schema = kafka_schema
    if layout is not None and valueFormat in PYTHON_FORMATS:
        decoder = ArrowValueDecoder.for_layout(valueFormat, layout.arrow)
        schema = layout.spark_schema
    df = segment_dataframe(spark, plan, includeHeaders) if jvm and decoder is None else None
    if df is None:
        df = _python_read(spark, plan, schema, layout, includeHeaders, decoder)
    df = _decoded(df, valueFormat, value_type, layout)
    _plans[df] = plan
    return df


def _decoded(df: DataFrame, value_format: str, value_type: T.DataType | None, layout: ValueLayout | None) -> DataFrame:
    """A Kafka-schema DataFrame with its values decoded in the JVM (`string`, `json`), as they were read for the
    others."""
    if value_format == "string":
        return df.withColumn("value", F.col("value").cast("string"))
    if layout is not None and value_type is not None and value_format not in PYTHON_FORMATS:
        return df.select(*json_columns(value_type, layout))
    return df


def _python_read(
    spark: SparkSession,
    plan: ReadPlan,
    schema: T.StructType,
    layout: ValueLayout | None,
    include_headers: bool,
    decoder: ArrowValueDecoder | None,
) -> DataFrame:
    """The read in Spark's Python workers: a `spark.range` of task numbers through `mapInArrow(read_task)`."""
    tasks = tuple(tuple(plan.ranges[index] for index in task) for task in plan.tasks)
    topics = tuple(sorted({offset_range.topic for offset_range in plan.ranges}))
    topic_column = "topic" if decoder is None or layout is None else layout.names[layout.sources.index("topic")]
    read = partial(
        read_task,
        tasks,
        topics,
        topic_column,
        gcs_address(),
        plan.fail_on_data_loss,
        include_headers,
        decoder,
        plan.isolation,
    )
    task_count = max(1, len(tasks))
    df = spark.range(0, len(tasks), 1, task_count).mapInArrow(read, _with_topic_index(schema, topic_column))
    return df.withColumn(topic_column, _topic_names(topics, topic_column))


def read_topics(
    spark: SparkSession,
    *,
    topics: str | Sequence[str] | None = None,
    assign: str | Mapping[str, Sequence[int]] | None = None,
    includeHeaders: bool = False,
    valueFormat: str = "binary",
    valueSchema: str | T.DataType | None = None,
    sampleSize: int = DEFAULT_SAMPLE_SIZE,
    jvm: bool = True,
    history: str = "log",
    **options: Any,
) -> DataFrame:
    """`spark.read.format("kafka")` over raybroker's topics: `plan_read` with the session's cores, then
    `read_plan`. `options` are `plan_read`'s (`startingOffsets`, `endingOffsets`, `minPartitions`, ...). With
    `history="table"`, topics kept as Iceberg tables are read from their table and then their log
    (`cluster.spark.iceberg_history`)."""
    if history not in ("log", "table"):
        raise InvalidRequestError(f"history must be 'log' or 'table', got {history!r}")
    if history == "table":
        with_assign = options if assign is None else {**options, "assign": assign}
        return _read_table_and_tail(spark, topics, includeHeaders, valueFormat, valueSchema, jvm, with_assign)
    plan = plan_read(topics=topics, assign=assign, parallelism=spark.sparkContext.defaultParallelism, **options)
    return read_plan(
        spark,
        plan,
        includeHeaders=includeHeaders,
        valueFormat=valueFormat,
        valueSchema=valueSchema,
        sampleSize=sampleSize,
        jvm=jvm,
    )


def _read_table_and_tail(
    spark: SparkSession,
    topics: str | Sequence[str] | None,
    include_headers: bool,
    value_format: str,
    value_schema: str | T.DataType | None,
    jvm: bool,
    options: Mapping[str, Any],
) -> DataFrame:
    """The topics' Iceberg tables and their logs after them as one DataFrame (`cluster.spark.iceberg_history`)."""
    # Here, not at the top: the table's read needs pyiceberg (~0.7 s to import), which a read of the log alone
    # never loads.
    from cluster.spark.iceberg_history import check_history_read, table_parts

    passed = check_history_read(options, value_format, value_schema)
    kafka_schema = kafka_spark_schema(include_headers)
    starts, tables = table_parts(spark, topics, kafka_schema)
    plan = plan_read(topics=topics, startingOffsets=starts, parallelism=spark.sparkContext.defaultParallelism, **passed)
    log = read_plan(spark, plan, includeHeaders=include_headers, jvm=jvm)
    rows = log if tables is None else log.unionByName(tables)
    value_type = None if value_schema is None or value_format != "json" else parse_schema(value_schema)
    layout = None if value_type is None else value_layout(kafka_schema, value_type)
    return _decoded(rows, value_format, value_type, layout)


def planned_read(df: DataFrame) -> ReadPlan:
    """The plan of a DataFrame made by `read_topics`/`read_plan` (its fixed start and end offsets)."""
    plan = _plans.get(df)
    if plan is None:
        raise InvalidRequestError(
            "this DataFrame was not made by read_topics or read_plan (derived DataFrames lose it)"
        )
    return plan

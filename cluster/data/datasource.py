"""Topics -> a Ray Data `Dataset`, read by the broker's own path: the datasource of `read_topic`
(`cluster.data.topic_reads`).

`read_topic(topics, start=..., end=..., isolation=..., columns=..., value_format=..., value_schema=...)` plans the
read on the driver (`cluster.data.read_planning` over `cluster.records.read_plan`: offsets fixed now, typed errors now)
and returns a lazy Dataset whose rows are the Spark bridge's (`cluster.records`): `key binary, value binary, topic
string, partition int32, offset int64, timestamp timestamp[us, UTC], timestampType int32` (0 CreateTime, 1
LogAppendTime, -1 none) and `headers list<struct<key string, value binary>>` (null for a record without headers),
the value decoded by `value_format` (`cluster.records.value_formats`: `binary`, `string`, `json`, `msgpack`; for the
last two `value_schema`, an Arrow type or schema, or one inferred from the first values). `columns` keeps only those
columns (headers are not even decoded unless asked for).

Locality: Ray Data 2.60 gives every read task of one `read_datasource` the same scheduling options, so the read is
one `TopicDatasource` per node holding partition leaders, each read with a label selector for that node
(`ray.io/node-id`), unioned. Read tasks reserve no CPU, so that Ray never moves one off its node for want of a free
CPU there (`READ_TASK_CPUS`); each node runs at most as many at once as it has CPUs. A read task there reads its
ranges from the page cache (the partition actor only says where the bytes lie: `actors.clients.local_fetch`) and
decodes Kafka batches into Arrow with the columnar record codec (`cluster.records.arrow_records`), no socket and no
per-record Python (except msgpack and JSON values). When that node is gone, each task's fallback selector lets it
run anywhere, and its ranges are fetched through the partitions' new leaders (`cluster.records.range_reading`): a
node that dies degrades a read to remote fetches, never to a failure.

Blocks: a task yields a table per decoded group of fetches (up to 16 MiB of batches), which Ray Data's read operator
re-buffers to `DataContext.target_max_block_size`; `estimate_inmemory_data_size` is the plan's estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow as pa
import ray
from ray.data import DataContext, Dataset, Datasource, ReadTask
from ray.data.block import BlockMetadata

from cluster.data.read_planning import task_groups
from cluster.records.arrow_records import kafka_arrow_schema
from cluster.records.isolation import READ_COMMITTED
from cluster.records.range_reading import read_ranges, sample_values
from cluster.records.read_plan import PlannedRange, TopicReadPlan
from cluster.records.value_formats import (
    DEFAULT_SAMPLE_SIZE,
    SCHEMA_FORMATS,
    ArrowValueDecoder,
    check_value_format,
    decode_strings,
    infer_value_type,
    python_value,
    value_layout,
)
from storage.errors import InvalidRequestError

# Ray's label of every node's id (`ray.io/node-id`): a read of one node's partitions asks for it.
NODE_ID_LABEL = "ray.io/node-id"
# A read task whose node is gone runs wherever Ray finds room (an empty selector), fetching through the actors.
ANYWHERE: list[dict[str, Any]] = [{"label_selector": {}}]
# Logical CPUs a read task reserves: none. Ray's scheduler takes a fallback as soon as the selected node has no free
# resources, not only once it is gone (ray-project/ray#56369: the first selector that is "feasible and available"):
# with 1 CPU per task, one read task in six ran off its node on a 3-node cluster of 1 CPU each. A task that
# reserves nothing always finds its node available while it lives; `read_datasource(concurrency=...)` bounds the
# tasks a node runs at once to its CPUs instead.
READ_TASK_CPUS = 0


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How a read task turns Kafka-schema batches into the Dataset's rows (picklable: it travels with the task)."""

    include_headers: bool
    fail_on_data_loss: bool
    string_values: bool
    decoder: ArrowValueDecoder | None
    columns: tuple[str, ...] | None
    schema: pa.Schema
    isolation: str = READ_COMMITTED

    def rows(self, batch: pa.RecordBatch) -> pa.Table:
        if self.string_values:
            position = batch.schema.get_field_index("value")
            batch = batch.set_column(position, pa.field("value", pa.string()), decode_strings(batch.column(position)))
        elif self.decoder is not None:
            batch = self.decoder.assemble(batch)
        if self.columns is not None:
            batch = batch.select(list(self.columns))
        return pa.Table.from_batches([batch], schema=self.schema)


def read_blocks(ranges: Sequence[PlannedRange], settings: ReadSettings) -> Iterator[pa.Table]:
    """A read task: the records of `ranges` as tables of the Dataset's schema."""
    for batch in read_ranges(
        [planned.range for planned in ranges],
        fail_on_data_loss=settings.fail_on_data_loss,
        include_headers=settings.include_headers,
        node_ids=[planned.node for planned in ranges],
        isolation=settings.isolation,
    ):
        yield settings.rows(batch)


class TopicDatasource(Datasource):
    """The planned ranges led from one node, as Ray Data read tasks (see the module docstring)."""

    def __init__(self, ranges: Sequence[PlannedRange], settings: ReadSettings) -> None:
        super().__init__()
        self._ranges = tuple(ranges)
        self._settings = settings

    def get_name(self) -> str:
        return "ReadTopic"

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(planned.estimated_bytes for planned in self._ranges)

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: DataContext | None = None,
    ) -> list[ReadTask]:
        context = data_context or DataContext.get_current()
        tasks = []
        for group in task_groups(self._ranges, parallelism, context.target_max_block_size):
            metadata = BlockMetadata(
                # Not the offsets: compaction and transaction markers leave offsets without a row.
                num_rows=None,
                size_bytes=int(sum(planned.estimated_bytes for planned in group)),
                exec_stats=None,
                input_files=None,
            )
            tasks.append(
                ReadTask(
                    partial(read_blocks, group, self._settings),
                    metadata,
                    schema=self._settings.schema,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


# --- the Dataset -----------------------------------------------------------------------------------------


def read_settings(
    plan: TopicReadPlan,
    *,
    columns: Sequence[str] | None,
    value_format: str,
    value_schema: pa.DataType | pa.Schema | None,
    fail_on_data_loss: bool,
) -> ReadSettings:
    """The rows' schema and decoding for a plan (`row_settings`, sampling the plan's ranges where a json or msgpack
    read has no schema)."""
    return row_settings(
        lambda: sample_values([planned.range for planned in plan.ranges], DEFAULT_SAMPLE_SIZE, plan.isolation),
        plan.isolation,
        columns=columns,
        value_format=value_format,
        value_schema=value_schema,
        fail_on_data_loss=fail_on_data_loss,
    )


def row_settings(
    sample: Callable[[], Iterable[bytes]],
    isolation: str,
    *,
    columns: Sequence[str] | None,
    value_format: str,
    value_schema: pa.DataType | pa.Schema | None,
    fail_on_data_loss: bool,
) -> ReadSettings:
    """The rows' schema and decoding; `InvalidRequestError` for a value schema that does not fit the value format or
    a column the rows do not have. A json or msgpack read without a schema infers it from the values `sample()`
    answers (values stay binary when there is none)."""
    check_value_format(value_format, "value_format")
    value_type = _value_type(sample, value_format, value_schema)
    full = kafka_arrow_schema(include_headers=True)
    layout = None if value_type is None else value_layout(full, value_type)
    names = list(full.names if layout is None else layout.names)
    sources = dict(zip(names, names, strict=True) if layout is None else zip(names, layout.sources, strict=True))
    if columns is not None:
        if isinstance(columns, str) or not all(isinstance(name, str) for name in columns):
            raise InvalidRequestError(f"columns must be a list of column names, got {columns!r}")
        unknown = [name for name in columns if name not in sources]
        if unknown or not columns:
            raise InvalidRequestError(f"columns {unknown or columns!r} are not among the rows' columns {names}")
    include_headers = columns is None or "headers" in {sources[name] for name in columns}
    kafka_schema = kafka_arrow_schema(include_headers)
    decoder = None
    schema = kafka_schema
    if value_format == "string":
        schema = schema.set(schema.get_field_index("value"), pa.field("value", pa.string()))
    elif value_type is not None:
        layout = value_layout(kafka_schema, value_type)
        decoder = ArrowValueDecoder.for_layout(value_format, layout)
        schema = layout.arrow_schema
    selected = tuple(columns) if columns is not None else None
    if selected is not None:
        schema = pa.schema([schema.field(name) for name in selected])
    return ReadSettings(
        include_headers, fail_on_data_loss, value_format == "string", decoder, selected, schema, isolation
    )


# Arrow types a JSON or msgpack value converts to (`ArrowValueDecoder`): scalars and nestings of them.
_VALUE_TYPE_CHECKS = (
    pa.types.is_boolean,
    pa.types.is_integer,
    pa.types.is_floating,
    pa.types.is_decimal,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_timestamp,
    pa.types.is_date,
    pa.types.is_null,
)


def _value_type(
    sample: Callable[[], Iterable[bytes]], value_format: str, value_schema: pa.DataType | pa.Schema | None
) -> pa.DataType | None:
    if value_format not in SCHEMA_FORMATS:
        if value_schema is not None:
            raise InvalidRequestError(
                f"value_format {value_format!r} takes no value_schema: its value column is "
                f"{'binary' if value_format == 'binary' else 'string'} (json and msgpack take a schema)"
            )
        return None
    if value_schema is None:
        return infer_value_type(python_value(value_format, data) for data in sample())
    value_type = pa.struct(list(value_schema)) if isinstance(value_schema, pa.Schema) else value_schema
    if not isinstance(value_type, pa.DataType):
        raise InvalidRequestError(f"value_schema must be a pyarrow DataType or Schema, got {value_schema!r}")
    _check_value_type(value_type, value_format)
    return value_type


def _check_value_type(value_type: pa.DataType, value_format: str) -> None:
    """Refuses a type no decoded value converts to (dictionary, union, extension, ...) or a struct whose field
    names repeat, which would make two columns of one name."""
    if pa.types.is_struct(value_type):
        names = [field.name for field in value_type]
        if len(set(names)) != len(names):
            raise InvalidRequestError(f"value_schema has repeated field names: {names}")
        children = [field.type for field in value_type]
    elif pa.types.is_list(value_type) or pa.types.is_large_list(value_type):
        children = [value_type.value_type]
    elif pa.types.is_map(value_type):
        children = [value_type.key_type, value_type.item_type]
    elif any(check(value_type) for check in _VALUE_TYPE_CHECKS):
        children = []
    else:
        raise InvalidRequestError(f"value_schema type {value_type} cannot hold a decoded {value_format} value")
    for child in children:
        _check_value_type(child, value_format)


def read_plan(plan: TopicReadPlan, settings: ReadSettings, override_num_blocks: int | None = None) -> Dataset:
    """The Dataset of a planned read: one read per node, pinned there by label and free to run anywhere once the
    node is gone, unioned (see the module docstring)."""
    by_node = plan.by_node()
    if not by_node:
        return ray.data.from_arrow(settings.schema.empty_table())
    cpus = {node["NodeID"]: int(node["Resources"].get("CPU", 0)) for node in ray.nodes() if node["Alive"]}
    total = max(1, plan.estimated_bytes)
    reads: list[Dataset] = []
    for node, ranges in by_node.items():
        blocks = None
        if override_num_blocks is not None:
            share = sum(planned.estimated_bytes for planned in ranges) / total
            blocks = max(1, round(override_num_blocks * share))
        reads.append(
            ray.data.read_datasource(
                TopicDatasource(ranges, settings),
                label_selector={NODE_ID_LABEL: node},
                fallback_strategy=ANYWHERE,
                num_cpus=READ_TASK_CPUS,
                concurrency=max(1, cpus.get(node, 1)),
                override_num_blocks=blocks,
            )
        )
    return reads[0] if len(reads) == 1 else reads[0].union(*reads[1:])

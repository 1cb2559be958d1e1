"""A Ray Data `Dataset` -> a topic: `write_topic`, whose write tasks produce whole Arrow blocks.

`write_topic(ds, topic, key=..., value=..., partition=..., timestamp=..., value_format=..., compression="lz4")`
writes one record per row. Each write task holds one idempotent Python `Producer` (`actors.clients.producer`:
producer id and sequence numbers per partition, `acks=all`), turns each block's columns into the record columns
at once (`cluster.data.value_encoding`) and queues them with `send_many`, which cuts them into batches of up to
`BATCH_BYTES` encoded whole (`storage.records.record_encoder`); the producer's sender appends them over the append
channel when the leader is on the task's node, else through the partition actors.

| argument       | what                                                                                        |
|----------------|---------------------------------------------------------------------------------------------|
| `value`        | the column of the values; None: the column `value` if there is one, else the whole row      |
| `value_format` | `binary` (a binary column), `string` (UTF-8), `json` or `msgpack` (the column's value, or   |
|                | the row as an object); None: `binary` or `string` by the column's type, `json` for rows     |
| `key`          | the column of the keys (binary or string), None: null keys                                  |
| `partition`    | None: Kafka's default partitioner (murmur2 of the key; null keys fill one partition's batch  |
|                | at a time), an int: that partition, a column name: each row's partition                     |
| `timestamp`    | the column of the CreateTime timestamps (a timestamp, or int ms), None: the time of writing  |

Headers are not written. Bad arguments (an unknown topic or column, a column of the wrong type, an unknown codec)
raise typed errors from `write_topic`, before any task starts.

Delivery: at least once by default. A task that fails is run again by Ray Data on the same blocks (a dead worker
or node always; a raised error only with `retry_exceptions`), with a new producer id, so the rows its failed
attempt had written are written again. `exactly_once=True` is Kafka's answer: each write task writes its blocks in
one transaction of its own producer, whose transactional id is fixed by the write's id and the task's index
(`transactional_id`), so a retried task's `init_transactions` fences its failed attempt and aborts what that
attempt wrote (a task that raises aborts its own transaction as its producer closes, so the partitions' last
stable offset does not wait for `transaction.timeout.ms`), and a read_committed reader (the default of
`read_topic`, the `Consumer` with `isolation_level="read_committed"`, any Kafka client) sees every row once. A
task's rows become visible when it commits, at its end; read_uncommitted readers also see the aborted attempts'
rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from ray.data import Dataset
from ray.data.block import Block, BlockAccessor
from ray.data.datasource import Datasink, WriteResult

from actors.clients.broker import Broker
from actors.clients.producer import Producer
from cluster.data.value_encoding import encode_values
from cluster.records.value_formats import VALUE_FORMATS, check_value_format
from storage.arguments import is_int
from storage.errors import InvalidRequestError, UnknownTopicOrPartitionError
from storage.records.compression import CompressionType

# The producer's batch.size for whole blocks: 16 KiB batches of 100-byte records reach ~130k records/s, 1 MB ones
# ~500k (`Producer.send_many`); under Kafka's default `max.message.bytes` (1048588), which a batch must not pass.
BATCH_BYTES = 1_000_000
# Blocks a write task may have queued and not yet acknowledged, in bytes (the producer's `buffer.memory`).
BUFFER_BYTES = 64 * 1024 * 1024
# Bytes of blocks Ray Data bundles into one write task at least: each task starts a producer (a producer id from
# the controller, a sender thread, the partitions' lookups), which `from_items`' 200 one-row blocks paid 200 times
# (200 rows in 18 s on the loaded test machine).
MIN_WRITE_BYTES = 8 * 1024 * 1024
TRANSACTIONAL_ID_PREFIX = "raybroker-write-topic"
# An exactly-once task's `transaction.timeout.ms`: its transaction stays open while it writes all its blocks (8 MiB
# and more), so it gets 10 min where Kafka's default is 1 min, under the broker's default maximum of 15 min.
TRANSACTION_TIMEOUT_MS = 600_000


def transactional_id(write_id: str, task_index: int) -> str:
    """The transactional id of write task `task_index` of write `write_id`: the same on every attempt of the task
    (Ray Data's `TaskContext.task_idx` does not change on a retry), so the retry's producer fences the failed
    attempt's; and different for every task of the write, so tasks never fence each other."""
    return f"{TRANSACTIONAL_ID_PREFIX}-{write_id}-{task_index}"


@dataclass(frozen=True, slots=True)
class TopicWriteResult:
    """What a `write_topic` wrote: its id and the rows written (each at least once, or exactly once)."""

    write_id: str
    rows: int


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Which columns make a record, checked against the Dataset's schema (picklable: it travels with the task)."""

    topic: str
    value: str | None
    value_format: str
    key: str | None
    partition: str | int | None
    timestamp: str | None
    compression: str

    def records(self, table: pa.Table) -> Iterator[tuple[int | None, list[Any]]]:
        """`(partition, [values, keys, timestamps])` pieces of `table`'s rows, each for one `send_many`."""
        values = encode_values(self._value_columns(table), self.value_format)
        keys = None if self.key is None else encode_values(table.column(self.key), "binary")
        timestamps = None if self.timestamp is None else _milliseconds(table.column(self.timestamp))
        if not isinstance(self.partition, str):
            yield self.partition, [values, keys, timestamps]
            return
        partitions = table.column(self.partition).to_numpy(zero_copy_only=False)
        for chosen in sorted(set(partitions.tolist())):
            rows = (partitions == chosen).nonzero()[0].tolist()
            yield (
                int(chosen),
                [
                    [values[row] for row in rows],
                    None if keys is None else [keys[row] for row in rows],
                    None if timestamps is None else [timestamps[row] for row in rows],
                ],
            )

    def _value_columns(self, table: pa.Table) -> pa.ChunkedArray | pa.Table:
        """The value column, or the row without its key, partition and timestamp columns."""
        if self.value is not None:
            return table.column(self.value)
        own = {self.key, self.timestamp, self.partition if isinstance(self.partition, str) else None}
        return table.select([name for name in table.column_names if name not in own])


def _milliseconds(column: pa.ChunkedArray) -> list[int]:
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("ms", tz=column.type.tz)), pa.int64())
    return column.to_pylist()


class TopicDatasink(Datasink[int]):
    """Writes a Dataset's rows into a topic (see the module docstring); each task returns its row count."""

    def __init__(
        self,
        columns: RecordColumns,
        batch_bytes: int = BATCH_BYTES,
        min_write_bytes: int | None = MIN_WRITE_BYTES,
        exactly_once: bool = False,
    ) -> None:
        """`min_write_bytes`: blocks bundled into one write task at least (None: each block as Ray Data hands it
        over, and the operators before the write run inside the write task); `exactly_once`: each task writes in
        a transaction (see the module docstring)."""
        self.columns = columns
        self.exactly_once = exactly_once
        self.batch_bytes = batch_bytes
        self.min_write_bytes = min_write_bytes
        self.write_id = uuid.uuid4().hex
        self.result: TopicWriteResult | None = None

    def get_name(self) -> str:
        return "WriteTopic"

    @property
    def min_bytes_per_write(self) -> int | None:
        return self.min_write_bytes

    def write(self, blocks: Iterable[Block], ctx: Any) -> int:
        columns = self.columns
        rows = 0
        producer = Producer(
            batch_size=self.batch_bytes,
            max_request_size=max(self.batch_bytes, 1024 * 1024),
            buffer_memory=BUFFER_BYTES,
            compression_type=columns.compression,
            linger_ms=0,
            acks="all",
            transactional_id=transactional_id(self.write_id, ctx.task_idx) if self.exactly_once else None,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        )
        try:
            if self.exactly_once:
                producer.init_transactions()
                producer.begin_transaction()
            futures = []
            for block in blocks:
                table = BlockAccessor.for_block(block).to_arrow()
                if not table.num_rows:
                    # Ray Data passes empty blocks without columns (a filter that kept nothing).
                    continue
                for partition, (values, keys, timestamps) in columns.records(table):
                    futures.append(producer.send_many(columns.topic, values, keys, partition, timestamps))
                rows += table.num_rows
            producer.flush()
            for future in futures:
                future.wait()
            if self.exactly_once:
                producer.commit_transaction()
        finally:
            producer.close()
        return rows

    def on_write_complete(self, write_result: WriteResult[int]) -> None:
        self.result = TopicWriteResult(self.write_id, sum(write_result.write_returns))


def record_columns(
    schema: pa.Schema,
    topic: str,
    *,
    key: str | None,
    value: str | None,
    value_format: str | None,
    partition: str | int | None,
    timestamp: str | None,
    compression: str,
    partitions: int,
) -> RecordColumns:
    """The record columns of rows of `schema`, checked (see the module docstring); `partitions`: the topic's."""
    CompressionType.from_name(compression)
    names = set(schema.names)
    for role, column in (("key", key), ("value", value), ("timestamp", timestamp)):
        if column is not None and column not in names:
            raise InvalidRequestError(f"{role} column {column!r} is not among the Dataset's columns {schema.names}")
    if value is None and "value" in names and value_format in (None, "binary", "string"):
        value = "value"
    if value_format is None:
        value_format = _default_format(schema, value)
    check_value_format(value_format, "value_format")
    if value_format in ("binary", "string"):
        if value is None:
            raise InvalidRequestError(f"value_format {value_format!r} needs a value column; the Dataset has none")
        _check_type(schema, value, "value", value_format)
    if key is not None:
        _check_type(schema, key, "key", "binary or string")
    if isinstance(partition, str):
        if partition not in names or not pa.types.is_integer(schema.field(partition).type):
            raise InvalidRequestError(f"partition column {partition!r} must be an integer column of the Dataset")
    elif partition is not None and (not is_int(partition) or not 0 <= partition < partitions):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{partitions - 1}, not {partition!r}")
    if timestamp is not None:
        kind = schema.field(timestamp).type
        if not (pa.types.is_timestamp(kind) or pa.types.is_integer(kind)):
            raise InvalidRequestError(f"timestamp column {timestamp!r} must hold timestamps or int ms, not {kind}")
    return RecordColumns(topic, value, value_format, key, partition, timestamp, compression)


def _default_format(schema: pa.Schema, value: str | None) -> str:
    if value is None:
        return "json"
    kind = schema.field(value).type
    return "string" if pa.types.is_string(kind) or pa.types.is_large_string(kind) else "binary"


def _check_type(schema: pa.Schema, column: str, role: str, wanted: str) -> None:
    kind = schema.field(column).type
    fits = {
        "binary": pa.types.is_binary(kind) or pa.types.is_large_binary(kind),
        "string": pa.types.is_string(kind) or pa.types.is_large_string(kind),
    }
    if not any(fits[name] for name in fits if name in wanted):
        raise InvalidRequestError(f"{role} column {column!r} is {kind}, not {wanted}")


def write_topic(
    ds: Dataset,
    topic: str,
    *,
    key: str | None = None,
    value: str | None = None,
    value_format: str | None = None,
    partition: str | int | None = None,
    timestamp: str | None = None,
    compression: str = "lz4",
    concurrency: int | None = None,
    exactly_once: bool = False,
) -> TopicWriteResult:
    """Writes `ds` into `topic`, one record per row (see the module docstring); returns what it wrote.
    `exactly_once`: each write task in a transaction of its own, so a retried task leaves no duplicate visible to
    read_committed readers."""
    if value_format is not None and value_format not in VALUE_FORMATS:
        check_value_format(value_format, "value_format")
    partitions = len(Broker.connect().topic(topic).partitions)
    schema = ds.schema()
    arrow_schema = None if schema is None else schema.base_schema
    if not isinstance(arrow_schema, pa.Schema):
        raise InvalidRequestError(f"write_topic needs a Dataset of Arrow tables, got schema {schema!r}")
    columns = record_columns(
        arrow_schema,
        topic,
        key=key,
        value=value,
        value_format=value_format,
        partition=partition,
        timestamp=timestamp,
        compression=compression,
        partitions=partitions,
    )
    sink = TopicDatasink(columns, exactly_once=exactly_once)
    ds.write_datasink(sink, concurrency=concurrency)
    assert sink.result is not None, "Ray Data completed the write without calling on_write_complete"
    return sink.result


__all__ = ["TopicDatasink", "TopicWriteResult", "transactional_id", "write_topic"]

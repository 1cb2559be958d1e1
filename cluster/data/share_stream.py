"""A share group as a stream of work for Ray Data: `share_stream` yields Datasets of the records acquired for one
member of a share group (KIP-932), and acknowledges each batch as a whole once the caller is done with it.

A share group is a queue: every record goes to one member at a time, locked to it for the group's
`share.record.lock.duration.ms`, and comes back to the group if it is not accepted. So several processes (drivers,
Ray tasks, actors, on any nodes) running `share_stream` on one group share its records, however few partitions
the topics have, and one that dies leaves its records to the others once their locks expire. Where
`stream_topic` follows a consumer group's offsets (each partition read by one consumer, at least once by offset),
this acknowledges record by record.

Each batch is one poll of a `ShareConsumer` in explicit acknowledgement mode (`actors.clients.share_consumer`): up to
`max_records` records (a soft limit: whole batches), waiting up to `poll_timeout_s` while none come and ending the
stream after `idle_timeout_s` without any (None: never) or after `max_batches`. Its rows are `read_topic`'s, decoded
the same way (`columns`, `value_format`, `value_schema`: `cluster.data.datasource.row_settings`; a json or msgpack
stream without a schema infers it from its first batch's values and keeps it), plus `delivery_count` (int32: 1 on a
record's first delivery). The Dataset is built from Arrow tables on the caller's node (`ray.data.from_arrow`): the
records come through the partition leaders' share fetch, a Ray call each, not from the segment files.

What a batch's records become, once the caller is done with it:
- accepted (done for good) when the caller asks for the next batch, calls `commit()`, or leaves a `with` block
  without an exception: the downstream write succeeded;
- released (delivered again, to this member or another, with a delivery count one higher; archived once it reaches
  the group's delivery count limit) by `release()` or by leaving a `with` block with an exception: the work failed
  and may succeed later;
- rejected (archived, never delivered again) by `reject()`: the work can never succeed (a poisoned record).
A batch must be done within the lock duration: records whose lock expired went back to the group, and `commit()`
raises the leader's `InvalidRecordStateError` for them (they are delivered again: at least once). `close()` releases a
batch not acknowledged and leaves the group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import pyarrow as pa
import ray
from ray.data import Dataset

from actors.clients.broker import Broker
from actors.clients.share_consumer import EXPLICIT, ShareConsumer, ShareRecord
from actors.core.shares.acknowledgements import AcknowledgeType
from cluster.data.datasource import ReadSettings, row_settings
from cluster.records.arrow_records import MICROS_PER_MILLI, kafka_arrow_schema
from cluster.records.isolation import READ_COMMITTED
from storage.arguments import is_int
from storage.errors import InvalidConfigError, InvalidRequestError

DELIVERY_COUNT = "delivery_count"
DELIVERY_COUNT_FIELD = pa.field(DELIVERY_COUNT, pa.int32())


class ShareStream:
    """Datasets of the records a share group's member acquires, each acknowledged when the caller is done with it;
    see the module docstring. Not thread-safe (one member: use one stream per thread or process)."""

    def __init__(
        self,
        topics: Sequence[str],
        *,
        group_id: str,
        max_records: int,
        poll_timeout_s: float,
        idle_timeout_s: float | None,
        max_batches: int | None,
        columns: Sequence[str] | None,
        value_format: str,
        value_schema: pa.DataType | pa.Schema | None,
        broker: Broker | None,
    ) -> None:
        for name, limit in (("poll_timeout_s", poll_timeout_s), ("idle_timeout_s", idle_timeout_s)):
            if limit is not None and (not isinstance(limit, int | float) or isinstance(limit, bool) or limit < 0):
                raise InvalidConfigError(f"{name} must be a number of seconds >= 0, got {limit!r}")
        for name, count in (("max_records", max_records), ("max_batches", max_batches)):
            if (count is not None or name == "max_records") and (not is_int(count) or count < 1):
                raise InvalidConfigError(f"{name} must be an int >= 1, got {count!r}")
        self._wanted = None if columns is None else tuple(columns)
        self._row_options: dict[str, Any] = {
            "columns": None if columns is None else [name for name in columns if name != DELIVERY_COUNT] or None,
            "value_format": value_format,
            "value_schema": value_schema,
            "fail_on_data_loss": True,
        }
        self._settings: ReadSettings | None = None
        if value_schema is not None or value_format not in ("json", "msgpack"):
            self._settings = self._row_settings([])
        self._consumer = ShareConsumer(
            group_id,
            broker,
            acknowledgement_mode=EXPLICIT,
            max_poll_records=max_records,
            client_id="raybroker-ray-data",
        )
        self._consumer.subscribe(list(topics))
        self._poll_timeout_ms = int(poll_timeout_s * 1000)
        self._idle_timeout_s = idle_timeout_s
        self._max_batches = max_batches
        self._batches = 0
        self._held: list[ShareRecord] = []

    @property
    def consumer(self) -> ShareConsumer:
        """The share group member the stream polls (its member id, assignment, the group's lock duration)."""
        return self._consumer

    @property
    def held(self) -> int:
        """Records of the last batch not acknowledged yet."""
        return len(self._held)

    def __iter__(self) -> Iterator[Dataset]:
        return self

    def __next__(self) -> Dataset:
        self.commit()
        if self._max_batches is not None and self._batches >= self._max_batches:
            raise StopIteration
        idle_since = time.monotonic()
        while True:
            records = self._consumer.poll(self._poll_timeout_ms)
            if records:
                break
            if self._idle_timeout_s is not None and time.monotonic() - idle_since >= self._idle_timeout_s:
                raise StopIteration
        self._held = records
        self._batches += 1
        return ray.data.from_arrow(self._rows(records))

    def commit(self) -> None:
        """Accepts every record of the last batch (see the module docstring); the first partition's error if a
        leader refused them."""
        self._acknowledge(AcknowledgeType.ACCEPT)

    def release(self) -> None:
        """Releases every record of the last batch: they are delivered again."""
        self._acknowledge(AcknowledgeType.RELEASE)

    def reject(self) -> None:
        """Rejects every record of the last batch: they are never delivered again."""
        self._acknowledge(AcknowledgeType.REJECT)

    def close(self) -> None:
        """Releases the last batch if it was not acknowledged, and leaves the group."""
        self._consumer.close()
        self._held = []

    def __enter__(self) -> ShareStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self.commit()
            else:
                self.release()
        finally:
            self.close()

    def _acknowledge(self, kind: AcknowledgeType) -> None:
        if not self._held:
            return
        held, self._held = self._held, []
        for record in held:
            self._consumer.acknowledge(record, kind)
        for failure in self._consumer.commit_sync().values():
            if failure is not None:
                raise failure

    def _rows(self, records: list[ShareRecord]) -> pa.Table:
        if self._settings is None:
            self._settings = self._row_settings([record.value for record in records if record.value is not None])
        batch = _kafka_batch(records, self._settings.include_headers)
        table = self._settings.rows(batch)
        table = table.append_column(
            DELIVERY_COUNT_FIELD, pa.array([record.delivery_count for record in records], pa.int32())
        )
        return table if self._wanted is None else table.select(list(self._wanted))

    def _row_settings(self, sample: list[bytes]) -> ReadSettings:
        return row_settings(lambda: sample, READ_COMMITTED, **self._row_options)


def share_stream(
    topics: str | Sequence[str],
    *,
    group_id: str,
    max_records: int = 500,
    poll_timeout_s: float = 1.0,
    idle_timeout_s: float | None = None,
    max_batches: int | None = None,
    columns: Sequence[str] | None = None,
    value_format: str = "binary",
    value_schema: pa.DataType | pa.Schema | None = None,
    broker: Broker | None = None,
) -> ShareStream:
    """Joins the share group `group_id` on `topics` and answers a `ShareStream` (see the module docstring)."""
    if columns is not None and (isinstance(columns, str) or not columns):
        raise InvalidRequestError(f"columns must be a non-empty list of column names, got {columns!r}")
    return ShareStream(
        [topics] if isinstance(topics, str) else list(topics),
        group_id=group_id,
        max_records=max_records,
        poll_timeout_s=poll_timeout_s,
        idle_timeout_s=idle_timeout_s,
        max_batches=max_batches,
        columns=columns,
        value_format=value_format,
        value_schema=value_schema,
        broker=broker,
    )


def _kafka_batch(records: list[ShareRecord], include_headers: bool) -> pa.RecordBatch:
    """The records as one Arrow batch of `read_topic`'s Kafka schema (`cluster.records.arrow_records`)."""
    schema = kafka_arrow_schema(include_headers)
    columns: list[Any] = [
        [record.key for record in records],
        [record.value for record in records],
        [record.topic for record in records],
        [record.partition for record in records],
        [record.offset for record in records],
        [record.timestamp * MICROS_PER_MILLI for record in records],
        [int(record.timestamp_type) for record in records],
    ]
    if include_headers:
        columns.append(
            [
                [{"key": key, "value": value} for key, value in record.headers] if record.headers else None
                for record in records
            ]
        )
    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)], schema=schema
    )

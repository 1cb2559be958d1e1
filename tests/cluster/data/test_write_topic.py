"""`write_topic` on a real broker and a real local Ray: every row lands as one record, with its key on the
partition Kafka's default partitioner picks (kafka-python's murmur2 is the oracle), its value in every value format
as json/msgpack encode the row, its timestamp; a write task killed once writes again (at least once: the rows its
dead attempt wrote are there twice; with `exactly_once` read_committed readers see each row once); bad arguments
fail before any task starts."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest
import ray
from kafka.partitioner.default import murmur2

from actors.calls import call
from actors.clients.admin import Admin
from actors.clients.broker import Broker
from cluster.data import read_topic, write_topic
from cluster.data.datasink import TopicDatasink, record_columns
from cluster.data.read_planning import timestamp_ms
from storage.errors import InvalidRequestError, UnknownTopicOrPartitionError, UnsupportedCompressionTypeError

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")]

NOW_MS = int(time.time() * 1000)


@pytest.fixture(scope="module")
def broker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Any:
    ray.data.DataContext.get_current().enable_progress_bars = False
    # One `__transaction_state` partition for the exactly-once writes (each partition is an actor process).
    return start_test_broker(log_dirs_count=1, transaction_state_log_num_partitions="1")[0]


def rows_of(topic: str, value_format: str = "binary") -> list[dict[str, Any]]:
    return sorted(read_topic(topic, value_format=value_format).take_all(), key=lambda r: (r["partition"], r["offset"]))


def test_rows_land_once_each_on_their_keys_partitions_with_their_timestamps(broker: Any) -> None:
    Admin().create_topic("written", partitions=3)
    items = [
        {"user": f"user-{i % 17}" if i % 9 else None, "value": f"event-{i}".encode(), "at": NOW_MS - i}
        for i in range(600)
    ]
    result = write_topic(ray.data.from_items(items, override_num_blocks=3), "written", key="user", timestamp="at")
    assert result.rows == 600
    rows = rows_of("written")
    assert sorted(row["value"] for row in rows) == sorted(item["value"] for item in items)
    sent = {item["value"]: item for item in items}
    for row in rows:
        item = sent[row["value"]]
        assert row["key"] == (None if item["user"] is None else item["user"].encode())
        assert timestamp_ms(row["timestamp"]) == item["at"]
        if row["key"] is not None:
            assert row["partition"] == (murmur2(row["key"]) & 0x7FFFFFFF) % 3


@pytest.mark.parametrize("value_format", ["json", "msgpack"])
def test_whole_rows_are_encoded_as_objects_and_read_back_by_the_same_format(broker: Any, value_format: str) -> None:
    topic = f"rows-{value_format}"
    Admin().create_topic(topic, partitions=2)
    items = [{"page": f"/p{i % 3}", "latency_ms": i, "ok": i % 2 == 0, "slot": i % 2} for i in range(200)]
    write_topic(ray.data.from_items(items), topic, value_format=value_format, partition="slot", compression="zstd")
    rows = rows_of(topic, value_format)
    assert len(rows) == 200
    for row in rows:
        assert row["partition"] == row["latency_ms"] % 2
        assert {name: row[name] for name in ("page", "latency_ms", "ok")} == {
            name: items[row["latency_ms"]][name] for name in ("page", "latency_ms", "ok")
        }
    decode = json.loads if value_format == "json" else msgpack.unpackb
    raw = read_topic(topic, columns=["value"]).take(1)[0]["value"]
    assert set(decode(raw)) == {"page", "latency_ms", "ok"}, "the partition column is not part of the value"


def test_a_string_column_is_written_as_utf8_to_one_partition(broker: Any) -> None:
    Admin().create_topic("texts", partitions=2)
    table = pa.table({"text": ["grüße", "", None, "ok"]})
    write_topic(ray.data.from_arrow(table), "texts", value="text", partition=1)
    rows = rows_of("texts", "string")
    assert [row["value"] for row in rows] == ["grüße", "", None, "ok"]
    assert {row["partition"] for row in rows} == {1}


# Batches `kill_once` was handed in this process, per marker (a retried task runs in a new worker process).
_CALLS: dict[str, int] = {}


def kill_once(batch: pa.Table, marker: str, topic: str, wait_for: int) -> pa.Table:
    """Kills this worker, once (the first process to create `marker`), when it is handed its third batch: after
    waiting until `wait_for` records (its first two batches, already handed to the write) are in `topic`."""
    calls = _CALLS.get(marker, 0)
    _CALLS[marker] = calls + 1
    if calls != 2 or os.path.exists(marker):
        return batch
    broker = Broker.connect()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        written = sum(call(broker.partition(topic, p).offsets.remote())[1] for p in broker.topic(topic).partitions)
        if written >= wait_for:
            break
        time.sleep(0.05)
    Path(marker).touch()
    os._exit(1)


@pytest.mark.parametrize("exactly_once", [False, True])
def test_a_write_task_killed_once_writes_again_at_least_once_or_in_a_transaction_exactly_once(
    broker: Any, tmp_path: Path, exactly_once: bool
) -> None:
    topic = f"killed-{exactly_once}".lower()
    Admin().create_topic(topic, partitions=2)
    items = [{"value": f"row-{i}".encode()} for i in range(400)]
    marker = tmp_path / "killed-once"
    context = ray.data.DataContext.get_current()
    target = context.target_max_block_size
    # Small blocks: each 100-row batch of the map reaches the write as a block of its own, before the next batch.
    context.target_max_block_size = 1024
    try:
        dataset = ray.data.from_items(items, override_num_blocks=1).map_batches(
            kill_once,
            batch_size=100,
            batch_format="pyarrow",
            fn_kwargs={"marker": str(marker), "topic": topic, "wait_for": 200},
        )
        # Unbundled, so that Ray Data fuses the map into the write task: the kill then ends a write under way.
        columns = record_columns(
            dataset.schema().base_schema,
            topic,
            key=None,
            value=None,
            value_format=None,
            partition=None,
            timestamp=None,
            compression="lz4",
            partitions=2,
        )
        sink = TopicDatasink(columns, min_write_bytes=None, exactly_once=exactly_once)
        dataset.write_datasink(sink)
    finally:
        context.target_max_block_size = target
    assert marker.exists(), "the write task was killed"
    assert sink.result is not None and sink.result.rows == 400
    uncommitted = Counter(
        row["value"] for row in read_topic(topic, columns=["value"], isolation="read_uncommitted").take_all()
    )
    assert set(uncommitted) == {item["value"] for item in items}, "every row landed"
    # The dead attempt's rows stay in the log: its first two batches are there twice.
    assert sorted(uncommitted.values()) == [1] * 200 + [2] * 200
    # Without transactions read_committed readers see them twice too; in a transaction, the retry's fence aborted
    # them and every row is read once.
    committed = Counter(row["value"] for row in read_topic(topic, columns=["value"]).take_all())
    assert committed == (Counter({item["value"]: 1 for item in items}) if exactly_once else uncommitted)


def test_bad_writes_are_refused_before_any_task_starts(broker: Any) -> None:
    Admin().create_topic("refusing", partitions=2)
    dataset = ray.data.from_items([{"value": b"v", "n": 1, "name": "a"}])
    with pytest.raises(UnknownTopicOrPartitionError):
        write_topic(dataset, "no-such-topic")
    with pytest.raises(InvalidRequestError, match="key column 'missing'"):
        write_topic(dataset, "refusing", key="missing")
    with pytest.raises(InvalidRequestError, match="key column 'n' is int64"):
        write_topic(dataset, "refusing", key="n")
    with pytest.raises(InvalidRequestError, match="value column 'n' is int64, not binary"):
        write_topic(dataset, "refusing", value="n", value_format="binary")
    with pytest.raises(InvalidRequestError, match="partition column 'name' must be an integer"):
        write_topic(dataset, "refusing", partition="name")
    with pytest.raises(UnknownTopicOrPartitionError, match="not 2"):
        write_topic(dataset, "refusing", partition=2)
    with pytest.raises(UnsupportedCompressionTypeError):
        write_topic(dataset, "refusing", compression="brotli")
    with pytest.raises(InvalidRequestError, match="value_format must be one of"):
        write_topic(dataset, "refusing", value_format="avro")
    assert read_topic("refusing").count() == 0


def test_blocks_a_filter_emptied_write_nothing(broker: Any) -> None:
    """Ray Data hands an emptied block over without its columns: it is skipped, not a missing-column error."""
    Admin().create_topic("filtered", partitions=1)
    items = [{"user": f"u{i}", "value": f"v{i}".encode()} for i in range(40)]
    kept = ray.data.from_items(items, override_num_blocks=4).filter(lambda row: row["user"] in ("u1", "u2"))
    assert write_topic(kept, "filtered", key="user").rows == 2
    assert sorted(row["value"] for row in rows_of("filtered")) == [b"v1", b"v2"]

"""A topic translated into its Iceberg table on a real broker over Ray, read back with pyiceberg: every committed
record once by (partition, offset), keys and values as the bytes produced (not UTF-8 included), an aborted
transaction's records absent, a table partitioned by day and key bucket, and a round interrupted after writing its
files but before committing them, then run again, neither losing nor repeating a record; in a value mode, dead
letters committed before such a crash are not written again, and a column added to the value schema is added to
the table."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from actors.clients.admin import Admin
from actors.clients.producer import Producer
from cluster.iceberg.catalog import catalog_properties, open_catalog
from cluster.iceberg.key_value_table import load_or_create_table
from cluster.iceberg.translation import commit_round, prepare_round, table_offsets, translate_once
from cluster.iceberg.value_table import load_or_create_value_tables
from storage.config.broker_config import BrokerConfig
from storage.errors import IcebergCatalogError

pytestmark = pytest.mark.ray

PARTITIONS = 3

Row = tuple[int, int, bytes | None, bytes | None]


def _identity(data: bytes) -> bytes:
    return data


def _produce(topic: str, records: list[tuple[bytes, bytes]], producer: Producer) -> list[Row]:
    futures = [producer.send(topic, value=value, key=key) for key, value in records]
    producer.flush()
    return [
        (f.result().partition, f.result().offset, key, value) for f, (key, value) in zip(futures, records, strict=True)
    ]


def _table_rows(table: Any) -> list[Row]:
    rows = table.refresh().scan(selected_fields=("partition", "offset", "key", "value")).to_arrow().to_pylist()
    return sorted((row["partition"], row["offset"], row["key"], row["value"]) for row in rows)


@pytest.fixture(scope="module")
def broker(start_test_broker: Callable[..., tuple[Any, Any]]) -> Any:
    started, _ = start_test_broker(log_dirs_count=1)
    return started


def _table(topic: str, tmp_path: Path) -> Any:
    Admin().create_topic(topic, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.partition.spec": "partition"})
    catalog = open_catalog(catalog_properties(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "meta")})))
    return load_or_create_table(catalog, ("raybroker", topic), "partition")


def test_rows_equal_the_committed_records_and_aborted_ones_never_land(broker: Any, tmp_path: Path) -> None:
    topic = "iceberg-rows"
    table = _table(topic, tmp_path)
    not_utf8 = [(bytes([0xFF, 0xFE, i]), b"\x80\x00" + bytes([i]) * 3) for i in range(30)]
    with Producer(value_serializer=_identity, key_serializer=_identity) as plain:
        expected = _produce(topic, not_utf8, plain)
    with Producer(transactional_id="iceberg-tx", value_serializer=_identity, key_serializer=_identity) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        expected += _produce(topic, [(b"c%d" % i, b"committed-%d" % i) for i in range(12)], producer)
        producer.commit_transaction()
        producer.begin_transaction()
        aborted = _produce(topic, [(b"a%d" % i, b"aborted-%d" % i) for i in range(12)], producer)
        producer.abort_transaction()
        producer.begin_transaction()
        expected += _produce(topic, [(b"d%d" % i, b"after-%d" % i) for i in range(6)], producer)
        producer.commit_transaction()

    first = translate_once(topic, table, broker)
    assert first.rows == len(expected)
    rows = _table_rows(table)
    assert rows == sorted(expected)
    assert not {(p, o) for p, o, _, _ in aborted} & {(p, o) for p, o, _, _ in rows}
    # Nothing new: a second round commits nothing and the table keeps its snapshot.
    snapshot = table.current_snapshot().snapshot_id
    assert translate_once(topic, table, broker).rows == 0
    assert table.refresh().current_snapshot().snapshot_id == snapshot


def test_a_table_partitioned_by_day_and_key_bucket_takes_every_record(broker: Any, tmp_path: Path) -> None:
    """The time and bucket transforms (pyiceberg computes them with pyiceberg-core): every record lands once, in
    files whose partition values are the day of its timestamp and the bucket of its key."""
    topic, spec = "iceberg-by-day", "day(timestamp), bucket(4, key)"
    Admin().create_topic(topic, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.partition.spec": spec})
    catalog = open_catalog(catalog_properties(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "meta")})))
    table = load_or_create_table(catalog, ("raybroker", topic), spec)
    with Producer(value_serializer=_identity, key_serializer=_identity) as producer:
        expected = _produce(topic, [(b"k%d" % i, b"v%d" % i) for i in range(50)], producer)
    assert translate_once(topic, table, broker).rows == 50
    assert _table_rows(table) == sorted(expected)
    assert [field.name for field in table.spec().fields] == ["timestamp_day", "key_bucket"]
    files = list(table.scan().plan_files())
    buckets = {task.file.partition[1] for task in files}
    assert len(files) > 1 and buckets <= set(range(4)) and len(buckets) > 1


def test_a_round_interrupted_before_its_commit_loses_and_repeats_nothing(broker: Any, tmp_path: Path) -> None:
    topic = "iceberg-resume"
    table = _table(topic, tmp_path)
    with Producer(value_serializer=_identity, key_serializer=_identity) as producer:
        expected = _produce(topic, [(b"k%d" % i, b"first-%d" % i) for i in range(40)], producer)
        translate_once(topic, table, broker)
        expected += _produce(topic, [(b"k%d" % i, b"second-%d" % i) for i in range(40)], producer)
        # Files written, then the translator dies before committing: the files are in no snapshot.
        interrupted = prepare_round(topic, table, broker)
        assert interrupted.rows == 40 and all(
            Path(f.file_path.removeprefix("file://")).exists() for f in interrupted.data_files
        )
        assert len(_table_rows(table)) == 40
        expected += _produce(topic, [(b"k%d" % i, b"third-%d" % i) for i in range(20)], producer)

    resumed = translate_once(topic, table, broker)
    assert resumed.start_offsets == interrupted.start_offsets and resumed.rows == 60
    rows = _table_rows(table)
    assert len(rows) == len(set((p, o) for p, o, _, _ in rows)) == 100
    assert rows == sorted(expected)
    assert sum(table_offsets(table).values()) == 100


def test_dead_letters_committed_before_a_crash_are_not_written_again(broker: Any, tmp_path: Path) -> None:
    """The dead-letter table is committed first: a round that dies between the two commits leaves it ahead, and the
    next round adds no dead letter twice and every good record once."""
    topic = "iceberg-dlq-resume"
    Admin().create_topic(topic, 1)
    catalog = open_catalog(catalog_properties(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "meta")})))
    table, dead_letters, values = load_or_create_value_tables(catalog, ("raybroker", topic), "value_json", "id INT", "")
    with Producer(value_serializer=_identity, key_serializer=_identity) as producer:
        _produce(topic, [(b"k", b'{"id": %d}' % i if i % 2 else b"bad") for i in range(20)], producer)
    interrupted = prepare_round(topic, table, broker, values, dead_letters)
    assert (interrupted.rows, interrupted.dead_letters) == (10, 10)
    # Only the dead letters' commit happened before the crash.
    commit_round(dead_letters, replace(interrupted, data_files=interrupted.dead_letter_files, dead_letter_files=()))
    resumed = translate_once(topic, table.refresh(), broker, values, dead_letters.refresh())
    assert (resumed.rows, resumed.dead_letters) == (10, 0)
    good = sorted(row["offset"] for row in table.refresh().scan().to_arrow().to_pylist())
    bad = sorted(row["offset"] for row in dead_letters.refresh().scan().to_arrow().to_pylist())
    assert good == list(range(1, 20, 2)) and bad == list(range(0, 20, 2))


def test_a_column_added_to_the_value_schema_is_added_to_the_table_and_one_widened_is_promoted(
    broker: Any, tmp_path: Path
) -> None:
    topic = "iceberg-evolve"
    Admin().create_topic(topic, 1)
    catalog = open_catalog(catalog_properties(BrokerConfig.from_properties({"log.dirs": str(tmp_path / "meta")})))
    identifier = ("raybroker", topic)
    with Producer(value_serializer=_identity, key_serializer=_identity) as producer:
        _produce(topic, [(b"k", b'{"id": 1, "name": "a"}')], producer)
        table, dead_letters, values = load_or_create_value_tables(catalog, identifier, "value_json", "id INT", "")
        translate_once(topic, table, broker, values, dead_letters)
        _produce(topic, [(b"k", b'{"id": 2, "name": "b"}')], producer)
    table, dead_letters, values = load_or_create_value_tables(
        catalog, identifier, "value_json", "name STRING, id INT", ""
    )
    assert [column.name for column in values.columns] == ["id", "name"]
    translate_once(topic, table, broker, values, dead_letters)
    rows = table.refresh().scan(selected_fields=("offset", "id", "name")).to_arrow().to_pylist()
    assert sorted((r["offset"], r["id"], r["name"]) for r in rows) == [(0, 1, None), (1, 2, "b")]
    with pytest.raises(IcebergCatalogError, match=r"column 'id' is int, iceberg\.value\.schema says string"):
        load_or_create_value_tables(catalog, identifier, "value_json", "id STRING", "")
    # Widened as Iceberg promotes: the rows written read back as the wider type, and a value past int's range lands.
    with Producer(value_serializer=_identity, key_serializer=_identity) as producer:
        _produce(topic, [(b"k", b'{"id": 4000000000, "name": "c"}')], producer)
    table, dead_letters, values = load_or_create_value_tables(
        catalog, identifier, "value_json", "name STRING, id BIGINT", ""
    )
    assert [(column.name, column.type) for column in values.columns] == [("id", "long"), ("name", "string")]
    assert translate_once(topic, table, broker, values, dead_letters).rows == 1
    rows = table.refresh().scan(selected_fields=("offset", "id")).to_arrow()
    assert str(rows.schema.field("id").type) == "int64"
    assert sorted((r["offset"], r["id"]) for r in rows.to_pylist()) == [(0, 1), (1, 2), (2, 4_000_000_000)]
    with pytest.raises(IcebergCatalogError, match=r"column 'id' is long, iceberg\.value\.schema says int"):
        load_or_create_value_tables(catalog, identifier, "value_json", "id INT", "")
    with pytest.raises(IcebergCatalogError, match="new column 'n' cannot be required"):
        load_or_create_value_tables(catalog, identifier, "value_json", "id BIGINT, n INT NOT NULL", "")

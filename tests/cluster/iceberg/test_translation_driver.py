"""The cluster's translation driver on a real broker over Ray: a topic produced to while the driver runs ends up in
its table record for record by (partition, offset) once the lag is 0; a topic whose warehouse cannot be written
pauses (its status says why, the topic keeps serving) and resumes once it can, with 0 missing and 0 duplicated, as
does one whose catalog cannot be opened (logged once, counted in the metrics);
`raybroker iceberg --describe` prints the table, the snapshot, the state and each partition's offsets; value_json
rows and dead letters land once each; `stop_broker` stops the driver."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.clients.admin import Admin
from actors.clients.broker import Broker, stop_broker
from actors.clients.producer import Producer
from actors.metrics.names import (
    ICEBERG_BYTES_WRITTEN,
    ICEBERG_DEAD_LETTERS,
    ICEBERG_FILES_WRITTEN,
    ICEBERG_LAG,
    ICEBERG_ROUNDS_FAILED,
)
from actors.metrics.recorder import MetricsRecorder
from cluster.cli.iceberg_command import describe_lines
from cluster.iceberg.catalog import catalog_properties, open_catalog
from cluster.iceberg.translation_driver import PAUSED, TRANSLATING, TopicStatus, TranslationDriver
from cluster.iceberg.translation_driver_actor import iceberg_driver_status
from storage.config.broker_config import BrokerConfig
from storage.errors import BrokerNotAvailableError
from tests.cluster.cli.cli_support import run
from tests.cluster.iceberg.driver_support import start_broker_with_driver

pytestmark = pytest.mark.ray

PARTITIONS = 3
TARGET_LAG_MS = "300"
WAIT_S = 60.0


def _identity(data: bytes) -> bytes:
    return data


@pytest.fixture(scope="module")
def driver(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[BrokerConfig]:
    yield start_broker_with_driver(start_test_broker, poll_interval_s=0.2)


def _create(topic: str) -> None:
    Admin().create_topic(
        topic, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": TARGET_LAG_MS}
    )


def _wait_for(topic: str, done: Callable[[TopicStatus], bool]) -> TopicStatus:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        statuses = iceberg_driver_status(topic)
        if statuses and done(statuses[0]):
            return statuses[0]
        time.sleep(0.2)
    raise AssertionError(f"{topic}: not reached in {WAIT_S} s: {iceberg_driver_status(topic)}")


def _caught_up(status: TopicStatus) -> bool:
    return status.state == TRANSLATING and status.lag == 0 and bool(status.partitions)


def _table_keys(config: BrokerConfig, topic: str) -> list[tuple[int, int, bytes]]:
    table = open_catalog(catalog_properties(config)).load_table(("raybroker", topic))
    rows = table.scan(selected_fields=("partition", "offset", "value")).to_arrow().to_pylist()
    return sorted((row["partition"], row["offset"], row["value"]) for row in rows)


def _produce(topic: str, values: list[bytes]) -> list[tuple[int, int, bytes]]:
    with Producer(value_serializer=_identity, linger_ms=1) as producer:
        futures = [producer.send(topic, value=value) for value in values]
        producer.flush()
        return [(f.result().partition, f.result().offset, v) for f, v in zip(futures, values, strict=True)]


def test_a_topic_produced_to_while_the_driver_runs_equals_its_table(driver: BrokerConfig) -> None:
    topic = "iceberg-driven"
    _create(topic)
    produced: list[tuple[int, int, bytes]] = []

    def produce() -> None:
        for burst in range(8):
            produced.extend(_produce(topic, [b"v-%d-%d" % (burst, i) for i in range(50)]))
            time.sleep(0.15)

    producer = threading.Thread(target=produce)
    producer.start()
    # Rounds run while the producer writes: the driver commits more than once before the end.
    _wait_for(topic, lambda status: status.rounds >= 2 and status.snapshot_id is not None)
    producer.join()
    status = _wait_for(topic, lambda s: _caught_up(s) and sum(p.table_offset for p in s.partitions) == 400)
    rows = _table_keys(driver, topic)
    assert len(rows) == len({(p, o) for p, o, _ in rows}) == 400
    assert rows == sorted(produced)
    assert {p.partition: p.table_offset for p in status.partitions} == {
        # A partition the producer's sticky partitioner gave no record is at offset 0.
        partition: 1 + max((o for p, o, _ in produced if p == partition), default=-1)
        for partition in range(PARTITIONS)
    }

    lines = describe_lines(status)
    assert lines[0] == (
        f"Topic: {topic}\tTable: raybroker.{topic}\tMode: key_value\tSnapshot: {status.snapshot_id}\tState: translating"
    )
    assert lines[1].split() == ["PARTITION", "TABLE-OFFSET", "LAST-STABLE-OFFSET", "LAG"]
    assert [line.split() for line in lines[2:]] == [
        [str(p.partition), str(p.table_offset), str(p.table_offset), "0"] for p in status.partitions
    ]


def test_a_warehouse_that_cannot_be_written_pauses_the_topic_until_it_can(driver: BrokerConfig) -> None:
    topic = "iceberg-paused"
    warehouse = Path(catalog_properties(driver)["warehouse"].removeprefix("file://"))
    # The table's folder taken by a file: no metadata or data file can be written there, for root too.
    blocker = warehouse / "raybroker" / topic
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"not a folder")
    _create(topic)
    expected = _produce(topic, [b"before-%d" % i for i in range(60)])
    paused = _wait_for(topic, lambda status: status.state == PAUSED and status.rounds_failed >= 2)
    assert paused.reason and paused.snapshot_id is None
    # The topic keeps serving while its translation waits.
    expected += _produce(topic, [b"while-%d" % i for i in range(30)])
    blocker.unlink()
    _wait_for(topic, lambda s: _caught_up(s) and sum(p.table_offset for p in s.partitions) == 90)
    rows = _table_keys(driver, topic)
    assert len(rows) == len({(p, o) for p, o, _ in rows}) == 90
    assert rows == sorted(expected)


def test_the_cli_describes_a_topic_and_refuses_one_not_translated(
    driver: BrokerConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "iceberg-cli"
    _create(topic)
    _produce(topic, [b"cli-%d" % i for i in range(9)])
    status = _wait_for(topic, lambda s: _caught_up(s) and sum(p.table_offset for p in s.partitions) == 9)
    Admin().create_topic("iceberg-off", 1)
    code, out, err = run(capsys, "iceberg", "--describe", "--topic", topic)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Topic: {topic}\tTable: raybroker.{topic}\tMode: key_value\tSnapshot: ")
    assert lines[0].endswith("\tState: translating") and len(lines) == 2 + PARTITIONS
    assert sum(int(line.split()[1]) for line in lines[2:]) == 9 and status.snapshot_id is not None
    code, out, err = run(capsys, "iceberg", "--describe", "--topic", "iceberg-off")
    assert code == 1 and not out
    assert (
        err.strip()
        == "raybroker: error: topic 'iceberg-off' is not kept as an Iceberg table (no such topic, or iceberg.mode=off)"
    )


def test_value_json_rows_and_dead_letters_land_once_each(driver: BrokerConfig) -> None:
    topic = "iceberg-json"
    Admin().create_topic(
        topic,
        PARTITIONS,
        config={
            "iceberg.mode": "value_json",
            "iceberg.value.schema": "id BIGINT NOT NULL, name STRING",
            "iceberg.partition.spec": "partition",
            "iceberg.target.lag.ms": TARGET_LAG_MS,
        },
    )
    values = [json.dumps({"id": i, "name": f"n{i}"}).encode() if i % 5 else b"not json %d" % i for i in range(50)]
    produced = _produce(topic, values)
    status = _wait_for(topic, lambda s: _caught_up(s) and sum(p.table_offset for p in s.partitions) == 50)
    assert status.dead_letters == 10
    catalog = open_catalog(catalog_properties(driver))
    rows = catalog.load_table(("raybroker", topic)).scan().to_arrow().to_pylist()
    dead = catalog.load_table(("raybroker", f"{topic}_dlq")).scan().to_arrow().to_pylist()
    assert sorted((r["partition"], r["offset"], r["id"], r["name"]) for r in rows) == sorted(
        (p, o, json.loads(v)["id"], json.loads(v)["name"]) for p, o, v in produced if not v.startswith(b"not")
    )
    assert sorted((r["partition"], r["offset"], r["value"]) for r in dead) == sorted(
        (p, o, v) for p, o, v in produced if v.startswith(b"not")
    )
    assert all(r["error"].startswith("value does not decode: JSONDecodeError") for r in dead)


def test_a_catalog_that_cannot_be_reached_pauses_logs_once_and_resumes(
    driver: BrokerConfig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A driver of its own in this process (the plain class, passes run by hand) over an SQLite catalog whose folder
    is taken by a file: the catalog cannot be opened until the file goes."""
    topic = "iceberg-no-catalog"
    _create(topic)
    expected = _produce(topic, [b"c-%d" % i for i in range(25)])
    blocked = tmp_path / "catalog-home"
    blocked.write_bytes(b"not a folder")
    properties = {
        "type": "sql",
        "uri": f"sqlite:///{blocked / 'catalog.db'}",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    now = [0.0]
    metrics = MetricsRecorder()
    own = TranslationDriver(properties, Broker.connect(), clock=lambda: now[0], metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="cluster.iceberg.translation_driver"):
        for _ in range(3):
            own.run_pass()
            now[0] += 1.0
    (paused,) = own.status(topic)
    assert paused.state == PAUSED and paused.rounds_failed == 3 and "cannot load the Iceberg catalog" in paused.reason
    assert sum(p.lag for p in paused.partitions) == 25
    assert [r.getMessage() for r in caplog.records if topic in r.getMessage()] == [
        f"Iceberg translation of {topic} paused, tried again every iceberg.target.lag.ms: {paused.reason}"
    ]
    assert metrics.value(ICEBERG_ROUNDS_FAILED, topic) == 3
    assert metrics.value(ICEBERG_LAG, topic) == 25

    blocked.unlink()
    own.run_pass()
    (resumed,) = own.status(topic)
    assert resumed.state == TRANSLATING and resumed.reason == "" and resumed.lag == 0
    table = open_catalog(properties).load_table(("raybroker", topic))
    rows = sorted((r["partition"], r["offset"], r["value"]) for r in table.scan().to_arrow().to_pylist())
    assert rows == sorted(expected)
    assert metrics.value(ICEBERG_FILES_WRITTEN, topic) >= 1 and metrics.value(ICEBERG_BYTES_WRITTEN, topic) > 0
    assert metrics.value(ICEBERG_LAG, topic) == 0 and metrics.value(ICEBERG_DEAD_LETTERS, topic) == 0
    own.close()


def test_stop_broker_stops_the_driver(driver: BrokerConfig) -> None:
    """Last in this module: the broker is stopped (the next module's fixture starts its own)."""
    assert iceberg_driver_status() != []
    stop_broker()
    with pytest.raises(BrokerNotAvailableError):
        iceberg_driver_status()

"""`read_topic(..., history="table")` on a real broker over Ray with its translation driver: a topic whose first
records are in its Iceberg table and then deleted from the log (DeleteRecords: as retention would), and whose later
records are in the log only, reads back as one Dataset equal to everything produced, each record once, by
(partition, offset), key and value, decoded by the read's value format; the log alone has only the later records.
A read with other bounds, of a topic not kept as a table, or with an unknown history is refused before anything is
read."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.clients.admin import Admin
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from cluster.data import read_topic
from cluster.iceberg.catalog import catalog_properties, open_catalog
from cluster.iceberg.key_value_table import load_or_create_table
from cluster.iceberg.translation import table_offsets, translate_once
from cluster.iceberg.translation_driver_actor import iceberg_driver_status, start_iceberg_driver
from storage.config.broker_config import BrokerConfig
from storage.errors import InvalidRequestError

pytestmark = pytest.mark.ray

PARTITIONS = 3
TOPIC = "history-kv"
ROUNDS_APART_MS = 3_600_000
WAIT_S = 60.0
Row = tuple[int, int, bytes, str]


@pytest.fixture(scope="module")
def config(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> Iterator[BrokerConfig]:
    _, log_dirs = start_test_broker(log_dirs_count=1)
    config = BrokerConfig.from_properties({"log.dirs": str(log_dirs[0])})
    start_iceberg_driver(config, poll_interval_s=0.2)
    yield config


def _identity(data: bytes) -> bytes:
    return data


def _produce(producer: Producer, start: int, count: int) -> list[Row]:
    sent = [(b"k%d" % i, f"value-{i}") for i in range(start, start + count)]
    futures = [producer.send(TOPIC, key=key, value=value.encode()) for key, value in sent]
    producer.flush()
    return [
        (f.result().partition, f.result().offset, key, value) for f, (key, value) in zip(futures, sent, strict=True)
    ]


def _rows(dataset: Any) -> list[Row]:
    return sorted((row["partition"], row["offset"], row["key"], row["value"]) for row in dataset.take_all())


def test_the_table_and_the_log_after_it_read_as_one_dataset(config: BrokerConfig) -> None:
    # Translated by hand, so the split between table and log is known: the driver runs its first round of the topic
    # as soon as it sees it (nothing to commit yet, the topic is empty), and its next an hour later.
    Admin().create_topic(
        TOPIC, PARTITIONS, config={"iceberg.mode": "key_value", "iceberg.target.lag.ms": str(ROUNDS_APART_MS)}
    )
    deadline = time.monotonic() + WAIT_S
    while not any(status.rounds >= 1 for status in iceberg_driver_status(TOPIC)):
        assert time.monotonic() < deadline, f"no first round of {TOPIC}: {iceberg_driver_status(TOPIC)}"
        time.sleep(0.1)
    table = load_or_create_table(open_catalog(catalog_properties(config)), ("raybroker", TOPIC), "")
    with Producer(key_serializer=_identity, value_serializer=_identity) as producer:
        translated = _produce(producer, 0, 60)
        assert translate_once(TOPIC, table, Broker.connect()).rows == 60
        tail = _produce(producer, 60, 30)
    offsets = table_offsets(table.refresh())
    for partition, offset in offsets.items():
        Admin().delete_records(TOPIC, partition, offset)

    combined = read_topic(TOPIC, history="table", value_format="string")
    assert _rows(combined) == sorted(translated + tail)
    assert _rows(read_topic(TOPIC, value_format="string")) == sorted(tail)
    assert set(combined.schema().names) == set(read_topic(TOPIC).schema().names)


def test_a_read_the_table_cannot_answer_is_refused_before_it_starts(config: BrokerConfig) -> None:
    Admin().create_topic("history-plain", 1)
    with pytest.raises(InvalidRequestError, match=r"iceberg\.mode=off"):
        read_topic("history-plain", history="table")
    with pytest.raises(InvalidRequestError, match="start='earliest'"):
        read_topic("history-plain", history="table", start=5)
    with pytest.raises(InvalidRequestError, match="history must be 'log' or 'table'"):
        read_topic("history-plain", history="iceberg")

"""What the Iceberg reliability tests hold a topic's table against: the topic's records as a read_committed consumer
reads them (the oracle), the table's rows in the same shape, and the wait for the table to reach the log's last
stable offsets."""

from __future__ import annotations

import time

from actors.clients.consumer import Consumer
from cluster.iceberg.catalog import catalog_properties, open_catalog
from cluster.iceberg.translation_driver import TRANSLATING
from cluster.iceberg.translation_driver_actor import iceberg_driver_status
from storage.config.broker_config import BrokerConfig
from tests.reliability.broker_support import wait_for

# (partition, offset, key, value), as the table holds a record.
Row = tuple[int, int, bytes | None, bytes | None]


def _identity(data: bytes) -> bytes:
    return data


def read_committed(topic: str, partitions: int, catch_up_s: float) -> tuple[list[Row], dict[int, int]]:
    """Every record a read_committed consumer reads from the topic, sorted, and each partition's last stable
    offset."""
    tps = [(topic, partition) for partition in range(partitions)]
    with Consumer(isolation_level="read_committed", value_deserializer=_identity) as consumer:
        consumer.assign(tps)
        consumer.seek_to_end()
        ends = {tp[1]: consumer.position(tp) for tp in tps}
        consumer.seek_to_beginning()
        rows: list[Row] = []
        deadline = time.monotonic() + catch_up_s
        while any(consumer.position(tp) < ends[tp[1]] for tp in tps):
            assert time.monotonic() < deadline, "the read_committed read did not reach the last stable offsets"
            records = consumer.poll(500)
            rows.extend((r.partition, r.offset, r.key, r.value) for r in records if r.offset < ends[r.partition])
    return sorted(rows), ends


def wait_for_table(topic: str, ends: dict[int, int], catch_up_s: float) -> None:
    """Waits until the topic translates and its table's offsets are `ends`."""

    def caught_up() -> bool:
        statuses = iceberg_driver_status(topic)
        held = {p.partition: p.table_offset for p in statuses[0].partitions} if statuses else {}
        return bool(statuses) and statuses[0].state == TRANSLATING and held == ends

    wait_for(caught_up, catch_up_s, f"the table of {topic} to reach {ends}: {iceberg_driver_status(topic)}")


def table_rows(config: BrokerConfig, topic: str) -> list[Row]:
    """The rows of the topic's table (`raybroker.<topic>` in the broker's catalog), sorted."""
    table = open_catalog(catalog_properties(config)).load_table(("raybroker", topic))
    rows = table.scan(selected_fields=("partition", "offset", "key", "value")).to_arrow().to_pylist()
    return sorted((row["partition"], row["offset"], row["key"], row["value"]) for row in rows)

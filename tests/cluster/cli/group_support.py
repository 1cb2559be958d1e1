"""A consumer group of raybroker's Python `Consumer` with known commits, for the commands that show groups."""

from __future__ import annotations

from collections.abc import Mapping

from actors.clients.admin import Admin
from actors.clients.consumer import Consumer
from actors.clients.producer import Producer


def committed_group(topic: str, group: str, records: int, committed: Mapping[int, int]) -> None:
    """Creates `topic` with 2 partitions, sends `records` values to them in turn (record i to partition i % 2) and
    commits `committed` (partition -> offset) for `group`, which then has no members."""
    Admin().create_topic(topic, partitions=2)
    producer = Producer()
    try:
        for index in range(records):
            producer.send(topic, value=f"v{index}".encode(), partition=index % 2)
        producer.flush()
    finally:
        producer.close()
    consumer = Consumer(group_id=group)
    try:
        consumer.commit({(topic, partition): offset for partition, offset in committed.items()})
    finally:
        consumer.close()

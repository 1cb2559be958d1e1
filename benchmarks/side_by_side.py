"""raybroker and Apache Kafka running side by side for the benchmarks that drive both with the same client.

`beside_kafka(ctx, listener_properties, version, kafka_properties, broker_properties)` starts the run's shared
broker (with `broker_properties`) and a Kafka listener on a free port of 127.0.0.1, and one Apache Kafka node of
`version` (with `kafka_properties` in its `server.properties`), and yields their bootstrap servers by name
("raybroker", "kafka"); both stop when the block ends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from benchmarks.common import BenchContext
from benchmarks.kafka_broker import KAFKA_VERSION, KafkaBroker

LISTENERS = "PLAINTEXT://127.0.0.1:0"


@contextmanager
def beside_kafka(
    ctx: BenchContext,
    listener_properties: Mapping[str, str],
    version: str = KAFKA_VERSION,
    kafka_properties: Mapping[str, str] | None = None,
    broker_properties: Mapping[str, str] | None = None,
) -> Iterator[dict[str, str]]:
    """The bootstrap servers of raybroker's listener (with `listener_properties`, over the run's broker with
    `broker_properties`) and of Apache Kafka `version`."""
    from cluster.protocol.listener import KafkaListener

    ctx.environment.broker(dict(broker_properties or {}))
    ctx.progress(f"  starting Apache Kafka {version} (fetched from Maven Central on the first run) ...")
    with (
        KafkaBroker(dict(kafka_properties or {}), version=version) as kafka,
        KafkaListener({"listeners": LISTENERS, **listener_properties}) as ours,
    ):
        yield {"raybroker": ours.bootstrap_servers, "kafka": kafka.bootstrap_servers}

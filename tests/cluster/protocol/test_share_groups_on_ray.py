"""Share groups (KIP-932) on the broker of a real local Ray: the Java `KafkaShareConsumer` 4.2 sequence of
`test_share_group_clients` (whose deliveries Apache Kafka 4.2 gives there, `EXPECTED`) through a Kafka listener
over Ray's partition actors and group coordinator actor: each record accepted once, a RELEASEd one redelivered with
delivery count 2, a REJECTed one never again, one RELEASEd every time archived after the delivery limit, and the
group told over the wire as Kafka tells it; and a group's `share.auto.offset.reset=earliest` set over the wire (the
controller actor keeps it and tells the group coordinator actor) makes its member read records produced before it
joined, as on Kafka (`test_group_configs`). The broker runs with `kafka4`'s share settings (`group.share.*` keys in
its properties, as `server.properties` sets them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.protocol.client import WireClient
from cluster.protocol.listener import KafkaListener
from tests.cluster.protocol.conftest import SHARE_GROUP_SETTINGS
from tests.cluster.protocol.test_group_configs import (
    EARLY_RECORDS,
    RESET,
    SET,
    alter,
    described_once,
    read_from_the_beginning,
)
from tests.cluster.protocol.test_share_group_clients import EXPECTED, assert_told_as_kafka_tells_it, share_steps

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(
        **{
            key.replace(".", "_"): value
            for key, value in SHARE_GROUP_SETTINGS.items()
            if key.startswith("group.share.")
        }
    )
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def test_two_share_consumers_accept_release_and_reject_on_ray_as_on_kafka(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    deliveries, group = share_steps(share_classpath, ray_listener.bootstrap_servers, tmp_path)
    assert deliveries == EXPECTED
    assert_told_as_kafka_tells_it(group)


def test_a_share_group_set_to_earliest_reads_from_the_beginning_on_ray(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    bootstrap = ray_listener.bootstrap_servers
    with WireClient(bootstrap) as client:
        assert alter(client, "from-start", [(RESET, SET, "earliest")], False) == (0, None)
        described = described_once(client, "from-start", lambda entries: entries[RESET][1] == "earliest")
    assert dict((entry[0], entry[1:4]) for entry in described[1:])[RESET] == ("earliest", False, 8)
    assert read_from_the_beginning(share_classpath, bootstrap, "from-start", tmp_path) == EARLY_RECORDS

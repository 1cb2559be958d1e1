"""Share groups (KIP-932) on the broker of a real local Ray: the Java `KafkaShareConsumer` 4.2 sequence of
`test_share_group_clients` (whose deliveries Apache Kafka 4.2 gives there, `EXPECTED`) through a Kafka listener
over Ray's partition actors and group coordinator actor: each record accepted once, a RELEASEd one redelivered with
delivery count 2, a REJECTed one never again, one RELEASEd every time archived after the delivery limit, and the
group told over the wire as Kafka tells it. The broker runs with `kafka4`'s share settings (`group.share.*` keys in
its properties, as `server.properties` sets them). Across a restart of the whole broker on its log dirs (partition
actors and group coordinator actor started again), `test_share_group_clients.restart_steps`: the member after it
gets exactly the records not accepted before, the share-partitions' state read back from `__share_group_state`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.protocol.listener import KafkaListener
from tests.cluster.protocol.conftest import SHARE_GROUP_SETTINGS
from tests.cluster.protocol.test_share_group_clients import (
    EXPECTED,
    RESTART_EXPECTED,
    assert_told_as_kafka_tells_it,
    restart_steps,
    share_steps,
)

pytestmark = pytest.mark.ray


SHARE_SETTINGS = {
    key.replace(".", "_"): value for key, value in SHARE_GROUP_SETTINGS.items() if key.startswith("group.share.")
}


@pytest.fixture(scope="module")
def ray_listener(start_test_broker: Callable[..., tuple[Any, Any]]) -> Iterator[KafkaListener]:
    start_test_broker(**SHARE_SETTINGS)
    with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
        yield started


def test_two_share_consumers_accept_release_and_reject_on_ray_as_on_kafka(
    share_classpath: str, ray_listener: KafkaListener, tmp_path: Path
) -> None:
    deliveries, group = share_steps(share_classpath, ray_listener.bootstrap_servers, tmp_path)
    assert deliveries == EXPECTED
    assert_told_as_kafka_tells_it(group)


def test_a_broker_restart_on_ray_delivers_only_what_was_not_accepted(
    share_classpath: str, start_test_broker: Callable[..., tuple[Any, Any]], tmp_path: Path
) -> None:
    log_dirs: list[Path] | None = None

    @contextlib.contextmanager
    def listen() -> Iterator[str]:
        nonlocal log_dirs
        _, log_dirs = start_test_broker(log_dirs=log_dirs, **SHARE_SETTINGS)
        with KafkaListener({"listeners": "PLAINTEXT://127.0.0.1:0"}) as started:
            yield started.bootstrap_servers

    assert restart_steps(share_classpath, listen, tmp_path) == RESTART_EXPECTED

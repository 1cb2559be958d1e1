"""A partition actor's replica moved into the other log dir of its node (AlterReplicaLogDirs) on a real local Ray,
while an idempotent producer writes to it: every record acknowledged reads back once, in order, from the new dir; the
old folder is gone (renamed `-delete`, then removed); the controller records the replica's new dir; and the actor,
killed afterwards and restarted by Ray with the arguments of its first start, reopens the moved folder, not the old
one."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.calls import call
from actors.clients.broker import Broker
from actors.clients.producer import Producer
from storage import file_names
from tests.actors.server.test_log_manager import read_all
from tests.actors.support import manager, wait_for
from tests.conftest import ONE_ACTOR_PER_PARTITION

pytestmark = pytest.mark.ray

StartBroker = Callable[..., tuple[Broker, list[Path]]]


@pytest.fixture(scope="module")
def broker(start_test_broker: StartBroker) -> tuple[Broker, list[Path]]:
    return start_test_broker(log_dirs_count=2, **ONE_ACTOR_PER_PARTITION)


def placement_of(topic: str) -> Any:
    (found,) = [p for p in call(manager().partitions.remote()) if p.topic == topic]
    return found


def test_a_replica_moves_while_a_producer_writes(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("moving", 1, {"segment.bytes": "16384"}))
    source = Path(placement_of("moving").directory)
    target = next(str(d) for d in call(manager().dirs.remote()) if Path(d) != source)
    sent: list[bytes] = []
    stop = threading.Event()

    def produce() -> None:
        with Producer(linger_ms=0) as producer:
            while not stop.is_set() or len(sent) < 3000:
                value = b"record-%06d" % len(sent) + b"." * 100
                producer.send("moving", value=value, partition=0).result()
                sent.append(value)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_for(lambda: len(sent) >= 1000, what="records written before the move")
        answers = call(manager().alter_replica_log_dirs.remote({("moving", 0): target}))
        assert answers == {("moving", 0): None}
        wait_for(lambda: placement_of("moving").directory == target, timeout_s=60, what="the move")
    finally:
        stop.set()
        writer.join()
    handle = client.partition("moving", 0)
    state = call(handle.state.remote())
    assert state.directory == str(Path(target) / "moving-0") and state.future_directory == ""
    assert [record.value for record in read_all(handle)] == sent
    assert not (source / "moving-0").exists()
    # Renamed `-delete`, then removed after `file.delete.delay.ms` (500 ms in the test broker).
    wait_for(lambda: not [path for path in source.iterdir() if path.name.startswith("moving-0")], what="old folder")
    placement = placement_of("moving")
    recorded = call(client.controller.partition_state.remote("moving", 0))
    assert recorded.directories == (placement.directory_id,)
    ray.kill(handle, no_restart=False)
    wait_for(lambda: _reads(handle) == sent, timeout_s=60, what="the restarted actor's records")
    assert call(handle.state.remote()).directory == str(Path(target) / file_names.partition_dir_name("moving", 0))


def _reads(handle: Any) -> list[bytes | None] | None:
    try:
        return [record.value for record in read_all(handle)]
    except Exception:
        return None

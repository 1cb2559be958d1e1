"""The group coordinator: commits land on the group's `__consumer_offsets` partition as Kafka's records, and
committed offsets survive a coordinator restart and a broker restart, and a deleted `__consumer_offsets` is created
again by the next commit (the record codec is tested in tests/storage/records/test_consumer_offsets.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from storage.errors import InvalidGroupIdError, InvalidRequestError
from storage.records.consumer_offsets import (
    OffsetAndMetadata,
    decode_offset_commit_value,
    encode_offset_commit_key,
    partition_for_group,
)
from storage.records.record import Record
from storage.records.record_batch import RecordBatchBuilder, iter_batches

# --- the actor, on a real broker --------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(start_test_broker: Any) -> tuple[Any, list[Path]]:
    return start_test_broker(log_dirs_count=1)


def coordinator() -> Any:
    from actors.calls import get_actor
    from actors.options import group_coordinator_name

    return get_actor(group_coordinator_name())


def process_id(handle: Any) -> int:
    """The pid of the actor's process, asked through Ray's `__ray_call__` (runs a function on the actor)."""
    import ray

    return ray.get(handle.__ray_call__.remote(lambda _: os.getpid()))


def wait_for_new_process(handle: Any, old_pid: int, timeout_s: float = 60) -> None:
    """Calls made while Ray restarts an actor fail at once, and `ray.kill` returns before the actor is dead:
    ask until a process other than `old_pid` answers."""
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if process_id(handle) != old_pid:
                return
        except RayActorError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"the actor was not restarted within {timeout_s} s")


def offsets_partition_records(partition: int) -> list[Record]:
    import ray

    from actors.server.partition_lookup import partition_actor

    data = ray.get(partition_actor("__consumer_offsets", partition).read.remote(0, 1 << 20))
    return [record for batch in iter_batches(data) for record in batch.records()]


@pytest.mark.ray
def test_a_commit_appends_kafka_records_to_the_groups_partition(broker: tuple[Any, list[Path]]) -> None:
    from actors.calls import call

    group = "append-check"
    partition = partition_for_group(group, 2)
    before = len(offsets_partition_records(partition))
    call(coordinator().commit.remote(group, {("orders", 0): 17, ("orders", 1): 4}))
    written = offsets_partition_records(partition)[before:]
    assert [(r.key, decode_offset_commit_value(r.value)) for r in written if r.value is not None] == [
        (encode_offset_commit_key(group, "orders", 0), OffsetAndMetadata(17)),
        (encode_offset_commit_key(group, "orders", 1), OffsetAndMetadata(4)),
    ]
    assert call(coordinator().partition_for.remote(group)) == partition
    assert call(coordinator().fetch_committed.remote(group, [("orders", 0), ("orders", 1), ("orders", 2)])) == {
        ("orders", 0): OffsetAndMetadata(17),
        ("orders", 1): OffsetAndMetadata(4),
        ("orders", 2): None,
    }
    assert call(coordinator().fetch_committed.remote("other-group", [("orders", 0)])) == {("orders", 0): None}


@pytest.mark.ray
def test_a_restarted_coordinator_rebuilds_its_cache_from_the_log(broker: tuple[Any, list[Path]]) -> None:
    import ray

    from actors.calls import call
    from actors.server.partition_lookup import partition_actor

    call(coordinator().commit.remote("rebuild", {("a", 0): 1}))
    call(coordinator().commit.remote("rebuild", {("a", 0): 5, ("a", 1): 6}))
    # A tombstone written straight to the log, behind the coordinator's back: only a replay can see it.
    tombstone = RecordBatchBuilder()
    tombstone.append(encode_offset_commit_key("rebuild", "a", 1), None, timestamp=0)
    call(partition_actor("__consumer_offsets", partition_for_group("rebuild", 2)).append.remote(tombstone.build()))
    old_pid = process_id(coordinator())
    ray.kill(coordinator(), no_restart=False)
    wait_for_new_process(coordinator(), old_pid)
    assert call(coordinator().fetch_committed.remote("rebuild", [("a", 0), ("a", 1)])) == {
        ("a", 0): OffsetAndMetadata(5),
        ("a", 1): None,
    }


@pytest.mark.ray
def test_bad_commits_raise_typed_errors(broker: tuple[Any, list[Path]]) -> None:
    from actors.calls import call

    with pytest.raises(InvalidGroupIdError):
        call(coordinator().commit.remote("", {("a", 0): 1}))
    with pytest.raises(InvalidRequestError):
        call(coordinator().commit.remote("g", {("a", 0): -1}))
    with pytest.raises(InvalidRequestError):
        call(coordinator().fetch_committed.remote("g", [("a", "0")]))


@pytest.mark.ray
def test_committed_offsets_survive_a_broker_restart_and_a_consumer_resumes_there(
    broker: tuple[Any, list[Path]], start_test_broker: Any
) -> None:
    from actors import Admin, Consumer, Producer

    _, log_dirs = broker
    Admin().create_topic("resume", 1)
    with Producer(linger_ms=0) as producer:
        for index in range(10):
            producer.send("resume", f"v{index}".encode())
    with Consumer(group_id="resumer", auto_offset_reset="earliest") as consumer:
        consumer.assign([("resume", 0)])
        first = consumer.poll(timeout_ms=5000, max_records=4)
        assert [r.value for r in first] == [b"v0", b"v1", b"v2", b"v3"]
        consumer.commit()
        assert consumer.committed(("resume", 0)) == 4

    start_test_broker(log_dirs=log_dirs)  # stops the running broker first

    with Consumer(group_id="resumer", auto_offset_reset="earliest") as consumer:
        assert consumer.committed(("resume", 0)) == 4
        consumer.assign([("resume", 0)])
        assert consumer.position(("resume", 0)) == 4
        rest = consumer.poll(timeout_ms=5000)
        assert [r.value for r in rest] == [f"v{i}".encode() for i in range(4, 10)]


# Deletes `__consumer_offsets`: stays last in the module.
@pytest.mark.ray
def test_a_commit_after_the_offsets_topic_was_deleted_creates_it_again(broker: tuple[Any, list[Path]]) -> None:
    """As Kafka: once a client deleted `__consumer_offsets`, the next commit creates it again with
    `offsets.topic.num.partitions` partitions (2 here) and its compacted config, and is written; every offset
    committed before is gone."""
    from actors import Admin, Consumer
    from actors.core.groups.offsets_topic import CONSUMER_OFFSETS_CONFIG

    with Consumer(group_id="forgotten") as consumer:
        consumer.commit({("kept", 0): 3})
    with Consumer(group_id="recommitted") as consumer:
        consumer.commit({("kept", 0): 4})
        admin = Admin()
        admin.delete_topic("__consumer_offsets")
        consumer.commit({("kept", 1): 9})
        assert consumer.committed(("kept", 1)) == 9
        assert consumer.committed(("kept", 0)) is None
    with Consumer(group_id="forgotten") as consumer:
        assert consumer.committed(("kept", 0)) is None
    recreated = admin.describe_topic("__consumer_offsets")
    assert (len(recreated.partitions), recreated.config) == (2, CONSUMER_OFFSETS_CONFIG)

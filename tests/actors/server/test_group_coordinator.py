"""The group coordinator: Kafka's offset-commit records (checked against logs a real Kafka broker wrote), the
group -> partition rule, and committed offsets that survive a coordinator restart and a broker restart."""

from __future__ import annotations

import os
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.server.group_coordinator import (
    apply_offset_commit,
    decode_offset_commit_key,
    decode_offset_commit_offset,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hashcode,
    partition_for_group,
)
from storage.errors import CorruptRecordError, InvalidGroupIdError, InvalidRequestError
from storage.records.record_batch import Record, RecordBatchBuilder, iter_batches

# Kafka's default `offsets.topic.num.partitions`, which every sample broker used.
KAFKA_OFFSETS_PARTITIONS = 50


def kafka_offset_records(samples: Path) -> Iterator[tuple[int, Record]]:
    """(partition, record) of every record in every `__consumer_offsets` segment of the real Kafka samples."""
    for log in sorted(samples.glob("*/*/__consumer_offsets-*/*.log")):
        partition = int(re.fullmatch(r"__consumer_offsets-(\d+)", log.parent.name).group(1))  # type: ignore[union-attr]
        for batch in iter_batches(log.read_bytes()):
            for record in batch.records():
                yield partition, record


def version(data: bytes) -> int:
    return struct.unpack_from(">h", data)[0]


# --- the record format and the placement rule, without Ray ----------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("polygenelubricants", -(2**31)),  # the classic string whose Java hash is Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
    ],
)
def test_java_string_hashcode_matches_java(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_a_group_whose_hash_is_min_int_goes_to_partition_zero() -> None:
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0, where Math.abs would stay negative.
    assert partition_for_group("polygenelubricants", 7) == 0


def test_every_commit_a_kafka_broker_wrote_sits_on_the_partition_its_group_hashes_to(kafka_samples_dir: Path) -> None:
    checked = 0
    for partition, record in kafka_offset_records(kafka_samples_dir):
        assert record.key is not None
        if version(record.key) not in (0, 1):
            continue
        decoded = decode_offset_commit_key(record.key)
        assert decoded is not None
        group, topic, topic_partition = decoded
        assert partition_for_group(group, KAFKA_OFFSETS_PARTITIONS) == partition
        if version(record.key) == 1:
            assert encode_offset_commit_key(group, topic, topic_partition) == record.key
        checked += 1
    assert checked > 9_000


def test_version_3_values_are_byte_identical_to_kafkas(kafka_samples_dir: Path) -> None:
    checked = 0
    for _, record in kafka_offset_records(kafka_samples_dir):
        assert record.key is not None
        if version(record.key) != 1 or record.value is None or version(record.value) != 3:
            continue
        _, offset, leader_epoch, metadata_length = struct.unpack_from(">hqih", record.value)
        metadata = record.value[16 : 16 + metadata_length].decode()
        (commit_timestamp,) = struct.unpack_from(">q", record.value, 16 + metadata_length)
        assert decode_offset_commit_offset(record.value) == offset
        if leader_epoch == -1:
            assert encode_offset_commit_value(offset, metadata, commit_timestamp) == record.value
            checked += 1
    assert checked > 100


def test_replaying_a_kafka_partition_keeps_the_latest_offset_per_key_and_honours_tombstones(
    kafka_samples_dir: Path,
) -> None:
    # Segment 0 holds 858 commits of one group; segment 862 holds tombstones for all 6 of its keys (the group
    # was deleted) and group-metadata records. The cache is checked after each segment.
    folder = kafka_samples_dir / "NikhilDighe9975__kafka_setup@8639fa41" / "kafka-logs" / "__consumer_offsets-12"
    latest: dict[bytes, bytes | None] = {}
    replayed: dict[Any, int] = {}
    sizes = []
    for log in sorted(folder.glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            for record in batch.records():
                assert record.key is not None
                if version(record.key) in (0, 1):
                    latest[record.key] = record.value
                apply_offset_commit(replayed, record.key, record.value)
        expected = {
            decode_offset_commit_key(key): struct.unpack_from(">q", value, 2)[0]
            for key, value in latest.items()
            if value is not None
        }
        assert replayed == expected
        sizes.append(len(replayed))
    assert sizes == [6, 0]


def test_a_tombstone_removes_a_commit_and_other_record_kinds_change_nothing() -> None:
    offsets: dict[Any, int] = {}
    key = encode_offset_commit_key("g", "t", 3)
    apply_offset_commit(offsets, key, encode_offset_commit_value(42, "", 0))
    apply_offset_commit(offsets, struct.pack(">hh", 2, 1) + b"g", b"group metadata")
    apply_offset_commit(offsets, None, b"no key")
    assert offsets == {("g", "t", 3): 42}
    apply_offset_commit(offsets, key, None)
    assert offsets == {}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00", None),  # shorter than the version
        (struct.pack(">hh", 1, 10) + b"short", None),  # group length runs past the end
        (encode_offset_commit_key("g", "t", 0)[:-2], None),  # partition cut
        (encode_offset_commit_key("g", "t", 0), b"\x00\x03\x00"),  # value cut
        (encode_offset_commit_key("g", "t", 0), struct.pack(">hq", 9, 1)),  # unknown value version
    ],
)
def test_malformed_offset_records_raise_corrupt_record(key: bytes, value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        apply_offset_commit({}, key, value)


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

    from actors.calls import partition_actor

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
    assert [(r.key, decode_offset_commit_offset(r.value)) for r in written if r.value is not None] == [
        (encode_offset_commit_key(group, "orders", 0), 17),
        (encode_offset_commit_key(group, "orders", 1), 4),
    ]
    assert call(coordinator().partition_for.remote(group)) == partition
    assert call(coordinator().fetch_committed.remote(group, [("orders", 0), ("orders", 1), ("orders", 2)])) == {
        ("orders", 0): 17,
        ("orders", 1): 4,
        ("orders", 2): None,
    }
    assert call(coordinator().fetch_committed.remote("other-group", [("orders", 0)])) == {("orders", 0): None}


@pytest.mark.ray
def test_a_restarted_coordinator_rebuilds_its_cache_from_the_log(broker: tuple[Any, list[Path]]) -> None:
    import ray

    from actors.calls import call, partition_actor

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
        ("a", 0): 5,
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

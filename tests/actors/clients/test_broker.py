"""The broker on a real local Ray, through raw partition handles and the controller: produce from several
threads and read back against an oracle, Kafka's files on disk, restart with the same log dirs, a partition
actor killed mid-stream, and bad input refused with the project's typed errors."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import ray

from actors.calls import call
from actors.clients.broker import Broker, stop_broker
from actors.options import NAMESPACE, log_manager_name
from storage import file_names
from storage.errors import (
    BrokerNotAvailableError,
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    StorageError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage.logdir.log_dirs import METADATA_TOPIC
from storage.partition.log import Log, LogAppendInfo
from storage.records.record_batch import (
    CRC_OFFSET,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
)
from tests.actors.support import now_ms, wait_for
from tests.conftest import ONE_ACTOR_PER_PARTITION
from tests.storage.builders import Rec, as_recs, batch_bytes, kafka_decode

pytestmark = pytest.mark.ray

StartBroker = Callable[..., tuple[Broker, list[Path]]]


def make_records(tag: str, count: int) -> list[Rec]:
    stamp = now_ms()
    return [Rec(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), stamp + i) for i in range(count)]


def append(handle: Any, batch: bytes) -> LogAppendInfo:
    return call(handle.append.remote(batch), timeout_s=60)


def read_range(handle: Any, start: int, end: int) -> list[tuple[int, Rec]]:
    """(offset, record) for every record in [start, end), fetched in pieces of at most 4 KiB."""
    out: list[tuple[int, Rec]] = []
    offset = start
    while offset < end:
        chunk = [r for r in kafka_decode(call(handle.read.remote(offset, 4096), timeout_s=60)) if r.offset >= offset]
        assert chunk, f"no progress at offset {offset}"
        out.extend((r.offset, as_recs([r])[0]) for r in chunk if r.offset < end)
        offset = chunk[-1].offset + 1
    return out


def leo(handle: Any) -> int:
    return call(handle.offsets.remote(), timeout_s=60)[2]


def partition_folders(log_dirs: list[Path], topic: str) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for directory in log_dirs:
        for entry in directory.iterdir():
            parsed = file_names.parse_partition_dir_name(entry.name)
            if parsed is not None and parsed[0] == topic:
                assert parsed[1] not in found, f"{entry.name} in two dirs"
                found[parsed[1]] = entry
    return found


def read_checkpoint_text(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's offset checkpoint text, parsed independently of `storage.files.checkpoint_file`."""
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == "", f"{path} does not end with a newline"
    assert lines[0] == "0", f"{path}: version line {lines[0]!r}"
    count = int(lines[1])
    entries = lines[2:-1]
    assert len(entries) == count
    parsed = {}
    for line in entries:
        topic, partition, offset = line.split(" ")
        parsed[(topic, int(partition))] = int(offset)
    return parsed


@pytest.fixture(scope="module")
def broker(start_test_broker: StartBroker) -> tuple[Broker, list[Path]]:
    """One broker over two fresh log dirs, shared by the module; the restart test, which stops it, comes last."""
    return start_test_broker(**ONE_ACTOR_PER_PARTITION)


# --- end to end ------------------------------------------------------------------------------------


def test_produce_from_threads_reads_back_and_is_kafkas_format_on_disk(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("e2e", 6))
    handles = [client.partition("e2e", p) for p in range(6)]
    oracle: dict[tuple[int, int], Rec] = {}
    oracle_lock = threading.Lock()

    def producer(thread: int) -> None:
        rng = random.Random(thread)
        for step in range(15):
            partition = rng.randrange(6)
            batch = make_records(f"t{thread}s{step}", rng.randint(1, 5))
            info = append(handles[partition], batch_bytes(batch))
            assert info.last_offset - info.first_offset + 1 == len(batch)
            with oracle_lock:
                for delta, record in enumerate(batch):
                    key = (partition, info.first_offset + delta)
                    assert key not in oracle, f"offset {key} assigned twice"
                    oracle[key] = record

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(producer, range(4)))

    for partition, handle in enumerate(handles):
        expected = sorted((offset, rec) for (p, offset), rec in oracle.items() if p == partition)
        assert [offset for offset, _ in expected] == list(range(len(expected)))  # contiguous from 0
        assert leo(handle) == len(expected)
        assert read_range(handle, 0, len(expected)) == expected

    # Kafka's placement: every partition (6 of e2e, 2 of __consumer_offsets) in the dir with the fewest.
    counts = [sum(1 for entry in d.iterdir() if file_names.parse_partition_dir_name(entry.name)) for d in log_dirs]
    assert sum(counts) - 1 == 6 + 2 and max(counts) - min(counts) <= 1  # __cluster_metadata-0 is the extra one
    folders = partition_folders(log_dirs, "e2e")
    assert sorted(folders) == list(range(6))
    for partition, folder in folders.items():
        on_disk = []
        for path in sorted(folder.glob(f"*{file_names.LOG_SUFFIX}")):
            on_disk.extend((r.offset, as_recs([r])[0]) for r in kafka_decode(path.read_bytes()))
        assert on_disk == sorted((o, rec) for (p, o), rec in oracle.items() if p == partition)

    # The scheduler's high-watermark checkpoint (interval 500 ms) reaches every partition's end offset.
    def hw_checkpointed() -> bool:
        found: dict[tuple[str, int], int] = {}
        for directory in log_dirs:
            path = directory / file_names.REPLICATION_OFFSET_CHECKPOINT
            if path.exists() and path.stat().st_size:
                found.update(read_checkpoint_text(path))
        return all(found.get(("e2e", p)) == leo(h) for p, h in enumerate(handles))

    wait_for(hw_checkpointed, what="replication-offset-checkpoint")
    for directory in log_dirs:
        for name in (file_names.RECOVERY_POINT_CHECKPOINT, file_names.LOG_START_OFFSET_CHECKPOINT):
            read_checkpoint_text(directory / name)
        meta = dict(
            line.split("=", 1)
            for line in (directory / file_names.META_PROPERTIES).read_text().splitlines()
            if line and not line.startswith("#")
        )
        assert meta["version"] == "1" and meta["node.id"] == "0"
        assert meta["cluster.id"] == call(client.controller.cluster_id.remote())
        assert len(meta["directory.id"]) == 22


def test_create_topic_twice_is_refused(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("twice", 1))
    with pytest.raises(TopicExistsError):
        call(client.controller.create_topic.remote("twice", 2))
    assert len(client.topic("twice").partitions) == 1


# --- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "partition"),
    [("no-such-topic", 0), ("bad", 1), ("bad", -1), ("bad", "0"), ("bad", True), (["bad"], 0), (None, 0)],
)
def test_unknown_topic_or_partition(broker: tuple[Broker, list[Path]], topic: Any, partition: Any) -> None:
    client, _ = broker
    if "bad" not in call(client.controller.list_topics.remote()):
        call(client.controller.create_topic.remote("bad", 1))
    with pytest.raises(UnknownTopicOrPartitionError):
        client.partition(topic, partition)
    with pytest.raises(UnknownTopicOrPartitionError):
        client.node_of(topic, partition)
    assert client.node_of("bad", 0) == ray.get_runtime_context().get_node_id()


def _no_new_folders(client: Broker, log_dirs: list[Path], action: Callable[[], Any], error: type[Exception]) -> None:
    """`action` raises exactly `error` (not a Ray wrapper) and leaves the topics and the log dirs as they were."""
    topics = call(client.controller.list_topics.remote(True))
    folders = {d: sorted(entry.name for entry in d.iterdir() if entry.is_dir()) for d in log_dirs}
    with pytest.raises(error) as raised:
        action()
    assert type(raised.value).__module__ == "storage.errors"
    assert call(client.controller.list_topics.remote(True)) == topics
    assert {d: sorted(entry.name for entry in d.iterdir() if entry.is_dir()) for d in log_dirs} == folders


@pytest.mark.parametrize(
    "name", ["../x", "a/b", "/tmp/abs", "a\x00b", "x" * 250, ".", "..", "", "a b", "ü", 7, None, METADATA_TOPIC]
)
def test_invalid_topic_names_are_refused(broker: tuple[Broker, list[Path]], name: str) -> None:
    client, log_dirs = broker
    _no_new_folders(client, log_dirs, lambda: call(client.controller.create_topic.remote(name, 1)), InvalidTopicError)


@pytest.mark.parametrize("count", [0, -1, 10**9, "3", 2.0, True, None])
def test_invalid_partition_counts_are_refused(broker: tuple[Broker, list[Path]], count: Any) -> None:
    client, log_dirs = broker
    _no_new_folders(
        client, log_dirs, lambda: call(client.controller.create_topic.remote("counts", count)), InvalidPartitionsError
    )


@pytest.mark.parametrize(
    "config",
    [
        {"no.such.config": "1"},
        {"segment.bytes": "abc"},
        {"segment.bytes": "1.5"},
        {"retention.ms": "-5"},
        {"segment.bytes": "-1"},
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "2"},
    ],
)
def test_bad_topic_configs_are_refused(broker: tuple[Broker, list[Path]], config: dict[str, str]) -> None:
    client, log_dirs = broker
    _no_new_folders(
        client, log_dirs, lambda: call(client.controller.create_topic.remote("configs", 1, config)), InvalidConfigError
    )


@pytest.mark.parametrize("config", [["segment.bytes"], "segment.bytes=1024", 5])
def test_configs_that_are_not_mappings_are_refused(broker: tuple[Broker, list[Path]], config: Any) -> None:
    client, log_dirs = broker
    _no_new_folders(
        client, log_dirs, lambda: call(client.controller.create_topic.remote("configs", 1, config)), InvalidConfigError
    )


def test_bad_config_change_is_refused_and_the_old_one_kept(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("alter", 1, {"segment.bytes": "4096"}))
    with pytest.raises(InvalidConfigError):
        call(client.controller.alter_topic_config.remote("alter", {"segment.bytes": "x"}))
    assert client.topic("alter").config == {"segment.bytes": "4096"}


def _corrupt(data: bytes, position: int, value: bytes) -> bytes:
    return data[:position] + value + data[position + len(value) :]


BAD_BATCHES: dict[str, tuple[Callable[[bytes], bytes], type[StorageError]]] = {
    "base offset 5": (lambda good: _corrupt(good, 0, (5).to_bytes(8, "big")), InvalidRecordError),
    "crc": (lambda good: _corrupt(good, CRC_OFFSET, b"\xde\xad\xbe\xef"), CorruptRecordError),
    "magic 9": (lambda good: _corrupt(good, MAGIC_OFFSET, b"\x09"), CorruptRecordError),
    "count": (lambda good: _corrupt(good, RECORDS_COUNT_OFFSET, (7).to_bytes(4, "big")), StorageError),
    "control": (
        lambda good: build_control_batch(ControlRecordType.ABORT, timestamp=now_ms(), producer_id=1, producer_epoch=0),
        InvalidRecordError,
    ),
    "not bytes": (lambda good: "text", InvalidRecordError),  # type: ignore[return-value,arg-type]
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_batches_are_refused_with_typed_errors(broker: tuple[Broker, list[Path]], case: str) -> None:
    client, log_dirs = broker
    if "batches" not in call(client.controller.list_topics.remote()):
        call(client.controller.create_topic.remote("batches", 1))
    handle = client.partition("batches", 0)
    good = batch_bytes(make_records("ok", 2))
    append(handle, good)
    before = call(handle.offsets.remote())
    folder = partition_folders(log_dirs, "batches")[0]
    sizes = {p.name: p.stat().st_size for p in folder.glob(f"*{file_names.LOG_SUFFIX}")}
    make, error = BAD_BATCHES[case]
    with pytest.raises(error) as raised:
        append(handle, make(good))
    assert type(raised.value).__module__ == "storage.errors"
    assert call(handle.offsets.remote()) == before
    assert {p.name: p.stat().st_size for p in folder.glob(f"*{file_names.LOG_SUFFIX}")} == sizes


@pytest.mark.parametrize(
    ("offset", "max_bytes", "error"),
    [
        (-1, 1024, OffsetOutOfRangeError),
        (10**6, 1024, OffsetOutOfRangeError),
        ("0", 1024, OffsetOutOfRangeError),
        (0, -1, InvalidRequestError),
        (0, "1024", InvalidRequestError),
        (0, None, InvalidRequestError),
    ],
)
def test_bad_read_arguments_are_refused_with_typed_errors(
    broker: tuple[Broker, list[Path]], offset: Any, max_bytes: Any, error: type[Exception]
) -> None:
    client, _ = broker
    if "reads" not in call(client.controller.list_topics.remote()):
        call(client.controller.create_topic.remote("reads", 1))
        append(client.partition("reads", 0), batch_bytes(make_records("r", 3)))
    handle = client.partition("reads", 0)
    for method in (handle.read, handle.fetch):
        with pytest.raises(error):
            call(method.remote(offset, max_bytes))


# --- actors killed mid-stream ------------------------------------------------------------------------


def test_killed_partition_actor_recovers_every_acknowledged_append(broker: tuple[Broker, list[Path]]) -> None:
    client, _ = broker
    call(client.controller.create_topic.remote("crashy", 1, {"segment.bytes": "4096"}))
    handle = client.partition("crashy", 0)
    producer_id = call(client.controller.allocate_producer_id.remote())
    pid_before = call(handle.state.remote()).pid
    acknowledged: list[tuple[int, list[Rec]]] = []
    retries = 0
    restarted = threading.Event()

    def produce() -> None:
        nonlocal retries
        for sequence in range(0, 400, 4):
            if sequence == 360:
                restarted.wait(60)  # the kill is asynchronous: the last batches wait until it has landed
            batch = make_records(f"s{sequence}", 4)
            data = batch_bytes(batch, producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
            while True:
                try:
                    info = append(handle, data)
                    break
                except BrokerNotAvailableError:
                    retries += 1
                    time.sleep(0.05)
            acknowledged.append((info.first_offset, batch))

    writer = threading.Thread(target=produce)
    writer.start()
    wait_for(lambda: len(acknowledged) >= 25, what="appends before the kill")
    ray.kill(handle, no_restart=False)
    wait_for(lambda: restarts(handle) == 1, what="the partition actor's restart")
    restarted.set()
    writer.join(120)
    assert not writer.is_alive()
    assert len(acknowledged) == 100, f"{retries} retries"
    state = call(handle.state.remote())
    assert state.pid != pid_before
    assert state.log_end_offset == 400  # the in-flight retry was deduplicated, not written twice
    got = read_range(handle, 0, 400)
    expected = sorted((first + i, rec) for first, batch in acknowledged for i, rec in enumerate(batch))
    assert got == expected
    assert append(handle, batch_bytes(make_records("next", 1))).first_offset == 400


def test_killed_controller_comes_back_with_its_topics_and_brokers(broker: tuple[Broker, list[Path]]) -> None:
    client, log_dirs = broker
    call(client.controller.create_topic.remote("before", 2, {"retention.ms": "60000"}))
    brokers = call(client.controller.brokers.remote())
    ray.kill(client.controller, no_restart=False)
    wait_for(lambda: restarts(client.controller) == 1 and _answers(client.controller), what="the controller restart")
    assert call(client.controller.brokers.remote()) == brokers
    assert client.topic("before").config == {"retention.ms": "60000"}
    call(client.controller.create_topic.remote("after", 2))
    assert len(partition_folders(log_dirs, "after")) == 2
    append(client.partition("after", 1), batch_bytes(make_records("a", 1)))


def restarts(handle: Any) -> int:
    """How often Ray restarted the actor, from the GCS actor table (the public state API needs the dashboard,
    which the test session turns off)."""
    return ray._private.state.actors(actor_id=handle._actor_id.hex())["NumRestarts"]


def _answers(handle: Any) -> bool:
    try:
        call(handle.brokers.remote(), timeout_s=5)
    except (BrokerNotAvailableError, RequestTimedOutError):
        return False
    return True


# --- restart -----------------------------------------------------------------------------------------


def _rewrite_placement(metadata_dir: Path, topic: str, node_id: str) -> None:
    """Points every partition of `topic` at `node_id` in the stopped broker's metadata log, as a Ray restart
    does (node ids are new) — through the record format the controller documents."""
    log = Log.open(metadata_dir / file_names.partition_dir_name(METADATA_TOPIC, 0))
    try:
        latest: dict[bytes, bytes | None] = {}
        for record in log.records():
            assert record.key is not None
            latest[record.key] = record.value
        body = json.loads(latest[f"topic/{topic}".encode()] or b"null")
        body["partitions"] = {p: node_id for p in body["partitions"]}
        for state in body["replication"].values():
            state.update(leader=node_id, replicas=[node_id], isr=[node_id])
        builder = RecordBatchBuilder()
        builder.append(f"topic/{topic}".encode(), json.dumps(body).encode(), timestamp=now_ms())
        log.append(builder.build())
    finally:
        log.close()


def test_restart_finds_topics_records_and_remaps_nodes(
    broker: tuple[Broker, list[Path]], start_test_broker: StartBroker
) -> None:
    """Last of the module: stops the shared broker and starts one over the same dirs."""
    client, log_dirs = broker
    call(client.controller.create_topic.remote("durable", 3, {"segment.bytes": "2048"}))
    oracle: dict[int, list[tuple[int, Rec]]] = {}
    for partition in range(3):
        handle = client.partition("durable", partition)
        oracle[partition] = []
        for step in range(20):
            batch = make_records(f"p{partition}s{step}", 3)
            info = append(handle, batch_bytes(batch))
            oracle[partition].extend((info.first_offset + i, rec) for i, rec in enumerate(batch))
    for name in call(client.controller.list_topics.remote()):
        if name != "durable":  # fewer partitions to re-open; their folders wait for deletion meanwhile
            call(client.controller.delete_topic.remote(name))
    end_offsets = stop_broker()
    assert {f"durable-{p}": len(oracle[p]) for p in range(3)}.items() <= end_offsets.items()
    for directory in log_dirs:
        assert (directory / file_names.CLEAN_SHUTDOWN_FILE).exists()
        recovery_points = read_checkpoint_text(directory / file_names.RECOVERY_POINT_CHECKPOINT)
        for folder in directory.iterdir():
            parsed = file_names.parse_partition_dir_name(folder.name)
            if parsed is not None and parsed[0] != METADATA_TOPIC:
                assert (folder / file_names.CLEAN_SHUTDOWN_FILE).exists(), folder
                assert recovery_points[parsed] == end_offsets[folder.name]
    with pytest.raises(BrokerNotAvailableError):
        Broker.connect()
    with pytest.raises(BrokerNotAvailableError):
        stop_broker()
    with pytest.raises(ValueError):
        ray.get_actor(log_manager_name(ray.get_runtime_context().get_node_id()), namespace=NAMESPACE)

    _rewrite_placement(log_dirs[0], "durable", "f" * 56)
    client, _ = start_test_broker(log_dirs=log_dirs, num_recovery_threads_per_data_dir="4")
    this_node = ray.get_runtime_context().get_node_id()
    topic = client.topic("durable")
    assert topic.partitions == dict.fromkeys(range(3), this_node)
    assert topic.config == {"segment.bytes": "2048"}
    assert set(call(client.controller.list_topics.remote())) >= {"durable"}
    for partition, expected in oracle.items():
        handle = client.partition("durable", partition)
        assert read_range(handle, 0, len(expected)) == expected
        assert append(handle, batch_bytes(make_records("after", 1))).first_offset == len(expected)
    for directory in log_dirs:
        assert not (directory / file_names.CLEAN_SHUTDOWN_FILE).exists()  # deleted while running

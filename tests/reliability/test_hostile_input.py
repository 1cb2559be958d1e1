"""Hostile and wrong input at every boundary: the storage API, the actor API, the client facades and the CLI.

Every case must end in one of the typed errors of `storage/errors.py` (or, on the command line, one
`raybroker: error:` line and a non-zero exit, never a traceback), and must write NOTHING: the oracle is a
snapshot of every file under the log dirs (path and size) and the log end offset, taken before and after.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import crc32c
import pytest

from storage.config.log_config import LogConfig
from storage.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RaybrokerError,
    RecordTooLargeError,
    SerializationError,
    UnknownTopicOrPartitionError,
)
from storage.logdir.log_manager import LogManager
from storage.partition.log import Log
from storage.records.record_batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RecordBatchBuilder,
)

pytestmark = pytest.mark.reliability

# Names that try to leave the log dir, or that Kafka refuses: separators, absolute paths, NUL, dot names,
# over 249 chars, characters outside [a-zA-Z0-9._-], and values that are not strings at all.
ESCAPING_TOPICS: list[object] = [
    "../x",
    "../../etc",
    "a/b",
    "a\\b",
    "/abs",
    "/tmp/evil",
    "x\x00y",
    ".",
    "..",
    "",
    "a" * 250,
    "a b",
    "tópico",
    "a\n",
    "$(touch pwned)",
    "`id`",
    "a;rm -rf b",
    None,
    b"bytes",
    7,
]
BAD_PARTITIONS: list[object] = [-1, -(2**31), True, "0", 1.5, None]
NON_BYTES_VALUES: list[object] = ["text", 42, None, [b"a"], {"k": b"v"}, 3.5]


def files_under(*roots: Path) -> dict[str, int]:
    """Every file and folder under `roots` with its size: what 'nothing written' is checked against. One removed
    between the listing and its `stat` (a checkpoint's temporary file renamed into place) is not there."""
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            try:
                found[str(path)] = path.stat().st_size if path.is_file() else -1
            except FileNotFoundError:
                continue
    return found


def escape_targets(tmp_path: Path) -> set[str]:
    """The names in the folders a `..` from a log dir reaches, listed without recursing (other tests' live
    brokers keep writing checkpoints below them)."""
    return {str(path) for folder in (tmp_path.parent, tmp_path.parent.parent) for path in folder.iterdir()}


def naive_folders(tmp_path: Path, topic: object) -> list[Path]:
    """Where a naive `<log dir>/<topic>-0` would have put the folder, for the names a path can hold."""
    if not isinstance(topic, str) or "\x00" in topic:
        return []
    return [Path(f"{tmp_path / name}/{topic}-0") for name in ("a", "b")]


def batch(count: int = 2, value_size: int = 10) -> bytearray:
    builder = RecordBatchBuilder()
    for index in range(count):
        builder.append(f"k{index}".encode(), b"v" * value_size, timestamp=1_700_000_000_000 + index)
    return bytearray(builder.build())


def refresh_crc(data: bytearray) -> bytearray:
    struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    return data


def with_base_offset(offset: int) -> bytes:
    data = batch()
    struct.pack_into(">q", data, 0, offset)
    return bytes(data)


def with_count(count: int) -> bytes:
    data = batch()
    struct.pack_into(">i", data, RECORDS_COUNT_OFFSET, count)
    return bytes(refresh_crc(data))


def with_flipped_crc() -> bytes:
    data = batch()
    data[CRC_OFFSET] ^= 0xFF
    return bytes(data)


def with_magic(magic: int) -> bytes:
    data = batch()
    data[MAGIC_OFFSET] = magic
    return bytes(data)


def control_batch() -> bytes:
    data = batch()
    attributes = struct.unpack_from(">h", data, ATTRIBUTES_OFFSET)[0]
    struct.pack_into(">h", data, ATTRIBUTES_OFFSET, attributes | 0x20)
    return bytes(refresh_crc(data))


def with_lying_record_length() -> bytes:
    data = batch()
    data[RECORD_BATCH_OVERHEAD] = 0x7E  # the first record's length varint: 63 bytes, more than it holds
    return bytes(refresh_crc(data))


# (name, bytes, expected error): what any client might send as one append.
BAD_BATCHES: list[tuple[str, bytes, type[RaybrokerError]]] = [
    ("base offset 5", with_base_offset(5), InvalidRecordError),
    ("base offset -1", with_base_offset(-1), InvalidRecordError),
    ("count 3 for 2 records", with_count(3), InvalidRecordError),
    ("count 0", with_count(0), InvalidRecordError),
    ("count -1", with_count(-1), InvalidRecordError),
    ("flipped crc", with_flipped_crc(), CorruptRecordError),
    ("magic 3", with_magic(3), CorruptRecordError),
    ("magic 1", with_magic(1), RaybrokerError),
    ("magic -1", with_magic(0xFF), CorruptRecordError),
    ("control batch", control_batch(), InvalidRecordError),
    ("record length lies, valid crc", with_lying_record_length(), InvalidRecordError),
    ("truncated", bytes(batch()[:-5]), CorruptRecordError),
    ("header only", bytes(batch()[:40]), CorruptRecordError),
    ("empty", b"", RaybrokerError),
    ("good then garbage", bytes(batch()) + b"\x00" * 7, CorruptRecordError),
    ("good then bad crc", bytes(batch()) + with_flipped_crc(), CorruptRecordError),
    ("good then control", bytes(batch()) + control_batch(), InvalidRecordError),
    ("zeros", b"\x00" * 200, RaybrokerError),
    ("length -1", b"\x00" * 8 + b"\xff\xff\xff\xff" + b"\x00" * 60, RaybrokerError),
    ("length 2**31-1", b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x00" * 60, RaybrokerError),
]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    opened = Log.open(tmp_path / "t-0", LogConfig(max_message_bytes=4096))
    opened.append(bytes(batch()))
    yield opened
    opened.close()


# --- storage.Log ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "data", "error"), BAD_BATCHES, ids=[case[0] for case in BAD_BATCHES])
def test_a_bad_client_batch_is_refused_with_a_typed_error_and_nothing_is_written(
    log: Log, name: str, data: bytes, error: type[RaybrokerError]
) -> None:
    before, end = files_under(log.directory), log.log_end_offset
    with pytest.raises(error):
        log.append(data)
    assert files_under(log.directory) == before
    assert log.log_end_offset == end
    assert [r.offset for r in log.records()] == [0, 1]


@pytest.mark.parametrize("value", NON_BYTES_VALUES, ids=repr)
def test_a_value_that_is_not_bytes_is_refused_by_log_append(log: Log, value: object) -> None:
    before = files_under(log.directory)
    with pytest.raises(RaybrokerError):
        log.append(value)  # type: ignore[arg-type]
    assert files_under(log.directory) == before and log.log_end_offset == 2


def test_a_batch_over_max_message_bytes_is_refused_whole(log: Log) -> None:
    before = files_under(log.directory)
    with pytest.raises(RecordTooLargeError):
        log.append(bytes(batch(1, 5000)))
    with pytest.raises(RecordTooLargeError):
        log.append(bytes(batch(1, 10)) + bytes(batch(1, 5000)))
    assert files_under(log.directory) == before and log.log_end_offset == 2


@pytest.mark.parametrize(
    ("offset", "max_bytes", "error"),
    [
        (-1, 1024, OffsetOutOfRangeError),
        (3, 1024, OffsetOutOfRangeError),
        (2**63, 1024, OffsetOutOfRangeError),
        (-(2**63), 1024, OffsetOutOfRangeError),
        ("0", 1024, OffsetOutOfRangeError),
        (None, 1024, OffsetOutOfRangeError),
        (1.0, 1024, OffsetOutOfRangeError),
        (0, -1, InvalidRequestError),
        (0, "1024", InvalidRequestError),
        (0, None, InvalidRequestError),
        (0, 1.5, InvalidRequestError),
    ],
)
def test_a_read_outside_the_log_or_with_bad_sizes_is_a_typed_error(
    log: Log, offset: object, max_bytes: object, error: type[RaybrokerError]
) -> None:
    with pytest.raises(error):
        log.read(offset, max_bytes)  # type: ignore[arg-type]


@pytest.mark.parametrize("offset", [-5, 3, 2**63, "1", None])
def test_delete_records_outside_the_log_is_a_typed_error_and_keeps_every_record(log: Log, offset: object) -> None:
    with pytest.raises(RaybrokerError):
        log.delete_records(offset)  # type: ignore[arg-type]
    assert log.log_start_offset == 0 and [r.offset for r in log.records()] == [0, 1]


@pytest.mark.parametrize("timestamp", ["now", None, 1.5, -4, -(2**63)])
def test_a_bad_list_offsets_timestamp_is_a_typed_error(log: Log, timestamp: object) -> None:
    with pytest.raises(RaybrokerError):
        log.fetch_offset_by_timestamp(timestamp)  # type: ignore[arg-type]


# --- configs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "properties",
    [
        {"segment.bytes": "-1"},
        {"segment.bytes": "0"},
        {"segment.bytes": "abc"},
        {"segment.bytes": "1e6"},
        {"segment.bytes": str(2**40)},
        {"retention.ms": "-5"},
        {"max.message.bytes": "-1"},
        {"cleanup.policy": "forever"},
        {"compression.type": "rot13"},
        {"no.such.key": "1"},
        {"segment_bytes": "1048576"},
        {"preallocate": "maybe"},
        {"segment.bytes": None},
        {"segment.bytes": [1]},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    ],
    ids=repr,
)
def test_a_bad_topic_config_is_an_invalid_config_error(properties: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig.from_properties(properties)


@pytest.mark.parametrize(
    "fields", [{"segment_bytes": -1}, {"segment_bytes": "x"}, {"retention_ms": 1.5}, {"preallocate": "yes"}], ids=repr
)
def test_a_bad_log_config_field_is_an_invalid_config_error(fields: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError):
        LogConfig(**fields)


# --- storage.LogManager ----------------------------------------------------------------------------------


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    started = LogManager([tmp_path / "a", tmp_path / "b"])
    started.startup()
    yield started
    started.shutdown()


@pytest.mark.parametrize("topic", ESCAPING_TOPICS, ids=repr)
def test_a_bad_topic_name_creates_no_folder_anywhere(manager: LogManager, tmp_path: Path, topic: object) -> None:
    before = files_under(tmp_path), escape_targets(tmp_path)
    with pytest.raises(InvalidTopicError):
        manager.get_or_create_log(topic, 0)  # type: ignore[arg-type]
    assert (files_under(tmp_path), escape_targets(tmp_path)) == before
    assert not any(os.path.lexists(folder) for folder in naive_folders(tmp_path, topic))
    assert manager.all_logs() == {}


@pytest.mark.parametrize("partition", [*BAD_PARTITIONS, 2**31], ids=repr)
def test_a_bad_partition_number_creates_no_folder(manager: LogManager, tmp_path: Path, partition: object) -> None:
    before = files_under(tmp_path)
    with pytest.raises(InvalidTopicError):
        manager.get_or_create_log("t", partition)  # type: ignore[arg-type]
    assert files_under(tmp_path) == before


def test_a_folder_name_too_long_for_the_file_system_is_refused_and_no_dir_goes_offline(
    manager: LogManager, tmp_path: Path
) -> None:
    before = files_under(tmp_path)
    with pytest.raises(InvalidTopicError):
        manager.get_or_create_log("a" * 249, 100_000)
    assert files_under(tmp_path) == before
    assert manager.offline_dirs == {}
    assert manager.get_or_create_log("a" * 249, 99_999).directory.name == "a" * 249 + "-99999"


def test_an_unknown_partition_is_none_not_an_error(manager: LogManager) -> None:
    assert manager.get_log("missing", 0) is None
    assert manager.delete_log("missing", 0) is False


@pytest.mark.parametrize("dirs", [[], ["same", "same"]], ids=repr)
def test_bad_log_dir_lists_are_refused(tmp_path: Path, dirs: list[str]) -> None:
    with pytest.raises(KafkaStorageError):
        LogManager([tmp_path / d for d in dirs])


def test_a_log_dir_that_is_a_file_goes_offline_and_the_other_serves(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a dir")
    started = LogManager([tmp_path / "file", tmp_path / "ok"])
    started.startup()
    try:
        assert set(started.offline_dirs) == {(tmp_path / "file").resolve()}
        log = started.get_or_create_log("t", 0)
        assert log.directory.parent == (tmp_path / "ok").resolve()
    finally:
        started.shutdown()
    assert (tmp_path / "file").read_bytes() == b"not a dir"


# --- the broker on Ray: facades, raw actor handles, CLI ----------------------------------------------------


@pytest.fixture(scope="module")
def broker(start_test_broker: Callable[..., tuple[Any, list[Path]]]) -> tuple[Any, list[Path]]:
    from actors import Admin

    broker, log_dirs = start_test_broker(log_dirs_count=2)
    Admin(broker).create_topic("hostile", 2, {"max.message.bytes": "4096"})
    from actors import Producer

    with Producer(linger_ms=0) as producer:
        for index in range(3):
            producer.send("hostile", f"v{index}".encode(), partition=0).result()
    return broker, log_dirs


def assert_unchanged(
    before: tuple[dict[str, int], list[str], int], after: tuple[dict[str, int], list[str], int]
) -> None:
    changed = {path for path in before[0].keys() | after[0].keys() if before[0].get(path) != after[0].get(path)}
    assert not changed, {path: (before[0].get(path), after[0].get(path)) for path in changed}
    assert after[1:] == before[1:]


def broker_snapshot(broker: tuple[Any, list[Path]]) -> tuple[dict[str, int], list[str], int]:
    from actors import Admin

    admin = Admin(broker[0])
    ends = admin.describe_topic("hostile").partitions
    # Moving on their own: checkpoints (rewritten every 500 ms), `-delete` folders (removed after 500 ms) and the
    # metadata log (a producer's id is allocated there); the topic list stands for the latter.
    files = {
        path: size
        for path, size in files_under(*broker[1]).items()
        if not any(part in path for part in ("checkpoint", "-delete", "__cluster_metadata"))
    }
    return files, sorted(admin.list_topics()), sum(p.log_end_offset for p in ends)


@pytest.mark.ray
@pytest.mark.parametrize("topic", [*ESCAPING_TOPICS, "__cluster_metadata"], ids=repr)
def test_admin_refuses_bad_topic_names_and_writes_nothing(broker: tuple[Any, list[Path]], topic: object) -> None:
    from actors import Admin

    before = broker_snapshot(broker)
    with pytest.raises(InvalidTopicError):
        Admin(broker[0]).create_topic(topic, 1)  # type: ignore[arg-type]
    assert_unchanged(before, broker_snapshot(broker))


@pytest.mark.ray
def test_admin_refuses_a_topic_whose_name_collides_after_dots_and_underscores(broker: tuple[Any, list[Path]]) -> None:
    from actors import Admin

    admin = Admin(broker[0])
    admin.create_topic("metrics.cpu", 1)
    before = broker_snapshot(broker)
    for colliding in ("metrics_cpu", "metrics.cpu"):
        with pytest.raises(RaybrokerError, match=r"collides|exists"):
            admin.create_topic(colliding, 1)
    assert_unchanged(before, broker_snapshot(broker))
    admin.delete_topic("metrics.cpu")


@pytest.mark.ray
@pytest.mark.parametrize("partitions", [0, -1, -(2**31), 10**9, 2**63, 1.5, "3", True, None], ids=repr)
def test_admin_refuses_bad_partition_counts(broker: tuple[Any, list[Path]], partitions: object) -> None:
    from actors import Admin

    before = broker_snapshot(broker)
    with pytest.raises(InvalidPartitionsError):
        Admin(broker[0]).create_topic("counted", partitions)  # type: ignore[arg-type]
    with pytest.raises(InvalidPartitionsError):
        Admin(broker[0]).add_partitions("hostile", partitions)  # type: ignore[arg-type]
    assert_unchanged(before, broker_snapshot(broker))


@pytest.mark.ray
@pytest.mark.parametrize(
    "config",
    [{"segment.bytes": "-1"}, {"no.such.key": "1"}, {"retention.ms": "soon"}, {"cleanup.policy": "x"}, ["a"]],
    ids=repr,
)
def test_admin_refuses_bad_topic_configs(broker: tuple[Any, list[Path]], config: Any) -> None:
    from actors import Admin

    admin = Admin(broker[0])
    before = broker_snapshot(broker)
    with pytest.raises(InvalidConfigError):
        admin.create_topic("configured", 1, config)
    with pytest.raises(InvalidConfigError):
        admin.alter_topic_config("hostile", config)
    assert_unchanged(before, broker_snapshot(broker))
    assert admin.describe_topic("hostile").config == {"max.message.bytes": "4096"}


@pytest.mark.ray
def test_unknown_topics_and_partitions_are_typed_errors_everywhere(broker: tuple[Any, list[Path]]) -> None:
    from actors import Admin, Consumer, Producer
    from actors.server.partition_lookup import partition_actor

    admin = Admin(broker[0])
    before = broker_snapshot(broker)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topic("missing")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topic("missing")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_records("hostile", 7, 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        partition_actor("hostile", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        broker[0].partition("missing", 0)
    with Producer(linger_ms=0) as producer:
        with pytest.raises(UnknownTopicOrPartitionError):
            producer.send("missing", b"x")
        for partition in (2, -1, "0", True):
            with pytest.raises(UnknownTopicOrPartitionError):
                producer.send("hostile", b"x", partition=partition)  # type: ignore[arg-type]
    consumer = Consumer(auto_offset_reset="earliest")
    try:
        for assignment in ([("hostile", 5)], [("missing", 0)], [("hostile", -1)], ["hostile"], [(None, 0)]):
            with pytest.raises(UnknownTopicOrPartitionError):
                consumer.assign(assignment)  # type: ignore[arg-type]
        with pytest.raises(UnknownTopicOrPartitionError):
            consumer.subscribe(["missing"])
        consumer.assign([("hostile", 0)])
        for offset in (-1, "0", None, 1.5):
            with pytest.raises(InvalidRequestError):
                consumer.seek(("hostile", 0), offset)  # type: ignore[arg-type]
    finally:
        consumer.close()
    assert_unchanged(before, broker_snapshot(broker))


@pytest.mark.ray
def test_the_producer_refuses_oversized_and_unserializable_records_without_writing(
    broker: tuple[Any, list[Path]],
) -> None:
    from actors import Producer

    before = broker_snapshot(broker)
    with Producer(linger_ms=0, retries=0) as producer:
        with pytest.raises(RecordTooLargeError):
            producer.send("hostile", b"x" * 5000, partition=0).result(timeout=30)
        with pytest.raises(SerializationError):
            producer.send("hostile", object(), partition=0)
        with pytest.raises(RaybrokerError):
            producer.send("hostile", b"x", partition=0, timestamp_ms="now")  # type: ignore[arg-type]
        with pytest.raises(RaybrokerError):
            producer.send("hostile", b"x", partition=0, headers=[(1, b"v")])  # type: ignore[list-item]
    assert_unchanged(before, broker_snapshot(broker))


@pytest.mark.ray
@pytest.mark.parametrize(("name", "data", "error"), BAD_BATCHES, ids=[case[0] for case in BAD_BATCHES])
def test_the_partition_actor_refuses_bad_batches_through_a_raw_handle(
    broker: tuple[Any, list[Path]], name: str, data: bytes, error: type[RaybrokerError]
) -> None:
    from actors.calls import call
    from actors.server.partition_lookup import partition_actor

    handle = partition_actor("hostile", 0)
    before = broker_snapshot(broker)
    with pytest.raises(error):
        call(handle.append.remote(data))
    assert_unchanged(before, broker_snapshot(broker))
    assert call(handle.ready.remote()) == 3


@pytest.mark.ray
@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("append", ("not bytes",)),
        ("append", (None,)),
        ("append", (12,)),
        ("read", (-1,)),
        ("read", (99,)),
        ("read", ("0",)),
        ("read", (0, -1)),
        ("read", (0, "big")),
        ("fetch", (2**70,)),
        ("fetch", (0, None)),
        ("list_offset", ("now",)),
        ("list_offset", (-7,)),
        ("delete_records", (-5,)),
        ("delete_records", (99,)),
        ("delete_records", ("1",)),
        ("update_config", ({"segment.bytes": "-1"},)),
        ("update_config", ({"no.such": "1"},)),
        ("update_config", ("segment.bytes=1",)),
        ("clean", ("x",)),
        ("epoch_end_offset", ("0",)),
        ("epoch_end_offset", (None,)),
        ("snapshot_for_cleaning", ("0",)),
        ("swap_cleaned", ({"segments": []},)),
        ("changed_since", (None,)),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_partition_actor_methods_refuse_bad_arguments_with_typed_errors(
    broker: tuple[Any, list[Path]], method: str, args: tuple[object, ...]
) -> None:
    from actors.calls import call
    from actors.server.partition_lookup import partition_actor

    handle = partition_actor("hostile", 0)
    before = broker_snapshot(broker)
    with pytest.raises(RaybrokerError):
        call(getattr(handle, method).remote(*args))
    assert_unchanged(before, broker_snapshot(broker))
    assert call(handle.offsets.remote()) == (0, 3, 3)


@pytest.mark.ray
@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "--create", "--topic", "../escape", "--partitions", "1"],
        ["topics", "--create", "--topic", "/tmp/abs", "--partitions", "1"],
        ["topics", "--create", "--topic", "a" * 250, "--partitions", "1"],
        ["topics", "--create", "--topic", "..", "--partitions", "1"],
        ["topics", "--create", "--topic", "ok-name", "--partitions", "1", "--config", "segment.bytes=-1"],
        ["topics", "--create", "--topic", "ok-name", "--partitions", "1", "--config", "no.such.key=1"],
        ["topics", "--create", "--topic", "ok-name", "--partitions", "100000"],
        ["topics", "--create", "--topic", "hostile", "--partitions", "1"],
        ["topics", "--describe", "--topic", "missing"],
        ["topics", "--delete", "--topic", "missing"],
        ["topics", "--alter", "--topic", "hostile", "--partitions", "1"],
        ["topics", "--alter", "--topic", "hostile", "--config", "retention.ms=soon"],
        ["produce", "--topic", "missing"],
        ["consume", "--topic", "missing", "--max-messages", "1", "--timeout-ms", "100"],
        ["consume", "--topic", "hostile", "--partition", "9", "--max-messages", "1", "--timeout-ms", "100"],
        ["get-offsets", "--topic", "missing"],
        ["delete-records", "--topic", "hostile", "--partition", "0", "--offset", "99"],
        ["delete-records", "--topic", "hostile", "--partition", "7", "--offset", "0"],
        ["delete-records", "--topic", "missing", "--partition", "0", "--offset", "0"],
    ],
    ids=lambda argv: " ".join(argv)[:60],
)
def test_the_cli_answers_bad_requests_with_one_line_and_exit_1(
    broker: tuple[Any, list[Path]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    import io
    import sys

    from cluster.cli.main import EXIT_DATA_ERROR, main

    monkeypatch.setattr(sys, "stdin", io.StringIO("line\n"))
    before = broker_snapshot(broker)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_DATA_ERROR, err
    assert err.count("\n") == 1 and err.startswith("raybroker: error: "), err
    assert "Traceback" not in err
    assert_unchanged(before, broker_snapshot(broker))


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "--create", "--topic", "t", "--partitions", "0"],
        ["topics", "--create", "--topic", "t", "--partitions", "-3"],
        ["topics", "--create", "--topic", "t", "--partitions", "many"],
        ["topics", "--create", "--topic", "t", "--config", "no-equals-sign"],
        ["delete-records", "--topic", "t", "--partition", "-1", "--offset", "0"],
        ["consume", "--topic", "t", "--max-messages", "-1"],
        ["no-such-command"],
    ],
    ids=lambda argv: " ".join(argv)[:60],
)
def test_the_cli_refuses_bad_arguments_before_touching_ray_with_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from cluster.cli.main import EXIT_USAGE, main

    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "Traceback" not in err and "error:" in err

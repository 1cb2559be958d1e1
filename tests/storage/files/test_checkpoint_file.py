"""Checkpoint files: round-trips against dict/list oracles, Kafka's strict reader, atomic rewrite, real broker bytes."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_names import (
    CLEANER_OFFSET_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    tmp_file,
)
from storage.files.checkpoint_file import (
    EPOCH_ENTRY_FORMATTER,
    OFFSET_ENTRY_FORMATTER,
    CheckpointFile,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    format_checkpoint_text,
    parse_checkpoint_text,
)
from tests.conftest import KAFKA_SAMPLES_DIR

SAMPLES = KAFKA_SAMPLES_DIR
OFFSET_CHECKPOINTS = (
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)

topics = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=249)
partitions = st.integers(min_value=0, max_value=2**31 - 1)
offsets = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def write_raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def checkpoint_files(root: Path) -> list[Path]:
    names = (*OFFSET_CHECKPOINTS, LEADER_EPOCH_CHECKPOINT)
    return sorted(path for path in root.rglob("*") if path.name in names)


def open_checkpoint(path: Path) -> OffsetCheckpointFile | LeaderEpochCheckpointFile:
    if path.name == LEADER_EPOCH_CHECKPOINT:
        return LeaderEpochCheckpointFile(path, read_only=True)
    return OffsetCheckpointFile(path, read_only=True)


def assert_rewrites_to_same_bytes(source: Path, tmp_path: Path) -> None:
    original = source.read_bytes()
    entries = open_checkpoint(source).read()
    target = tmp_path / source.name
    if source.name == LEADER_EPOCH_CHECKPOINT:
        LeaderEpochCheckpointFile(target).write(entries)
    else:
        OffsetCheckpointFile(target).write(entries)
    if original:
        assert target.read_bytes() == original, source
    else:
        # A checkpoint the broker created but never wrote is 0 bytes; Kafka rewrites it as version 0, count 0.
        assert entries in ({}, [])
        assert target.read_bytes() == b"0\n0\n"


# --- round-trips against the dict / list oracle -------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.tuples(topics, partitions), offsets, max_size=50))
def test_offset_text_round_trips_any_mapping_in_order(offsets_map: dict[tuple[str, int], int]) -> None:
    text = format_checkpoint_text(offsets_map.items(), OFFSET_ENTRY_FORMATTER)
    assert text.count("\n") == len(offsets_map) + 2
    assert list(parse_checkpoint_text(text, OFFSET_ENTRY_FORMATTER)) == list(offsets_map.items())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), offsets), max_size=30))
def test_epoch_text_round_trips_any_list(entries: list[tuple[int, int]]) -> None:
    text = format_checkpoint_text([EpochEntry(*entry) for entry in entries], EPOCH_ENTRY_FORMATTER)
    assert parse_checkpoint_text(text, EPOCH_ENTRY_FORMATTER) == entries


def test_offset_file_round_trips_and_replaces_content(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    first = {("my.topic", 0): 10, ("my-topic", 3): 0, ("__consumer_offsets", 49): 2**63 - 1, ("a_b", 7): -1}
    checkpoint.write(first)
    assert checkpoint.read() == first
    assert list(checkpoint.read()) == list(first)
    second = {("other", 1): 5}
    checkpoint.write(second)
    assert checkpoint.read() == second
    assert checkpoint.path.read_bytes() == b"0\n1\nother 1 5\n"


def test_many_lines_round_trip(tmp_path: Path) -> None:
    rng = random.Random(49)
    offsets_map = {(f"topic-{i % 97}.x_{i}", rng.randrange(2**31)): rng.randrange(-1, 2**63) for i in range(20_000)}
    checkpoint = OffsetCheckpointFile(tmp_path / REPLICATION_OFFSET_CHECKPOINT)
    checkpoint.write(offsets_map)
    assert checkpoint.read() == offsets_map
    assert list(OffsetCheckpointFile(checkpoint.path, read_only=True).read().items()) == list(offsets_map.items())


def test_leader_epoch_file_round_trips_named_entries(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT)
    checkpoint.write([(0, 0), (1, 9), EpochEntry(3, 10)])
    entries = checkpoint.read()
    assert entries == [(0, 0), (1, 9), (3, 10)]
    assert [(entry.epoch, entry.start_offset) for entry in entries] == [(0, 0), (1, 9), (3, 10)]
    assert checkpoint.path.read_bytes() == b"0\n3\n0 0\n1 9\n3 10\n"


def test_duplicate_partition_keeps_last_offset_like_kafka(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "cp", b"0\n2\nt 0 5\nt 0 7\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 7}


# --- opening: create on first open, read-only never writes -------------------------------------------------


def test_missing_file_is_created_empty_and_reads_empty(tmp_path: Path) -> None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT
    checkpoint = OffsetCheckpointFile(path)
    assert path.exists()
    assert path.read_bytes() == b""
    assert checkpoint.read() == {}


def test_existing_file_is_not_truncated_on_open(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "cp", b"0\n1\nt 0 5\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 5}


def test_read_only_open_never_creates_or_writes(tmp_path: Path) -> None:
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    checkpoint = OffsetCheckpointFile(path, read_only=True)
    assert not path.exists()
    assert checkpoint.read() == {}
    with pytest.raises(KafkaStorageError) as info:
        checkpoint.write({("t", 0): 1})
    assert info.value.path == str(path)
    assert not path.exists()
    assert not tmp_file(path).exists()


def test_open_in_missing_directory_raises_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / RECOVERY_POINT_CHECKPOINT
    with pytest.raises(KafkaStorageError) as info:
        OffsetCheckpointFile(path)
    assert info.value.path == str(path)


# --- the strict reader --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", {}),
        (b"0\n", {}),
        (b"0", {}),
        (b"0\n0\n", {}),
        (b"0\n1\nt 0 5", {("t", 0): 5}),
        (b"0\r\n1\r\nt 0 5\r\n", {("t", 0): 5}),
        (b"0\n1\nt\t0   5  \n", {("t", 0): 5}),
        (b"0\n1\nt +1 -5\n", {("t", 1): -5}),
        (b"0\n1\nt\xc3\xa9 0 5\n", {("t\u00e9", 0): 5}),
    ],
)
def test_reader_accepts_what_kafka_accepts(tmp_path: Path, data: bytes, expected: dict[tuple[str, int], int]) -> None:
    assert OffsetCheckpointFile(write_raw(tmp_path / "cp", data)).read() == expected


@pytest.mark.parametrize(
    ("data", "position"),
    [
        (b"1\n0\n", 0),
        (b"-1\n0\n", 0),
        (b"x\n0\n", 0),
        (b" 0\n0\n", 0),
        (b"0\nabc\n", 2),
        (b"0\n-1\n", 2),
        (b"0\n2\nt 0 5\n", 2),
        (b"0\n1\nt 0 5\nu 1 6\n", 2),
        (b"0\n1\n", 2),
        (b"0\n1\nt 0\n", 4),
        (b"0\n1\nt 0 5 6\n", 4),
        (b"0\n1\n t 0 5\n", 4),
        (b"0\n1\nt x 5\n", 4),
        (b"0\n1\nt 0 5.0\n", 4),
        (b"0\n1\nt 0 0x10\n", 4),
        (b"0\n1\nt 2147483648 5\n", 4),
        (b"0\n1\nt 0 9223372036854775808\n", 4),
        (b"0\n1\nt 0 5\n\n", 10),
        (b"0\n1\nt 0 5\ngarbage\n", 10),
        (b"0\n2\n\xc3\xa9 0 5\nt 1\n", 11),
    ],
)
def test_reader_rejects_corrupt_text_with_path_and_position(tmp_path: Path, data: bytes, position: int) -> None:
    path = write_raw(tmp_path / "cp", data)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert info.value.path == str(path)
    assert info.value.position == position


def test_unknown_version_names_both_versions(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "cp", b"7\n0\n")
    with pytest.raises(CorruptCheckpointError, match="version 7, expected version 0"):
        OffsetCheckpointFile(path).read()


def test_reader_honours_a_non_default_version(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "cp", b"1\n1\n4 8\n")
    assert CheckpointFile(path, EPOCH_ENTRY_FORMATTER, version=1).read() == [(4, 8)]
    with pytest.raises(CorruptCheckpointError):
        CheckpointFile(path, EPOCH_ENTRY_FORMATTER).read()


def test_non_utf8_bytes_are_corruption_at_their_position(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "cp", b"0\n1\nt\xff 0 5\n")
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert info.value.position == 5


@pytest.mark.parametrize("data", [b"0\n1\n5\n", b"0\n1\n5 6 7\n", b"0\n1\n2147483648 0\n", b"0\n1\n1 x\n"])
def test_epoch_reader_rejects_malformed_lines(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCheckpointFile(write_raw(tmp_path / LEADER_EPOCH_CHECKPOINT, data)).read()


def test_unreadable_path_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.mkdir()
    with pytest.raises(KafkaStorageError) as info:
        OffsetCheckpointFile(path, read_only=True).read()
    assert info.value.path == str(path)


# --- the writer refuses entries the format cannot hold ------------------------------------------------------


@pytest.mark.parametrize(
    "offsets_map",
    [
        {("has space", 0): 1},
        {("", 0): 1},
        {("tab\t", 0): 1},
        {("t", True): 1},
        {("t", 2**31): 1},
        {("t", 0): 2**63},
        {("t", 0): "5"},
        {("t", 0): 1.5},
        {(5, 0): 1},
    ],
)
def test_writer_refuses_unformattable_entries_and_keeps_old_file(tmp_path: Path, offsets_map: dict) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.write({("t", 0): 1})
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.write(offsets_map)
    assert info.value.path == str(checkpoint.path)
    assert checkpoint.read() == {("t", 0): 1}
    assert not tmp_file(checkpoint.path).exists()


@pytest.mark.parametrize("entries", [[(0,)], [(0, 1, 2)], [(True, 0)], [(0, 2**63)]])
def test_epoch_writer_refuses_unformattable_entries(tmp_path: Path, entries: list) -> None:
    with pytest.raises(CorruptCheckpointError):
        LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT).write(entries)


# --- atomic rewrite -----------------------------------------------------------------------------------------


def test_stale_tmp_file_does_not_affect_read_and_is_replaced_by_write(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    checkpoint.write({("t", 0): 1})
    write_raw(tmp_file(checkpoint.path), b"0\n5\nhalf-writ")
    assert checkpoint.read() == {("t", 0): 1}
    checkpoint.write({("t", 0): 2})
    assert checkpoint.read() == {("t", 0): 2}
    assert not tmp_file(checkpoint.path).exists()


def test_crash_before_rename_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    checkpoint.write({("t", 0): 1})

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(KafkaStorageError) as info:
        checkpoint.write({("t", 0): 2})
    monkeypatch.undo()
    assert info.value.path == str(checkpoint.path)
    assert isinstance(info.value.__cause__, OSError)
    assert checkpoint.read() == {("t", 0): 1}
    assert not tmp_file(checkpoint.path).exists()


def test_write_fsyncs_file_then_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT)
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    checkpoint.write({("t", 0): 1})
    assert synced == [str(tmp_file(checkpoint.path)), str(tmp_path)]


# --- real Kafka bytes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", checkpoint_files(SAMPLES), ids=lambda path: str(path.relative_to(SAMPLES)))
def test_sample_checkpoints_rewrite_to_identical_bytes(source: Path, tmp_path: Path) -> None:
    assert_rewrites_to_same_bytes(source, tmp_path)


def test_samples_hold_hundreds_of_checkpoint_files() -> None:
    # 418 files: every partition's `leader-epoch-checkpoint` and the root offset checkpoints of 8 log dirs.
    assert len(checkpoint_files(SAMPLES)) > 400


def test_fixture_checkpoints_hold_the_expected_entries() -> None:
    nikhil = SAMPLES / "NikhilDighe9975__kafka_setup@8639fa41" / "kafka-logs"
    assert OffsetCheckpointFile(nikhil / CLEANER_OFFSET_CHECKPOINT, read_only=True).read() == {
        ("__consumer_offsets", 12): 0
    }
    replication = OffsetCheckpointFile(nikhil / REPLICATION_OFFSET_CHECKPOINT, read_only=True).read()
    assert len(replication) == 84
    assert list(replication.items())[:2] == [(("nikhilDemo", 1), 0), (("demo_topic1", 2), 1)]
    epochs = SAMPLES / "BiggerBrain__kafka@0af19244" / "data" / "lsx1-0" / LEADER_EPOCH_CHECKPOINT
    assert LeaderEpochCheckpointFile(epochs, read_only=True).read() == [
        (0, 0),
        (1, 9),
        (3, 10),
        (5, 12),
        (6, 13),
        (7, 14),
    ]

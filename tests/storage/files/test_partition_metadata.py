"""`partition.metadata` against the files a real Kafka wrote (`tests/fixtures/kafka`): read, then written back to
the same bytes; Kafka's reading rules for everything else; corrupt files raise `CorruptCheckpointError`, a folder
of another topic `InconsistentTopicIdError`."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.errors import CorruptCheckpointError, InconsistentTopicIdError
from storage.file_names import partition_metadata_file, tmp_file
from storage.files.partition_metadata import (
    PartitionMetadata,
    parse_partition_metadata,
    read_partition_metadata,
    record_topic_id,
    write_partition_metadata,
)
from storage.kafka_uuid import ZERO_UUID, parse_uuid, random_uuid


def test_files_kafka_wrote_read_and_write_back_byte_for_byte(kafka_samples_dir: Path, tmp_path: Path) -> None:
    files = sorted(kafka_samples_dir.glob("*/*/*/partition.metadata"))
    assert len(files) >= 10
    for index, path in enumerate(files):
        found = read_partition_metadata(path.parent)
        assert found is not None and found.version == 0
        folder = tmp_path / str(index)
        folder.mkdir()
        write_partition_metadata(folder, found.topic_id)
        assert partition_metadata_file(folder).read_bytes() == path.read_bytes()
        assert not tmp_file(partition_metadata_file(folder)).exists()


def test_a_golden_file_names_its_topic_id() -> None:
    golden = b"version: 0\ntopic_id: nigi0dJNRASJVYh5eRn0Vg"
    assert parse_partition_metadata(golden.decode()) == PartitionMetadata(0, parse_uuid("nigi0dJNRASJVYh5eRn0Vg"))


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("version: 0\r\ntopic_id: nigi0dJNRASJVYh5eRn0Vg\n", 0),  # Java's readLine line ends
        ("version:\t1\ntopic_id:  nigi0dJNRASJVYh5eRn0Vg\nignored", 1),  # a newer version reads (downgrades)
        ("anything: 0\nother: nigi0dJNRASJVYh5eRn0Vg", 0),  # Kafka checks values, not keys
    ],
)
def test_kafkas_reading_rules(text: str, version: int) -> None:
    assert parse_partition_metadata(text) == PartitionMetadata(version, parse_uuid("nigi0dJNRASJVYh5eRn0Vg"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "version: 0",
        "version: -1\ntopic_id: nigi0dJNRASJVYh5eRn0Vg",
        "version: x\ntopic_id: nigi0dJNRASJVYh5eRn0Vg",
        "version:0\ntopic_id: nigi0dJNRASJVYh5eRn0Vg",
        "version: 0\ntopic_id: not-an-id",
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero id
        "version: 0\ntopic_id: a: b",
    ],
)
def test_corrupt_files_raise_corrupt_checkpoint_error(tmp_path: Path, text: str) -> None:
    partition_metadata_file(tmp_path).write_text(text)
    with pytest.raises(CorruptCheckpointError) as raised:
        read_partition_metadata(tmp_path)
    assert raised.value.path == str(partition_metadata_file(tmp_path))


def test_bytes_that_are_not_utf8_raise_corrupt_checkpoint_error(tmp_path: Path) -> None:
    partition_metadata_file(tmp_path).write_bytes(b"version: 0\ntopic_id: \xff\xfe")
    with pytest.raises(CorruptCheckpointError):
        read_partition_metadata(tmp_path)


def test_a_missing_file_reads_as_none_and_record_writes_it_once(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None
    topic_id = random_uuid()
    record_topic_id(tmp_path, topic_id)
    written = partition_metadata_file(tmp_path).stat().st_mtime_ns
    record_topic_id(tmp_path, topic_id)
    assert partition_metadata_file(tmp_path).stat().st_mtime_ns == written
    assert read_partition_metadata(tmp_path) == PartitionMetadata(0, topic_id)


def test_a_folder_of_another_topic_id_is_refused_and_kept(tmp_path: Path) -> None:
    first = random_uuid()
    record_topic_id(tmp_path, first)
    with pytest.raises(InconsistentTopicIdError):
        record_topic_id(tmp_path, random_uuid())
    assert read_partition_metadata(tmp_path) == PartitionMetadata(0, first)
    with pytest.raises(InconsistentTopicIdError):
        write_partition_metadata(tmp_path, ZERO_UUID)

"""The clean-shutdown marker: Kafka's exact bytes, presence semantics, lenient reading, durable write/delete."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_names import CLEAN_SHUTDOWN_FILE, tmp_file
from storage.files.clean_shutdown import (
    clean_shutdown_path,
    delete_clean_shutdown_marker,
    format_clean_shutdown,
    has_clean_shutdown_marker,
    parse_clean_shutdown,
    read_clean_shutdown,
    write_clean_shutdown_marker,
)
from tests.conftest import KAFKA_SAMPLES_DIR

SAMPLES = KAFKA_SAMPLES_DIR
ITUMELENG = SAMPLES / "ItumelengMogase__Real-Time-Data-Pipeline-for-Patient-Admissions@2f57540f" / "kafka-data"
NIKHIL = SAMPLES / "NikhilDighe9975__kafka_setup@8639fa41" / "kafka-logs"
WILLIAM = SAMPLES / "William0423__kafka@499e39fa" / "kafka-logs"


def test_written_bytes_equal_kafkas(tmp_path: Path) -> None:
    write_clean_shutdown_marker(tmp_path, 53326)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == (ITUMELENG / CLEAN_SHUTDOWN_FILE).read_bytes()
    write_clean_shutdown_marker(tmp_path)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == (NIKHIL / CLEAN_SHUTDOWN_FILE).read_bytes()
    assert format_clean_shutdown(53326) == b'{"version":0,"brokerEpoch":53326}'


@pytest.mark.parametrize(("log_dir", "epoch"), [(ITUMELENG, 53326), (NIKHIL, -1), (WILLIAM, None)])
def test_fixture_markers_are_present_with_their_epoch(log_dir: Path, epoch: int | None) -> None:
    assert has_clean_shutdown_marker(log_dir)
    assert read_clean_shutdown(log_dir) == epoch


def test_every_sample_marker_reads_and_rewrites_to_identical_bytes(tmp_path: Path) -> None:
    markers = sorted(SAMPLES.rglob(CLEAN_SHUTDOWN_FILE))
    assert len(markers) >= 6
    for index, marker in enumerate(markers):
        assert has_clean_shutdown_marker(marker.parent)
        epoch = read_clean_shutdown(marker.parent)
        original = marker.read_bytes()
        assert (epoch is None) == (original == b""), marker
        if epoch is not None:
            target = tmp_path / str(index)
            target.mkdir()
            write_clean_shutdown_marker(target, epoch)
            assert clean_shutdown_path(target).read_bytes() == original, marker


def test_absent_marker(tmp_path: Path) -> None:
    assert not has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown(tmp_path) is None
    assert delete_clean_shutdown_marker(tmp_path) is False


def test_delete_reports_presence_and_removes_the_marker(tmp_path: Path) -> None:
    write_clean_shutdown_marker(tmp_path, 7)
    assert read_clean_shutdown(tmp_path) == 7
    assert delete_clean_shutdown_marker(tmp_path) is True
    assert not has_clean_shutdown_marker(tmp_path)
    assert delete_clean_shutdown_marker(tmp_path) is False


def test_delete_syncs_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_clean_shutdown_marker(tmp_path)
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    assert delete_clean_shutdown_marker(tmp_path)
    assert synced == [str(tmp_path)]


def test_marker_works_in_a_partition_folder(tmp_path: Path) -> None:
    partition_dir = tmp_path / "my-topic-0"
    partition_dir.mkdir()
    write_clean_shutdown_marker(partition_dir, 3)
    assert has_clean_shutdown_marker(partition_dir)
    assert not has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown(partition_dir) == 3


@pytest.mark.parametrize(
    ("data", "epoch"),
    [
        (b"", None),
        (b"{", None),
        (b"[]", None),
        (b"null", None),
        (b'{"version":0}', None),
        (b'{"version":0,"brokerEpoch":"x"}', None),
        (b'{"version":0,"brokerEpoch":true}', None),
        (b'{"version":0,"brokerEpoch":1.5}', None),
        (b'{"version":0,"brokerEpoch":9223372036854775808}', None),
        (b'{"version":0,"brokerEpoch":"--5"}', None),
        (b"\xff\xfe", None),
        (b"[" * 100_000, None),
        (b'{"version":0,"brokerEpoch":9223372036854775807}', 2**63 - 1),
        (b'{"version":"0","broker_epoch":"42"}', 42),
        (b'{ "brokerEpoch" : -1 , "version" : 0 }\n', -1),
    ],
)
def test_reading_is_lenient_and_never_raises(tmp_path: Path, data: bytes, epoch: int | None) -> None:
    assert parse_clean_shutdown(data) == epoch
    clean_shutdown_path(tmp_path).write_bytes(data)
    assert has_clean_shutdown_marker(tmp_path)
    assert read_clean_shutdown(tmp_path) == epoch


@pytest.mark.parametrize("epoch", [True, 2**63, -(2**63) - 1, "5", 1.0, None])
def test_writer_refuses_epochs_that_are_not_int64(tmp_path: Path, epoch: object) -> None:
    with pytest.raises(CorruptCheckpointError) as info:
        write_clean_shutdown_marker(tmp_path, epoch)  # type: ignore[arg-type]
    assert info.value.path == str(clean_shutdown_path(tmp_path))
    assert not has_clean_shutdown_marker(tmp_path)


def test_write_is_atomic_and_leaves_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_clean_shutdown_marker(tmp_path, 1)
    assert not tmp_file(clean_shutdown_path(tmp_path)).exists()
    delete_clean_shutdown_marker(tmp_path)

    def failing_replace(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(KafkaStorageError):
        write_clean_shutdown_marker(tmp_path, 2)
    monkeypatch.undo()
    assert not has_clean_shutdown_marker(tmp_path)
    assert not tmp_file(clean_shutdown_path(tmp_path)).exists()


def test_unreadable_marker_is_a_storage_error(tmp_path: Path) -> None:
    clean_shutdown_path(tmp_path).mkdir()
    assert has_clean_shutdown_marker(tmp_path)
    with pytest.raises(KafkaStorageError):
        read_clean_shutdown(tmp_path)

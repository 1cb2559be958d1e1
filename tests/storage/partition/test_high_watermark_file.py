"""The high-watermark file against its oracle, the log itself: after every publish a reader sees the log's offsets,
and the bytes of the published segment file up to the published position are `Log.read`'s bytes up to the high
watermark, across rolls; a lowered high watermark publishes no position; closed, damaged (every byte flipped,
cut short), half-written and forged files read as None, never raising; a new writer keeps the inode and goes on
with the sequence."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.partition.high_watermark_file import (
    CRC_OFFSET,
    RECORD_BYTES,
    HighWatermarkFile,
    HighWatermarkReader,
    PublishedWatermark,
)
from storage.partition.log import Log
from storage.records.record_batch import ControlRecordType, RecordBatchBuilder
from tests.storage.builders import open_log, simple_batch


def published(log_dir: Path) -> PublishedWatermark | None:
    reader = HighWatermarkReader.open(str(file_names.high_watermark_file(log_dir)))
    assert reader is not None
    try:
        return reader.read()
    finally:
        reader.close()


def assert_matches_log(log: Log, log_dir: Path) -> PublishedWatermark:
    """The file's snapshot says what the log says, and its segment bytes up to the position are the log's."""
    found = published(log_dir)
    assert found is not None
    assert (found.high_watermark, found.log_start_offset, found.log_end_offset, found.last_stable_offset) == (
        log.high_watermark,
        log.log_start_offset,
        log.log_end_offset,
        log.last_stable_offset,
    )
    assert found.has_position and found.segment_base_offset == log.active_segment.base_offset
    path = file_names.log_file(log_dir, found.segment_base_offset)
    status = os.stat(path)
    assert (found.device, found.inode) == (status.st_dev, status.st_ino)
    with open(path, "rb") as file:
        in_segment = file.read(found.position)
    whole = log.read(found.segment_base_offset, 1 << 30, isolation="high_watermark").records
    assert in_segment == whole
    return found


def test_every_publish_shows_the_logs_offsets_and_where_the_high_watermark_lies_across_rolls(
    log_dir: Path, clock: MockClock, logs: list[Log]
) -> None:
    log = open_log(log_dir, clock, segment_bytes=600)
    logs.append(log)
    hw_file = HighWatermarkFile.create(log_dir)
    assert published(log_dir) is None, "a file not published yet is closed"
    hw_file.publish(log)
    first = assert_matches_log(log, log_dir)
    assert first.high_watermark == 0 and first.position == 0
    sequences = [first.sequence]
    for tag in range(12):
        log.append(simple_batch(3, tag=tag, value_size=40))
        hw_file.publish(log)
        sequences.append(assert_matches_log(log, log_dir).sequence)
    assert log.num_segments > 3
    assert sequences == sorted(set(sequences)) and all(s % 2 == 0 for s in sequences)
    hw_file.close()


def test_a_high_watermark_below_the_log_end_publishes_no_position(
    log_dir: Path, clock: MockClock, logs: list[Log]
) -> None:
    log = open_log(log_dir, clock)
    logs.append(log)
    hw_file = HighWatermarkFile.create(log_dir)
    log.append(simple_batch(5))
    log.update_high_watermark(2)
    hw_file.publish(log)
    found = published(log_dir)
    assert found is not None and not found.has_position
    assert (found.high_watermark, found.log_end_offset) == (2, 5)
    hw_file.publish_closed()
    assert published(log_dir) is None
    hw_file.close()


def test_a_new_writer_keeps_the_inode_and_goes_on_with_the_sequence(
    log_dir: Path, clock: MockClock, logs: list[Log]
) -> None:
    log = open_log(log_dir, clock)
    logs.append(log)
    path = file_names.high_watermark_file(log_dir)
    first = HighWatermarkFile.create(log_dir)
    first.publish(log)
    reader = HighWatermarkReader.open(str(path))
    assert reader is not None
    before = reader.read()
    inode = os.stat(path).st_ino
    first.close()
    second = HighWatermarkFile.create(log_dir)
    assert os.stat(path).st_ino == inode and reader.read() is None, "closed until the new writer publishes"
    log.append(simple_batch(2))
    second.publish(log)
    after = reader.read()
    assert before is not None and after is not None and after.sequence > before.sequence
    assert after.high_watermark == 2
    reader.close()
    second.close()


@pytest.fixture
def written(log_dir: Path, clock: MockClock, logs: list[Log]) -> bytes:
    """A published file's first `RECORD_BYTES`, the log holding 4 records."""
    log = open_log(log_dir, clock)
    logs.append(log)
    hw_file = HighWatermarkFile.create(log_dir)
    log.append(simple_batch(4))
    hw_file.publish(log)
    hw_file.close()
    with open(file_names.high_watermark_file(log_dir), "rb") as file:
        return file.read(RECORD_BYTES)


def test_any_flipped_byte_reads_as_none(log_dir: Path, written: bytes) -> None:
    path = file_names.high_watermark_file(log_dir)
    for position in range(RECORD_BYTES):
        damaged = bytearray(written)
        damaged[position] ^= 0x01
        path.write_bytes(bytes(damaged))
        assert published(log_dir) is None, position
    path.write_bytes(written)
    assert published(log_dir) is not None


def test_a_half_written_or_short_file_reads_as_none(log_dir: Path, written: bytes) -> None:
    path = file_names.high_watermark_file(log_dir)
    torn = bytearray(written)
    torn[-8:] = struct.pack(">Q", struct.unpack_from(">Q", written, 8)[0] + 2)
    path.write_bytes(bytes(torn))
    assert published(log_dir) is None, "a trailer ahead of the head is a publish in progress"
    for length in (0, 7, RECORD_BYTES - 1):
        path.write_bytes(written[:length])
        assert published(log_dir) is None, length


@pytest.mark.parametrize(
    ("field_offset", "value"),
    [(16, 10), (24, 5), (16, -1), (24, -1), (72, 5), (72, -1)],
    ids=[
        "high-watermark-past-log-end",
        "log-start-past-high-watermark",
        "negative-high-watermark",
        "negative-start",
        "last-stable-offset-past-high-watermark",
        "last-stable-offset-below-log-start",
    ],
)
def test_forged_offsets_with_a_good_crc_read_as_none(
    log_dir: Path, written: bytes, field_offset: int, value: int
) -> None:
    forged = bytearray(written)
    struct.pack_into(">q", forged, field_offset, value)
    struct.pack_into(">I", forged, CRC_OFFSET, zlib.crc32(forged[:CRC_OFFSET]))
    file_names.high_watermark_file(log_dir).write_bytes(bytes(forged))
    assert published(log_dir) is None


def test_a_missing_file_has_no_reader(log_dir: Path) -> None:
    assert HighWatermarkReader.open(str(file_names.high_watermark_file(log_dir))) is None


def test_the_last_stable_offset_is_published_beside_the_high_watermark(
    log_dir: Path, clock: MockClock, logs: list[Log]
) -> None:
    log = open_log(log_dir, clock)
    logs.append(log)
    hw_file = HighWatermarkFile.create(log_dir)
    log.append(simple_batch(2))
    transactional = RecordBatchBuilder(producer_id=4, producer_epoch=0, base_sequence=0, is_transactional=True)
    transactional.append(None, b"open", timestamp=clock.milliseconds())
    log.append(transactional.build())
    log.append(simple_batch(1))
    hw_file.publish(log)
    found = published(log_dir)
    assert found is not None and (found.last_stable_offset, found.high_watermark) == (2, 4)
    log.append_transaction_marker(4, 0, 0, ControlRecordType.COMMIT)
    hw_file.publish(log)
    found = published(log_dir)
    assert found is not None and found.last_stable_offset == found.high_watermark == 5
    hw_file.close()

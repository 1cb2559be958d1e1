"""Invariants the reliability tests check on a log after recovery: indexes that agree with the `.log`.

Offset index (Kafka's semantics): an entry `(offset, position)` is written for an append whose
last offset is `offset` and whose first batch starts at `position`, so `position` must be a batch boundary of
the `.log`, the batch there must start at or below `offset` (a lookup of any target >= offset scans on from
there), `offset` must be below the segment's next offset, and offsets and positions strictly increase.
Time index: timestamps and offsets never decrease, and every offset lies in the segment.

Also the `shm_path` fixture the reliability modules share.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.partition.log import Log
from storage.segment.log_segment import LogSegment


def check_segment_indexes(segment: LogSegment) -> None:
    """Asserts the offset and time indexes of `segment` agree with its `.log` (see the module docstring)."""
    batches = {batch.position: batch for batch in segment.log.batches(0)}
    next_offset = segment.read_next_offset()
    previous = None
    for entry in segment.offset_index.entries_list():
        batch = batches.get(entry.position)
        assert batch is not None, f"{segment.offset_index.path}: {entry} does not point at a batch"
        assert batch.base_offset <= entry.offset < next_offset, f"{segment.offset_index.path}: {entry} vs {batch}"
        if previous is not None:
            assert entry.offset > previous.offset and entry.position > previous.position, (previous, entry)
        previous = entry
    last_timestamp, last_offset = -1, segment.base_offset
    for time_entry in segment.time_index.entries_list():
        assert time_entry.timestamp >= last_timestamp, f"{segment.time_index.path}: {time_entry} not monotonic"
        assert last_offset <= time_entry.offset < max(next_offset, segment.base_offset + 1), (
            f"{segment.time_index.path}: {time_entry} outside [{last_offset}, {next_offset})"
        )
        last_timestamp, last_offset = time_entry.timestamp, time_entry.offset


def check_log_indexes(log: Log) -> None:
    """`check_segment_indexes` for every segment, plus segment bases that increase and do not overlap."""
    previous_next = None
    for segment in log.log_segments():
        check_segment_indexes(segment)
        if previous_next is not None:
            assert segment.base_offset >= previous_next, f"segment {segment.base_offset} overlaps the one before"
        previous_next = segment.read_next_offset()


@pytest.fixture(name="shm_path")
def shm_path_fixture(tmp_path: Path) -> Iterator[Path]:
    """A fresh folder in /dev/shm when it exists (tmpfs: the thousands of fsyncs of a sweep cost nothing, and
    the crash models here are process deaths and damaged bytes, not power cuts), else pytest's `tmp_path`."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    directory = Path(tempfile.mkdtemp(prefix="rb-reliability-", dir=shm))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)

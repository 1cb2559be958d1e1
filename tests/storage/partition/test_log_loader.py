"""Tests for `storage.partition.log_loader`, after Kafka's LogLoaderTest and the recovery cases of LogSegmentTest and
LogCleanerTest (spec §2.13, §3.11, §4 items 25-32, 35): every crash leftover is repaired on open, what was
dropped is reported, and everything that was not damaged survives byte for byte."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import file_names
from storage.clock import MockClock
from storage.config.log_config import LogConfig
from storage.partition.log import Log
from storage.partition.log_loader import DroppedBytes, LogLoader
from storage.records.file_records import iter_any_batches
from storage.records.record_batch import RecordBatch
from storage.segment.log_segment import LogSegment
from tests.storage.builders import (
    START_MS,
    Rec,
    all_records,
    as_recs,
    batch_bytes,
    crash,
    file_states,
    segment_bases,
    simple_batch,
    simple_records,
)

SETTINGS = {"segment_bytes": 400, "index_interval_bytes": 1, "segment_index_bytes": 600}


def open_log(logs: list[Log], directory: Path, clock: MockClock, **kwargs: object) -> Log:
    settings = {key: kwargs.pop(key) for key in list(kwargs) if key in LogConfig.__dataclass_fields__}
    log = Log.open(directory, LogConfig(**{**SETTINGS, **settings}), clock=clock, **kwargs)  # type: ignore[arg-type]
    logs.append(log)
    return log


def fill(log: Log, count: int, *, start: int = 0) -> list[Rec]:
    """Appends `count` single-record batches with increasing timestamps; returns the oracle."""
    oracle = []
    for i in range(start, start + count):
        records = simple_records(1, timestamp=START_MS + 10 * i, tag=i)
        log.append(batch_bytes(records))
        oracle += records
    return oracle


def log_bytes(directory: Path) -> dict[int, bytes]:
    return {base: file_names.log_file(directory, base).read_bytes() for base in segment_bases(directory)}


def batch_positions(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of every batch in a .log's bytes."""
    out, position = [], 0
    while position < len(data):
        size = RecordBatch(data, position).size_in_bytes
        out.append((position, size))
        position += size
    return out


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0xFF]))


# --- unclean shutdown --------------------------------------------------------------------------------


def test_unclean_reopen_recovers_every_record(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 30)
    before = log_bytes(log_dir)
    crash(log)
    reopened = open_log(logs, log_dir, clock)
    assert reopened.dropped_on_open == ()
    assert reopened.log_end_offset == 30
    assert reopened.recovery_point == 0
    assert as_recs(all_records(reopened)) == oracle
    assert log_bytes(log_dir) == before
    assert reopened.append(simple_batch(1, tag=99)).first_offset == 30


def test_recovery_point_after_reopen_is_the_checkpoint_when_unclean_and_the_end_when_clean(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 12)
    crash(log)
    assert open_log(logs, log_dir, clock, recovery_point=5).recovery_point == 5
    logs[-1].close()
    assert open_log(logs, log_dir, clock, recovery_point=5).recovery_point == 12
    logs[-1].close()
    crash_log = open_log(logs, log_dir, clock, had_clean_shutdown=False, recovery_point=50)
    assert crash_log.recovery_point == 12


def test_garbage_appended_to_active_log_and_index_is_truncated(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 25)
    active = log.active_segment
    log_path, index_path = active.log.path, active.offset_index_path
    before = log_bytes(log_dir)
    crash(log)
    rng = random.Random(99)
    garbage = rng.randbytes(97)
    with open(log_path, "ab") as handle:
        handle.write(garbage)
    with open(index_path, "ab") as handle:
        handle.write(rng.randbytes(13))
    reopened = open_log(logs, log_dir, clock)
    assert reopened.dropped_on_open == (DroppedBytes(str(log_path), len(before[active.base_offset]), len(garbage)),)
    assert log_bytes(log_dir) == before
    assert as_recs(all_records(reopened)) == oracle
    assert reopened.log_end_offset == 25


def test_last_batch_truncated_at_every_byte_position(tmp_path: Path, clock: MockClock) -> None:
    template = tmp_path / "template"
    log = Log.open(template, LogConfig(**SETTINGS), clock=clock)
    oracle = fill(log, 3)
    log.close()
    log_path = file_names.log_file(template, 0)
    data = log_path.read_bytes()
    last_position, last_size = batch_positions(data)[-1]
    os.unlink(template / file_names.CLEAN_SHUTDOWN_FILE)
    for cut in range(1, last_size):
        directory = tmp_path / f"cut-{cut}"
        shutil.copytree(template, directory)
        os.truncate(file_names.log_file(directory, 0), len(data) - cut)
        reopened = Log.open(directory, LogConfig(**SETTINGS), clock=clock)
        assert reopened.log_end_offset == 2, cut
        assert reopened.dropped_on_open == (
            DroppedBytes(str(file_names.log_file(directory, 0)), last_position, last_size - cut),
        )
        assert as_recs(all_records(reopened)) == oracle[:2]
        assert reopened.append(batch_bytes(oracle[2:])).first_offset == 2
        reopened.close()
        assert file_names.log_file(directory, 0).read_bytes() == data


def test_corrupt_batch_mid_segment_truncates_from_it_and_deletes_later_segments(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 30)
    bases = segment_bases(log_dir)
    assert len(bases) >= 5
    victim = bases[2]
    victim_path = file_names.log_file(log_dir, victim)
    data = victim_path.read_bytes()
    position, size = batch_positions(data)[2]
    later = {base: file_names.log_file(log_dir, base).stat().st_size for base in bases[3:]}
    crash(log)
    flip_byte(victim_path, position + size - 3)
    reopened = open_log(logs, log_dir, clock)
    assert reopened.dropped_on_open == (
        DroppedBytes(str(victim_path), position, len(data) - position),
        *(DroppedBytes(str(file_names.log_file(log_dir, base)), 0, later[base]) for base in bases[3:]),
    )
    assert segment_bases(log_dir) == bases[:3]
    assert not any(file_names.index_file(log_dir, base).exists() for base in bases[3:])
    assert reopened.log_end_offset == victim + 2
    assert as_recs(all_records(reopened)) == oracle[: victim + 2]
    assert victim_path.read_bytes() == data[:position]


def test_segment_cut_while_rebuilding_a_broken_index_also_drops_later_segments(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    """A segment whose index fails its sanity check is rebuilt while loading; if that rebuild cuts it short,
    the later segments go as with any other truncation, instead of leaving a hole in the offsets."""
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 30)
    bases = segment_bases(log_dir)
    victim = file_names.log_file(log_dir, bases[1])
    crash(log)
    flip_byte(victim, victim.stat().st_size - 3)
    with open(file_names.index_file(log_dir, bases[1]), "ab") as handle:
        handle.write(b"\x01\x02\x03")  # no longer a multiple of the 8-byte entry size
    reopened = open_log(logs, log_dir, clock)
    assert segment_bases(log_dir) == bases[:2]
    assert [drop.path for drop in reopened.dropped_on_open] == [
        str(file_names.log_file(log_dir, base)) for base in bases[1:]
    ]
    assert as_recs(all_records(reopened)) == oracle[: bases[2] - 1]
    assert reopened.log_end_offset == bases[2] - 1


def test_zero_filled_tail_is_dropped(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 7)
    path = log.active_segment.log.path
    size = path.stat().st_size
    crash(log)
    with open(path, "ab") as handle:
        handle.write(bytes(300))
    reopened = open_log(logs, log_dir, clock)
    assert reopened.dropped_on_open == (DroppedBytes(str(path), size, 300),)
    assert as_recs(all_records(reopened)) == oracle


def test_preallocated_segments_survive_a_crash(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock, preallocate=True)
    oracle = fill(log, 20)
    active = log.active_segment
    assert active.log.path.stat().st_size == SETTINGS["segment_bytes"]
    sealed_sizes = [segment.size for segment in log.log_segments()[:-1]]
    crash(log)
    reopened = open_log(logs, log_dir, clock, preallocate=True)
    assert [segment.size for segment in reopened.log_segments()[:-1]] == sealed_sizes
    assert [drop.position for drop in reopened.dropped_on_open] == [active.size]
    assert as_recs(all_records(reopened)) == oracle
    reopened.close()
    assert all(
        file_names.log_file(log_dir, base).stat().st_size < SETTINGS["segment_bytes"] for base in segment_bases(log_dir)
    )


def test_index_overwritten_with_random_bytes_is_rebuilt(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 30)
    expected = {
        segment.base_offset: (segment.offset_index.entries_list(), segment.time_index.entries_list())
        for segment in log.log_segments()[:-1]
    }
    crash(log)
    rng = random.Random(4)
    for base in segment_bases(log_dir):
        for path in (file_names.index_file(log_dir, base), file_names.time_index_file(log_dir, base)):
            path.write_bytes(rng.randbytes(path.stat().st_size))
    reopened = open_log(logs, log_dir, clock)
    assert reopened.dropped_on_open == ()
    for segment in reopened.log_segments()[:-1]:
        assert (segment.offset_index.entries_list(), segment.time_index.entries_list()) == expected[segment.base_offset]
    assert as_recs(all_records(reopened)) == oracle
    for i, record in enumerate(oracle):
        assert reopened.offset_for_timestamp(record.timestamp) == i
        assert RecordBatch(reopened.read(i, 1).records).base_offset == i


@pytest.mark.parametrize("missing", ["index", "timeindex", "both"])
def test_missing_index_files_are_rebuilt_on_unclean_reopen(
    logs: list[Log], log_dir: Path, clock: MockClock, missing: str
) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 30)
    expected = {
        segment.base_offset: (segment.offset_index.entries_list(), segment.time_index.entries_list())
        for segment in log.log_segments()[:-1]
    }
    crash(log)
    for base in segment_bases(log_dir):
        if missing in ("index", "both"):
            file_names.index_file(log_dir, base).unlink()
        if missing in ("timeindex", "both"):
            file_names.time_index_file(log_dir, base).unlink()
    reopened = open_log(logs, log_dir, clock)
    for segment in reopened.log_segments()[:-1]:
        assert (segment.offset_index.entries_list(), segment.time_index.entries_list()) == expected[segment.base_offset]
    for i, record in enumerate(oracle):
        assert reopened.offset_for_timestamp(record.timestamp) == i
    reopened.close()
    for base in segment_bases(log_dir):
        assert file_names.index_file(log_dir, base).exists()
        assert file_names.time_index_file(log_dir, base).exists()


def test_missing_offset_index_is_rebuilt_even_after_a_clean_shutdown(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock)
    oracle = fill(log, 20)
    expected = [segment.offset_index.entries_list() for segment in log.log_segments()]
    log.close()
    for base in segment_bases(log_dir):
        file_names.index_file(log_dir, base).unlink()
    reopened = open_log(logs, log_dir, clock)
    assert [segment.offset_index.entries_list() for segment in reopened.log_segments()] == expected
    assert as_recs(all_records(reopened)) == oracle


def test_orphan_index_files_are_deleted(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 5)
    log.close()
    bogus = [
        file_names.index_file(log_dir, 999),
        file_names.time_index_file(log_dir, 999),
        file_names.txn_index_file(log_dir, 999),
        file_names.index_file(log_dir, 3),
    ]
    for path in bogus:
        path.write_bytes(b"\x00" * 24)
    unrelated = log_dir / "leader-epoch-checkpoint"
    unrelated.write_text("0\n0\n")
    reopened = open_log(logs, log_dir, clock)
    assert not any(path.exists() for path in bogus)
    assert unrelated.exists()
    assert reopened.log_end_offset == 5


def test_stray_deleted_files_are_removed_and_segments_stay_deleted(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock, file_delete_delay_ms=60_000)
    oracle = fill(log, 30)
    log.truncate_to(12)
    deleted = sorted(path.name for path in log_dir.iterdir() if path.name.endswith(file_names.DELETED_SUFFIX))
    assert deleted
    log.close()
    stray = file_names.log_file(log_dir, 5000, file_names.DELETED_SUFFIX)
    stray.write_bytes(simple_batch(1))
    reopened = open_log(logs, log_dir, clock)
    assert not any(path.name.endswith(file_names.DELETED_SUFFIX) for path in log_dir.iterdir())
    assert reopened.log_end_offset == 12
    assert as_recs(all_records(reopened)) == oracle[:12]


# --- interrupted compaction / split (spec §2.13) -------------------------------------------------------


def copy_segment(directory: Path, base: int, new_base: int, suffix: str) -> None:
    for source, target in zip(
        file_names.segment_files(directory, base), file_names.segment_files(directory, new_base, suffix), strict=True
    ):
        if source.exists():
            shutil.copyfile(source, target)


def merged_swap(directory: Path, bases: list[int], *, with_indexes: bool) -> None:
    """What a cleaning pass leaves when it merged `bases` into one segment and crashed after `.cleaned` -> `.swap`."""
    data = b"".join(file_names.log_file(directory, base).read_bytes() for base in bases)
    file_names.log_file(directory, bases[0], file_names.SWAP_SUFFIX).write_bytes(data)
    if with_indexes:
        file_names.index_file(directory, bases[0], file_names.SWAP_SUFFIX).write_bytes(b"")
        file_names.time_index_file(directory, bases[0], file_names.SWAP_SUFFIX).write_bytes(b"")


@pytest.fixture
def closed_log(tmp_path: Path, clock: MockClock) -> tuple[Path, list[Rec], list[int]]:
    directory = tmp_path / "topic-0"
    log = Log.open(directory, LogConfig(**SETTINGS), clock=clock)
    oracle = fill(log, 30)
    log.close()
    bases = segment_bases(directory)
    assert len(bases) >= 5
    return directory, oracle, bases


def assert_no_in_flight_files(directory: Path) -> None:
    assert [path.name for path in directory.iterdir() if path.name.endswith(file_names.IN_FLIGHT_SUFFIXES)] == []


def test_leftover_cleaned_files_are_dropped(
    logs: list[Log], clock: MockClock, closed_log: tuple[Path, list[Rec], list[int]]
) -> None:
    directory, oracle, bases = closed_log
    copy_segment(directory, bases[1], bases[1], file_names.CLEANED_SUFFIX)
    before = log_bytes(directory)
    reopened = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert log_bytes(directory) == before
    assert as_recs(all_records(reopened)) == oracle


@pytest.mark.parametrize("with_indexes", [True, False])
def test_swap_replacing_segments_not_yet_deleted_completes(
    logs: list[Log], clock: MockClock, closed_log: tuple[Path, list[Rec], list[int]], with_indexes: bool
) -> None:
    directory, oracle, bases = closed_log
    merged_swap(directory, bases[1:3], with_indexes=with_indexes)
    reopened = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert segment_bases(directory) == [bases[0], bases[1], *bases[3:]]  # the merge is named after its first base
    assert as_recs(all_records(reopened)) == oracle
    reopened.close()
    again = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert as_recs(all_records(again)) == oracle


def test_swap_whose_old_segments_were_already_renamed_deleted_completes(
    logs: list[Log], clock: MockClock, closed_log: tuple[Path, list[Rec], list[int]]
) -> None:
    directory, oracle, bases = closed_log
    merged_swap(directory, bases[1:3], with_indexes=True)
    for base in bases[1:3]:
        for path in file_names.segment_files(directory, base):
            if path.exists():
                path.rename(file_names.with_suffix(path, file_names.DELETED_SUFFIX))
    reopened = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert segment_bases(directory) == [bases[0], bases[1], *bases[3:]]  # the merge is named after its first base
    assert as_recs(all_records(reopened)) == oracle


def test_swap_renamed_from_a_real_segment_whose_original_is_gone_completes(
    logs: list[Log], clock: MockClock, closed_log: tuple[Path, list[Rec], list[int]]
) -> None:
    directory, oracle, bases = closed_log
    before = log_bytes(directory)
    for path in file_names.segment_files(directory, bases[2]):
        if path.exists():
            path.rename(file_names.with_suffix(path, file_names.SWAP_SUFFIX))
    reopened = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert log_bytes(directory) == before
    assert as_recs(all_records(reopened)) == oracle


def test_swap_at_or_above_a_cleaned_file_belongs_to_an_unfinished_split_and_is_dropped(
    logs: list[Log], clock: MockClock, closed_log: tuple[Path, list[Rec], list[int]]
) -> None:
    directory, oracle, bases = closed_log
    copy_segment(directory, bases[1], bases[1], file_names.CLEANED_SUFFIX)
    copy_segment(directory, bases[2], bases[2], file_names.SWAP_SUFFIX)
    before = log_bytes(directory)
    reopened = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert log_bytes(directory) == before
    assert as_recs(all_records(reopened)) == oracle


def test_swap_below_the_cleaned_files_still_completes(
    logs: list[Log], clock: MockClock, closed_log: tuple[Path, list[Rec], list[int]]
) -> None:
    directory, oracle, bases = closed_log
    merged_swap(directory, bases[0:2], with_indexes=True)
    copy_segment(directory, bases[3], bases[3], file_names.CLEANED_SUFFIX)
    reopened = open_log(logs, directory, clock)
    assert_no_in_flight_files(directory)
    assert segment_bases(directory) == [bases[0], *bases[2:]]
    assert as_recs(all_records(reopened)) == oracle


# --- what is (not) recovered -------------------------------------------------------------------------


def test_only_segments_from_the_recovery_point_are_recovered(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 30)
    bases = segment_bases(log_dir)
    old = file_names.log_file(log_dir, bases[1])
    crash(log)
    flip_byte(old, old.stat().st_size - 2)
    damaged = old.read_bytes()
    reopened = open_log(logs, log_dir, clock, recovery_point=bases[-1])
    assert reopened.dropped_on_open == ()
    assert old.read_bytes() == damaged
    assert reopened.log_end_offset == 30
    crash(reopened)
    recovered = open_log(logs, log_dir, clock, recovery_point=bases[1])
    assert recovered.dropped_on_open[0].path == str(old)
    assert recovered.log_end_offset < 30


def test_clean_shutdown_skips_recovery_even_with_recovery_point_zero(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 20)
    log.close()
    path = file_names.log_file(log_dir, segment_bases(log_dir)[0])
    flip_byte(path, path.stat().st_size - 1)
    damaged = path.read_bytes()
    reopened = open_log(logs, log_dir, clock, recovery_point=0)
    assert reopened.dropped_on_open == ()
    assert path.read_bytes() == damaged
    assert reopened.log_end_offset == 20
    assert not (log_dir / file_names.CLEAN_SHUTDOWN_FILE).exists(), "the marker is deleted while the log is open"


def test_clean_reopen_modifies_no_file(logs: list[Log], log_dir: Path, clock: MockClock) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 30)
    log.close()
    before = file_states(log_dir)
    reopened = open_log(logs, log_dir, clock)
    all_records(reopened)
    reopened.fetch_offset_by_timestamp(START_MS + 55)
    reopened.close()
    after = file_states(log_dir)
    assert sorted(after) == sorted(before)
    active = segment_bases(log_dir)[-1]
    # The active segment's indexes are resized to segment.index.bytes on load and trimmed on close (spec §2.9),
    # and the marker is deleted on open and rewritten on close: their bytes match, their mtimes may not.
    touched = {
        file_names.index_file(log_dir, active).name,
        file_names.time_index_file(log_dir, active).name,
        file_names.CLEAN_SHUTDOWN_FILE,
    }
    for name, (content, mtime) in before.items():
        assert after[name][0] == content, name
        if name not in touched:
            assert after[name][1] == mtime, name


def test_log_end_below_checkpointed_log_start_deletes_everything(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 10)
    log.close()
    reopened = open_log(logs, log_dir, clock, log_start_offset=50)
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.num_segments) == (50, 50, 1)
    assert segment_bases(log_dir) == [50]
    assert reopened.append(simple_batch(1)).first_offset == 50


def test_loader_reports_recovered_segments(log_dir: Path, clock: MockClock, logs: list[Log]) -> None:
    log = open_log(logs, log_dir, clock)
    fill(log, 30)
    bases = segment_bases(log_dir)
    crash(log)
    loaded = LogLoader(
        log_dir,
        LogConfig(**SETTINGS),
        clock,
        had_clean_shutdown=False,
        recovery_point=bases[-2],
        log_start_offset_checkpoint=0,
    ).load()
    assert loaded.recovered_segments == 2
    assert loaded.log_end_offset == 30
    for segment in loaded.segments:
        segment.close()


def test_multi_batch_appends_survive_recovery_with_a_small_index(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    """Appends index once per call but recovery once per batch: a rebuilt index that runs out of slots must
    stop adding entries, not cost the segment (and every later one) its data."""
    settings = {"segment_bytes": 10_000, "segment_index_bytes": 48, "index_interval_bytes": 0}
    log = open_log(logs, log_dir, clock, **settings)
    oracle: list[Rec] = []
    for i in range(12):
        records = [simple_records(1, timestamp=START_MS + 3 * i + j, tag=3 * i + j)[0] for j in range(3)]
        log.append(b"".join(batch_bytes([record]) for record in records))
        oracle += records
    assert log.num_segments == 3
    crash(log)
    reopened = open_log(logs, log_dir, clock, **settings)
    assert reopened.dropped_on_open == ()
    assert as_recs(all_records(reopened)) == oracle
    for i, record in enumerate(oracle):
        assert reopened.offset_for_timestamp(record.timestamp) == i


# --- property: any damage to any file is repaired on open, never with a raw error ------------------------

DAMAGE = st.lists(
    st.tuples(
        st.integers(0, 10**6),  # which file (modulo the files present)
        st.sampled_from(["flip", "truncate", "garbage", "delete", "zero"]),
        st.floats(0, 1, exclude_max=True),  # where in the file
        st.integers(1, 200),  # how many bytes (garbage / zeros) or which bit (flip)
    ),
    min_size=1,
    max_size=3,
)


def damage(directory: Path, damages: list[tuple[int, str, float, int]], rng: random.Random) -> set[str]:
    """Applies the damages; returns the suffixes of the files touched."""
    touched = set()
    for which, operation, where, amount in damages:
        files = sorted(path for path in directory.iterdir() if path.is_file())
        path = files[which % len(files)]
        touched.add(path.suffix)
        data = bytearray(path.read_bytes())
        position = int(where * len(data))
        if operation == "delete":
            path.unlink()
        elif operation == "garbage":
            path.write_bytes(bytes(data) + rng.randbytes(amount))
        elif data and operation == "flip":
            data[position] ^= 1 << (amount % 8)
            path.write_bytes(bytes(data))
        elif data and operation == "truncate":
            path.write_bytes(bytes(data[:position]))
        elif data and operation == "zero":
            end = min(len(data), position + amount)
            data[position:end] = bytes(end - position)
            path.write_bytes(bytes(data))
    return touched


@pytest.fixture(scope="module")
def crashed_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Rec]]:
    directory = tmp_path_factory.mktemp("template") / "topic-0"
    log = Log.open(directory, LogConfig(**SETTINGS), clock=MockClock(START_MS))
    oracle: list[Rec] = []
    for i in range(30):
        records = simple_records(1 + i % 3, timestamp=START_MS + i, tag=i)
        log.append(batch_bytes(records))
        oracle += records
    crash(log)
    return directory, oracle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damages=DAMAGE, seed=st.integers(0, 2**32 - 1))
def test_any_damage_is_repaired_on_open(crashed_template: tuple[Path, list[Rec]], damages: list, seed: int) -> None:
    template, oracle = crashed_template
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "topic-0"
        shutil.copytree(template, directory)
        touched = damage(directory, damages, random.Random(seed))
        log = Log.open(directory, LogConfig(**SETTINGS), clock=MockClock(START_MS))
        try:
            records = all_records(log)
            if touched <= {file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX}:
                assert as_recs(records) == oracle, "index files are rebuilt from the .log: no record may be lost"
            # bytes under the CRC cannot change unnoticed; only a baseOffset outside it could move a record
            assert {(r.key, r.value, r.timestamp) for r in records} <= {(r.key, r.value, r.timestamp) for r in oracle}
            end = log.log_end_offset
            assert log.append(simple_batch(1)).first_offset == end
        finally:
            log.close()
        reopened = Log.open(directory, LogConfig(**SETTINGS), clock=MockClock(START_MS))
        assert reopened.dropped_on_open == ()
        assert reopened.log_end_offset == end + 1
        reopened.close()


# --- legacy segments with offset overflow (KAFKA-6264) -----------------------------------------------------

# Offsets in a segment are stored relative to its base in 32 bits (0..2**31 - 1); 2**31 is the first that is not.
OVERFLOW = 2**31
# (base offset, record count) of each batch, by segment file: segment 0 holds what Kafka wrote before the fix of
# KAFKA-6264, offsets 2**31 and 2**32 + 3 above its base; the segment after it is ordinary.
OVERFLOWED_LAYOUT = {
    0: [(0, 1), (1, 1), (OVERFLOW - 3, 2), (OVERFLOW, 1), (OVERFLOW + 5, 3), (2 * OVERFLOW + 3, 1)],
    2 * OVERFLOW + 4: [(2 * OVERFLOW + 4, 2)],
}
# Kafka's split: a new segment at the first batch whose last offset does not fit the segment being filled.
SPLIT_BASES = [0, OVERFLOW, 2 * OVERFLOW + 3, 2 * OVERFLOW + 4]


def write_overflowed_log(directory: Path, *, with_indexes: bool) -> list[tuple[int, bytes | None]]:
    """Writes `OVERFLOWED_LAYOUT` (v2 batches, no producer) and returns (offset, value) of every record. With
    indexes (empty ones), segments load as intact and the overflow is met by crash recovery; without, it is met
    while rebuilding the missing indexes."""
    directory.mkdir(parents=True)
    oracle: list[tuple[int, bytes | None]] = []
    for segment_base, batches in OVERFLOWED_LAYOUT.items():
        data = b""
        for base, count in batches:
            records = [Rec(b"k", f"v{base + delta}".encode(), START_MS) for delta in range(count)]
            data += batch_bytes(records, base_offset=base)
            oracle += [(base + delta, records[delta].value) for delta in range(count)]
        file_names.log_file(directory, segment_base).write_bytes(data)
        if with_indexes:
            file_names.index_file(directory, segment_base).write_bytes(b"")
            file_names.time_index_file(directory, segment_base).write_bytes(b"")
    return oracle


def assert_every_offset_fits_its_segment(directory: Path) -> None:
    for base in segment_bases(directory):
        for batch in iter_any_batches(file_names.log_file(directory, base).read_bytes()):
            assert base <= batch.base_offset and batch.last_offset - base < OVERFLOW, (base, batch.last_offset)


@pytest.mark.parametrize("with_indexes", [True, False])
def test_segment_with_offset_overflow_is_split_and_keeps_every_record(
    logs: list[Log], log_dir: Path, clock: MockClock, with_indexes: bool
) -> None:
    oracle = write_overflowed_log(log_dir, with_indexes=with_indexes)

    log = open_log(logs, log_dir, clock)

    assert [(record.offset, record.value) for record in log.records()] == oracle
    assert log.log_end_offset == 2 * OVERFLOW + 6
    assert segment_bases(log_dir) == SPLIT_BASES
    assert [segment.base_offset for segment in log.log_segments()] == SPLIT_BASES
    assert_every_offset_fits_its_segment(log_dir)
    assert_no_in_flight_files(log_dir)
    log.close()
    reopened = open_log(logs, log_dir, clock)
    assert [(record.offset, record.value) for record in reopened.records()] == oracle


class Crash(BaseException):
    """The process dies here: nothing after it runs, no cleanup either (not an `Exception`)."""


# The split renames 3 `.cleaned` segments to `.swap`, the old segment to `.deleted`, then the 3 `.swap` to final
# names: a crash before rename 1 leaves only `.cleaned` files, before 2-3 some `.swap`, before 4 every `.swap`
# beside the intact old segment, before 5 the old one renamed `.deleted`, before 6-7 some split segments final.
SPLIT_RENAMES = 7


@pytest.mark.parametrize("crash_before_rename", range(1, SPLIT_RENAMES + 1))
def test_crash_during_split_recovers_every_record_on_the_next_open(
    logs: list[Log], log_dir: Path, clock: MockClock, monkeypatch: pytest.MonkeyPatch, crash_before_rename: int
) -> None:
    oracle = write_overflowed_log(log_dir, with_indexes=False)
    renames = 0
    change_file_suffixes = LogSegment.change_file_suffixes

    def crashing_change_file_suffixes(segment: LogSegment, old_suffix: str, new_suffix: str) -> None:
        nonlocal renames
        renames += 1
        if renames == crash_before_rename:
            raise Crash
        change_file_suffixes(segment, old_suffix, new_suffix)

    with monkeypatch.context() as patch:
        patch.setattr(LogSegment, "change_file_suffixes", crashing_change_file_suffixes)
        with pytest.raises(Crash):
            open_log(logs, log_dir, clock)
    assert [path.name for path in log_dir.iterdir() if path.name.endswith(file_names.IN_FLIGHT_SUFFIXES)] != []

    log = open_log(logs, log_dir, clock)

    assert [(record.offset, record.value) for record in log.records()] == oracle
    assert segment_bases(log_dir) == SPLIT_BASES
    assert_every_offset_fits_its_segment(log_dir)
    assert_no_in_flight_files(log_dir)


def test_torn_tail_of_an_overflowed_segment_is_dropped_by_the_split_like_recovery_would(
    logs: list[Log], log_dir: Path, clock: MockClock
) -> None:
    oracle = write_overflowed_log(log_dir, with_indexes=True)
    first = file_names.log_file(log_dir, 0)
    whole_size = first.stat().st_size
    later_base = 2 * OVERFLOW + 4
    later = file_names.log_file(log_dir, later_base)
    later_size = later.stat().st_size
    torn = batch_bytes([Rec(b"k", b"torn", START_MS)], base_offset=2 * OVERFLOW + 4)[:-5]
    with open(first, "ab") as handle:
        handle.write(torn)

    log = open_log(logs, log_dir, clock)

    assert [(record.offset, record.value) for record in log.records()] == [
        (offset, value) for offset, value in oracle if offset < later_base
    ]
    assert segment_bases(log_dir) == SPLIT_BASES[:-1]
    assert log.dropped_on_open == (
        DroppedBytes(str(first), whole_size, len(torn)),
        DroppedBytes(str(later), 0, later_size),
    )
    assert_no_in_flight_files(log_dir)

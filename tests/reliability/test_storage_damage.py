"""Damaged files, swept systematically: what recovery keeps, what it reports, and that only typed errors escape.

The template is a crashed log (no clean-shutdown marker) of two segments whose batches use every codec. Each case
restores the template's bytes, damages them, and reopens:

| damage                                   | cases                              | expected                           |
|------------------------------------------|------------------------------------|------------------------------------|
| active `.log` cut at a position          | every byte of the last batch (and  | whole batches before the cut kept, |
|                                          | of the segment in the long mode)   | the rest reported as DroppedBytes  |
| first segment cut (recovery point 0)     | every byte (a sample when quick)   | its batches before the cut; later  |
|                                          |                                    | segments deleted and reported      |
| one bit flipped in a `.log`              | every byte of the first and the    | length, magic, CRC or CRC-covered  |
|                                          | active segment                     | byte: batches before it kept, the  |
|                                          |                                    | rest reported; other header bytes: |
|                                          |                                    | what recovery keeps is indexed     |
| zero-filled tail (preallocation)         | 1..4096 zeros, with and without    | batches before the zeros kept      |
|                                          | the last batch's end zeroed        |                                    |
| one bit flipped in `.index`/`.timeindex` | every byte, unclean and clean open | unclean: every record; clean: the  |
|                                          |                                    | log end stays right (see the test) |
| missing `.index` / `.timeindex` / both   | each segment, clean and unclean    | every record, indexes rebuilt      |
| checkpoint bad count / any bit flipped   | every byte of each checkpoint file | read as empty: full recovery,      |
|                                          |                                    | every record kept                  |
| meta.properties bit flips, truncation    | every byte                         | only typed errors                  |

Sweeps marked "every byte" run every position in the long mode and a random sample in the quick mode (`sweep`).
"Whatever escapes is typed" is checked on every case: an exception that is not a `RaybrokerError` fails the test.
"""

from __future__ import annotations

import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage import file_names
from storage.clock import MockClock
from storage.compaction.cleaner_manager import CleanerManager
from storage.config.log_config import LogConfig
from storage.errors import CorruptIndexError, CorruptRecordError, RaybrokerError
from storage.files.checkpoint_file import OffsetCheckpointFile
from storage.logdir.log_manager import LogManager
from storage.partition.log import Log
from storage.partition.log_loader import DroppedBytes
from storage.records.compression import CompressionType
from storage.records.record_batch import LOG_OVERHEAD, MAGIC_OFFSET, RecordBatch, RecordBatchBuilder
from tests.reliability.modes import LONG
from tests.reliability.storage_checks import check_log_indexes, shm_path_fixture  # noqa: F401 - the `shm_path` fixture

pytestmark = pytest.mark.reliability

START_MS = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=900, index_interval_bytes=60, segment_index_bytes=400)
CODECS = tuple(CompressionType)
CASES: Counter[str] = Counter()


def sweep(count: int, quick: int, seed: int) -> list[int]:
    """Every position below `count` in the long mode; `quick` of them, drawn at random, in the quick mode."""
    if LONG or count <= quick:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), quick))


Rec = tuple[int, bytes | None, bytes | None]


@dataclass(frozen=True)
class Template:
    """A crashed log's files (name -> bytes) and, per segment, its batches as (position, size, records)."""

    files: dict[str, bytes]
    segments: dict[int, list[tuple[int, int, list[Rec]]]]

    @property
    def records(self) -> list[Rec]:
        return [rec for base in sorted(self.segments) for _, _, recs in self.segments[base] for rec in recs]

    def records_before(self, base: int, position: int) -> list[Rec]:
        """Every record of earlier segments and of the batches of `base` that end at or before `position`."""
        kept = [rec for b in sorted(self.segments) if b < base for _, _, recs in self.segments[b] for rec in recs]
        return kept + [rec for pos, size, recs in self.segments[base] if pos + size <= position for rec in recs]

    def boundary_at_or_below(self, base: int, position: int) -> int:
        return max([0] + [pos + size for pos, size, _ in self.segments[base] if pos + size <= position])

    def batch_at(self, base: int, position: int) -> tuple[int, int]:
        """(position, size) of the batch of segment `base` holding byte `position`."""
        return next((pos, size) for pos, size, _ in self.segments[base] if pos <= position < pos + size)


def build_template(directory: Path) -> Template:
    log = Log.open(directory, CONFIG, clock=MockClock(START_MS))
    for n in range(16):
        builder = RecordBatchBuilder(compression=CODECS[n % len(CODECS)])
        for i in range(1 + n % 3):
            builder.append(f"k{i}".encode() if n % 2 else None, f"value-{n}-{i}".encode() * 3, timestamp=START_MS + n)
        log.append(builder.build())
    log.close_without_marker()
    files = {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}
    segments: dict[int, list[tuple[int, int, list[Rec]]]] = {}
    for name, data in files.items():
        parsed = file_names.parse_segment_name(name)
        if parsed is None or parsed[1] != file_names.LOG_SUFFIX:
            continue
        batches, position = [], 0
        while position < len(data):
            batch = RecordBatch(data, position)
            recs = [(record.offset, record.key, record.value) for record in batch.records()]
            batches.append((position, batch.size_in_bytes, recs))
            position += batch.size_in_bytes
        segments[parsed[0]] = batches
    assert len(segments) >= 2, "the template must roll"
    return Template(files, segments)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return build_template(tmp_path_factory.mktemp("damage-template") / "topic-0")


def restore(directory: Path, files: dict[str, bytes]) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)


def reopen(directory: Path) -> Log:
    """Opens the damaged folder; anything but a typed error fails the test."""
    try:
        return Log.open(directory, CONFIG, clock=MockClock(START_MS))
    except RaybrokerError:
        raise
    except Exception as exc:
        raise AssertionError(f"untyped {type(exc).__name__} escaped recovery: {exc}") from exc


def records_of(log: Log) -> list[Rec]:
    return [(record.offset, record.key, record.value) for record in log.records()]


def check_recovered(log: Log, expected: list[Rec]) -> None:
    """The log holds exactly `expected`, its indexes agree, and it takes an append at its end."""
    try:
        assert records_of(log) == expected
        check_log_indexes(log)
        end = log.log_end_offset
        assert end == (expected[-1][0] + 1 if expected else 0)
        builder = RecordBatchBuilder()
        builder.append(b"k", b"after-damage", timestamp=START_MS)
        assert log.append(builder.build()).first_offset == end
    finally:
        log.close()


def active_base(template: Template) -> int:
    return max(template.segments)


def log_name(base: int) -> str:
    return file_names.log_file(Path("."), base).name


def test_active_segment_cut_at_every_byte(template: Template, shm_path: Path) -> None:
    base = active_base(template)
    data = template.files[log_name(base)]
    directory = shm_path / "topic-0"
    last_position = template.segments[base][-1][0]
    # The last batch at every byte in both modes; the earlier batches at every byte in the long mode only.
    cuts = sorted(set(sweep(last_position, 10, 3)) | set(range(last_position, len(data))))
    for cut in cuts:
        restore(directory, {**template.files, log_name(base): data[:cut]})
        log = reopen(directory)
        boundary = template.boundary_at_or_below(base, cut)
        path = str(file_names.log_file(directory, base))
        assert log.dropped_on_open == ((DroppedBytes(path, boundary, cut - boundary),) if cut > boundary else ())
        check_recovered(log, template.records_before(base, cut))
        CASES["truncation"] += 1


def test_first_segment_cut_drops_it_from_the_cut_and_every_later_segment(template: Template, shm_path: Path) -> None:
    first = min(template.segments)
    data = template.files[log_name(first)]
    directory = shm_path / "topic-0"
    cuts = sweep(len(data), 15, 7)
    for cut in cuts:
        restore(directory, {**template.files, log_name(first): data[:cut]})
        log = reopen(directory)
        boundary = template.boundary_at_or_below(first, cut)
        dropped = {(Path(drop.path).name, drop.position, drop.size) for drop in log.dropped_on_open}
        if cut == boundary:
            # A cut between two batches leaves a valid (shorter) segment: nothing to notice, later ones stay.
            assert dropped == set()
            second = sorted(template.segments)[1]
            later_records = [rec for rec in template.records if rec[0] >= second]
            check_recovered(log, template.records_before(first, cut) + later_records)
        else:
            later = {(log_name(b), 0, len(template.files[log_name(b)])) for b in template.segments if b > first}
            assert dropped == later | {(log_name(first), boundary, cut - boundary)}
            check_recovered(log, template.records_before(first, cut))
        CASES["truncation"] += 1


def crc_protected(offset_in_batch: int) -> bool:
    """Bytes whose change recovery must notice: the length, magic, CRC and everything the CRC covers."""
    return offset_in_batch >= MAGIC_OFFSET or LOG_OVERHEAD - 4 <= offset_in_batch < LOG_OVERHEAD


@pytest.mark.parametrize("which", ["first", "active"])
def test_one_bit_flipped_anywhere_in_a_log_segment(template: Template, shm_path: Path, which: str) -> None:
    base = min(template.segments) if which == "first" else active_base(template)
    data = template.files[log_name(base)]
    directory = shm_path / "topic-0"
    rng = random.Random(11)
    for position in sweep(len(data), 20, 5):
        damaged = bytearray(data)
        damaged[position] ^= 1 << rng.randrange(8)
        restore(directory, {**template.files, log_name(base): bytes(damaged)})
        log = reopen(directory)
        batch_position, _ = template.batch_at(base, position)
        before = template.records_before(base, batch_position)
        if crc_protected(position - batch_position):
            dropped = {(Path(drop.path).name, drop.position, drop.size) for drop in log.dropped_on_open}
            later = {(log_name(b), 0, len(template.files[log_name(b)])) for b in template.segments if b > base}
            assert dropped == later | {(log_name(base), batch_position, len(data) - batch_position)}
            check_recovered(log, before)
        else:
            # baseOffset and partitionLeaderEpoch are outside the CRC (so a broker can rewrite them in place):
            # a flip there may go unnoticed, but everything before the batch must survive and stay indexed.
            try:
                assert records_of(log)[: len(before)] == before
                check_log_indexes(log)
            finally:
                log.close()
        CASES["bit flip .log"] += 1


@pytest.mark.parametrize(("batch", "new_base"), [(3, 0), (-1, 2**20)])
def test_regression_damaged_base_offset_keeps_the_batches_before_it(
    template: Template, shm_path: Path, batch: int, new_base: int
) -> None:
    """Bugs found by the `.log` bit-flip sweep (long mode). baseOffset is outside the CRC. A flip that lowered it
    made the index rebuild fail (InvalidOffsetError), so recovery emptied the whole segment and deleted every later
    one: one bit cost the entire log. A flip that raised the last batch's offsets into the next segment's range was
    kept, leaving overlapping segments. Recovery now cuts at such a batch, as at a CRC error."""
    first = min(template.segments)
    data = bytearray(template.files[log_name(first)])
    position, _, _ = template.segments[first][batch]
    data[position : position + 8] = new_base.to_bytes(8, "big")
    directory = shm_path / "topic-0"
    restore(directory, {**template.files, log_name(first): bytes(data)})
    log = reopen(directory)
    dropped = {(Path(drop.path).name, drop.position, drop.size) for drop in log.dropped_on_open}
    later = {(log_name(b), 0, len(template.files[log_name(b)])) for b in template.segments if b > first}
    assert dropped == later | {(log_name(first), position, len(data) - position)}
    check_recovered(log, template.records_before(first, position))


def test_zero_filled_tails_are_cut_at_the_last_whole_batch(template: Template, shm_path: Path) -> None:
    base = active_base(template)
    data = template.files[log_name(base)]
    last_position, last_size, _ = template.segments[base][-1]
    directory = shm_path / "topic-0"
    for zeros in (1, 16, 61, 512, 4096):
        for zeroed_tail in (0, 1, last_size // 2, last_size):
            damaged = data[: len(data) - zeroed_tail] + bytes(zeroed_tail + zeros)
            restore(directory, {**template.files, log_name(base): damaged})
            log = reopen(directory)
            # The last bytes of a batch are often zeros already (a record's header count): no damage then.
            keep_to = len(data) if data[len(data) - zeroed_tail :] == bytes(zeroed_tail) else last_position
            path = str(file_names.log_file(directory, base))
            assert log.dropped_on_open == (DroppedBytes(path, keep_to, len(damaged) - keep_to),)
            check_recovered(log, template.records_before(base, keep_to))
            CASES["zero-filled tail"] += 1


@pytest.mark.parametrize("suffix", [file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX])
def test_one_bit_flipped_anywhere_in_an_index(template: Template, shm_path: Path, suffix: str) -> None:
    directory = shm_path / "topic-0"
    rng = random.Random(13)
    for base in sorted(template.segments):
        name = log_name(base).replace(file_names.LOG_SUFFIX, suffix)
        data = template.files[name]
        for position in sweep(len(data), 6, base):
            damaged = bytearray(data)
            damaged[position] ^= 1 << rng.randrange(8)
            restore(directory, {**template.files, name: bytes(damaged)})
            check_recovered(reopen(directory), template.records)
            CASES[f"bit flip {suffix}"] += 1


def test_flipped_index_after_a_clean_shutdown_never_moves_the_log_end(template: Template, shm_path: Path) -> None:
    """A clean shutdown trusts indexes unread (Kafka's choice, KAFKA-7283), except the active segment's last
    offset-index entry, which the log end offset is read through. So for a bit flipped anywhere in any index:
    the log end offset stays right (no offset is handed out twice), the active segment reads back whole, reads
    return only true records in order or a typed error; a flip in an older segment's index may hide records
    from reads until the next unclean recovery, as in Kafka."""
    directory = shm_path / "topic-0"
    restore(directory, template.files)
    reopen(directory).close()
    clean = {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}
    end = template.records[-1][0] + 1
    active_records = template.records_before(active_base(template), 10**9)[
        len(template.records_before(active_base(template), 0)) :
    ]
    rng = random.Random(17)
    names = sorted(name for name in clean if name.endswith((file_names.INDEX_SUFFIX, file_names.TIME_INDEX_SUFFIX)))
    for name in names:
        for position in sweep(len(clean[name]), 7, len(name)):
            damaged = bytearray(clean[name])
            damaged[position] ^= 1 << rng.randrange(8)
            restore(directory, {**clean, name: bytes(damaged)})
            log = reopen(directory)
            try:
                assert log.log_end_offset == end, (name, position)
                try:
                    found = records_of(log)
                    log.offset_for_timestamp(START_MS + 5)
                except (CorruptRecordError, CorruptIndexError):
                    # The data is fine, the index misleads a read into it: a corruption error, never the I/O
                    # error (KafkaStorageError) that would take the whole log dir offline.
                    CASES["typed error"] += 1
                else:
                    assert set(found) <= set(template.records) and found == sorted(found), (name, position)
                    assert found[len(found) - len(active_records) :] == active_records, (name, position)
            finally:
                log.close()
            CASES["bit flip index, clean"] += 1


def test_regression_active_index_entry_pointing_past_the_log_does_not_reuse_offsets(
    template: Template, shm_path: Path
) -> None:
    """Bug found by the sweep above: after a clean shutdown, a last `.index` entry of the active segment whose
    position pointed past the `.log` (or before its batch) made the log end offset the segment's base, hiding
    its records, and the next append reused their offsets. The loader now checks that entry and rebuilds."""
    directory = shm_path / "topic-0"
    restore(directory, template.files)
    reopen(directory).close()
    base = active_base(template)
    index_path = file_names.index_file(directory, base)
    entries = bytearray(index_path.read_bytes())
    assert len(entries) >= 8, "the active segment needs an index entry"
    entries[-4:] = (2**30).to_bytes(4, "big")
    index_path.write_bytes(bytes(entries))
    log = reopen(directory)
    assert log.log_end_offset == template.records[-1][0] + 1
    check_recovered(log, template.records)


def test_regression_negative_index_position_is_not_an_io_error(template: Template, shm_path: Path) -> None:
    """Bug found by the clean-shutdown sweep: an offset-index entry whose position had its sign bit flipped made
    reads and time lookups pread at a negative position: EINVAL, raised as KafkaStorageError, which takes the
    log dir offline. A lookup now ignores such an entry and scans the segment from its start."""
    directory = shm_path / "topic-0"
    restore(directory, template.files)
    reopen(directory).close()
    first = min(template.segments)
    index_path = file_names.index_file(directory, first)
    entries = bytearray(index_path.read_bytes())
    for position in range(4, len(entries), 8):
        entries[position] ^= 0x80
    index_path.write_bytes(bytes(entries))
    log = reopen(directory)
    try:
        assert records_of(log) == template.records
        for n, (_, _, recs) in enumerate(template.segments[first]):
            assert log.offset_for_timestamp(START_MS + n) == recs[0][0]
    finally:
        log.close()


@pytest.mark.parametrize(
    "missing", [(file_names.INDEX_SUFFIX,), (file_names.TIME_INDEX_SUFFIX,), (file_names.INDEX_SUFFIX, ".timeindex")]
)
@pytest.mark.parametrize("clean", [False, True])
def test_missing_index_of_any_segment_is_rebuilt(
    template: Template, shm_path: Path, missing: tuple[str, ...], clean: bool
) -> None:
    directory = shm_path / "topic-0"
    restore(directory, template.files)
    if clean:
        reopen(directory).close()
    files = {path.name: path.read_bytes() for path in directory.iterdir() if path.is_file()}
    for base in sorted(template.segments):
        names = {log_name(base).replace(file_names.LOG_SUFFIX, suffix) for suffix in missing}
        restore(directory, {name: data for name, data in files.items() if name not in names})
        check_recovered(reopen(directory), template.records)
        CASES["missing index"] += 1


# --- log-dir files --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def log_dir_files(tmp_path_factory: pytest.TempPathFactory, template: Template) -> dict[str, bytes]:
    """A log dir holding the template as `topic-0` with all four offset checkpoints, left by a crash."""
    root = tmp_path_factory.mktemp("damage-dir") / "dir"
    manager = LogManager([root], default_config=CONFIG, clock=MockClock(START_MS), file_delete_delay_ms=0)
    manager.startup()
    log = manager.get_or_create_log("topic", 0)
    restored = {path.name for path in log.directory.iterdir()}
    manager.shutdown()
    for name in restored:
        (root / "topic-0" / name).unlink()
    for name, data in template.files.items():
        (root / "topic-0" / name).write_bytes(data)
    checkpoint = {("topic", 0): template.records[-1][0] + 1}
    for name in (file_names.RECOVERY_POINT_CHECKPOINT, file_names.REPLICATION_OFFSET_CHECKPOINT):
        OffsetCheckpointFile(root / name).write(checkpoint)
    OffsetCheckpointFile(root / file_names.CLEANER_OFFSET_CHECKPOINT).write({("topic", 0): 3})
    OffsetCheckpointFile(root / file_names.LOG_START_OFFSET_CHECKPOINT).write({})
    (root / file_names.CLEAN_SHUTDOWN_FILE).unlink()
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != file_names.LOCK_FILE
    }


def restore_dir(root: Path, files: dict[str, bytes]) -> None:
    if root.exists():
        shutil.rmtree(root)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def start_manager(root: Path) -> LogManager:
    manager = LogManager([root], default_config=CONFIG, clock=MockClock(START_MS), file_delete_delay_ms=0)
    try:
        manager.startup()
    except RaybrokerError:
        raise
    except Exception as exc:
        raise AssertionError(f"untyped {type(exc).__name__} escaped startup: {exc}") from exc
    return manager


def checkpoint_damages(text: bytes) -> Iterator[tuple[str, bytes]]:
    lines = text.split(b"\n")
    count = int(lines[1])
    for wrong in (count + 1, count - 1, -1, 2**31):
        yield "bad count", b"\n".join([lines[0], str(wrong).encode(), *lines[2:]])
    rng = random.Random(len(text))
    for position in sweep(len(text), 8, len(text)):
        damaged = bytearray(text)
        damaged[position] ^= 1 << rng.randrange(8)
        yield "bit flip", bytes(damaged)


@pytest.mark.parametrize(
    "name",
    [
        file_names.RECOVERY_POINT_CHECKPOINT,
        file_names.REPLICATION_OFFSET_CHECKPOINT,
        file_names.CLEANER_OFFSET_CHECKPOINT,
    ],
)
def test_damaged_checkpoint_never_costs_a_record(
    log_dir_files: dict[str, bytes], template: Template, shm_path: Path, name: str
) -> None:
    root = shm_path / "dir"
    for kind, damaged in checkpoint_damages(log_dir_files[name]):
        restore_dir(root, {**log_dir_files, name: damaged})
        manager = start_manager(root)
        try:
            log = manager.get_log("topic", 0)
            assert log is not None
            assert records_of(log) == template.records, kind
            check_log_indexes(log)
            cleaner = CleanerManager([root], MockClock(START_MS))
            assert all(offset <= log.log_end_offset for offset in cleaner.cleaner_offsets().values())
        finally:
            manager.shutdown()
        CASES[f"checkpoint {kind}"] += 1


def test_damaged_meta_properties_raises_only_typed_errors(log_dir_files: dict[str, bytes], shm_path: Path) -> None:
    root = shm_path / "dir"
    text = log_dir_files[file_names.META_PROPERTIES]
    rng = random.Random(19)
    damages: list[Callable[[bytes], bytes]] = [lambda data, p=p: _flip(data, p, rng) for p in sweep(len(text), 15, 1)]
    damages += [lambda data, n=n: data[:n] for n in sweep(len(text), 5, 2)]
    for damage in damages:
        restore_dir(root, {**log_dir_files, file_names.META_PROPERTIES: damage(text)})
        try:
            start_manager(root).shutdown()
        except RaybrokerError:
            CASES["typed error"] += 1
        CASES["meta.properties damage"] += 1


def _flip(data: bytes, position: int, rng: random.Random) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= 1 << rng.randrange(8)
    return bytes(damaged)


def test_zz_report_damage_cases() -> None:
    """Prints the number of damage cases run by this module (run with -s to see it)."""
    total = sum(count for kind, count in CASES.items() if kind != "typed error")
    print(f"\n{total} damage cases: {dict(sorted(CASES.items()))}")
    assert total > 0 or not CASES

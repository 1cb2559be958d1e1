"""Offline dump of the files of a Kafka log dir (Kafka's `DumpLogSegments`, behind `raybroker dump-log`).

Every file is opened read-only (`O_RDONLY`, a read-only mmap for indexes) and never written, so a dump is safe
on a live log dir or a read-only copy. The kind of a file comes from its name (rules in `storage/file_names.py`):

| kind                      | file names                                                    | one item per         |
|---------------------------|---------------------------------------------------------------|----------------------|
| `log`                     | `<20-digit base>.log` (also `.deleted`/`.cleaned`/`.swap`)    | batch (magic 0/1/2)  |
| `snapshot`                | `<20-digit end offset>-<10-digit epoch>.checkpoint`,          | batch (KRaft, v2)    |
|                           | `bootstrap.checkpoint`                                        |                      |
| `index`                   | `<base>.index`                                                | entry                |
| `timeindex`               | `<base>.timeindex`                                            | entry                |
| `txnindex`                | `<base>.txnindex`                                             | aborted transaction  |
| `producer-snapshot`       | `<offset>.snapshot`                                           | producer             |
| `offset-checkpoint`       | `recovery-point-offset-checkpoint`, `log-start-offset-`,     | `topic partition     |
|                           | `replication-offset-`, `cleaner-offset-checkpoint`            | offset` line         |
| `leader-epoch-checkpoint` | `leader-epoch-checkpoint`                                     | `epoch start` line   |
| `meta.properties`         | `meta.properties`                                             | the whole file       |
| `clean-shutdown`          | `.kafka_cleanshutdown`                                        | the whole file       |

A `.log`/`.index`/`.timeindex` name without the 20-digit base offset (a renamed copy) is still dumped; its
index offsets are then shown relative to base 0.

Text output mirrors kafka-dump-log (Kafka 3.x), one line per item after `Dumping <file>`::

    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1
      partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty
      position: 0 CreateTime: 1700000000000 size: 80 magic: 2 compresscodec: none crc: 123 isvalid: true
    | offset: 0 CreateTime: 1700000000000 keySize: 3 valueSize: 5 sequence: -1 headerKeys: [h] key: k payload: v
    offset: 7 position: 80 NoTimestampType: -1 size: 40 magic: 0 compresscodec: gzip crc: 9 isvalid: true
    offset: 7 position: 4120                      (.index)
    timestamp: 1700000000000 offset: 7            (.timeindex)
    version: 0 producerId: 3 firstOffset: 5 lastOffset: 9 lastStableOffset: 10            (.txnindex)
    producerId: 3 producerEpoch: 0 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong.empty
      lastTimestamp: 1700000000000 firstSequence: 0 lastSequence: 2 lastOffset: 7 offsetDelta: 2
      timestamp: 1700000000000                    (.snapshot; no `firstSequence ...` part for a producer
                                                   that has only markers left, which ends the line with a space)

(a batch is one line; it is wrapped above only to fit). Record lines (`|`) appear with `--deep-iteration` or
`--print-data-log`; key and payload (UTF-8 with undecodable bytes replaced, control characters shown as `\\xNN`
so a record stays on one line; omitted when null) only with `--print-data-log` and never for control batches,
whose records show `endTxnMarker: COMMIT coordinatorEpoch: N` or `controlType: SNAPSHOT_HEADER(3)`. Legacy
record lines carry no sequence, header keys or per-record CRC. Kafka's end-of-run reports (index/log
mismatches, non-consecutive offsets) are not produced.

JSON output (`json_rows`): one object per item, nothing else, so every line is a batch, an entry or an error:

- batch: `baseOffset lastOffset count position size magic compresscodec crc isvalid isTransactional isControl
  producerId producerEpoch baseSequence lastSequence partitionLeaderEpoch maxTimestamp timestampType
  deleteHorizonMs`; magic 0/1 entries use -1/false/null for the v2-only fields, `timestampType` is
  `NoTimestampType` for magic 0, `baseOffset`/`count` come from the inner records of a compressed wrapper.
  With `--print-data-log` also `records: [{offset, timestamp, key, value, headers: [{key, value}]}]` (key and
  values as lowercase hex or null, header keys as strings); with only `--deep-iteration`,
  `records: [{offset, timestamp, keySize, valueSize, sequence, headerKeys}]`.
- `.index` `{offset, position}`, `.timeindex` `{timestamp, offset}` (absolute offsets); `.txnindex`
  `{version, producerId, firstOffset, lastOffset, lastStableOffset}`; `.snapshot` `{producerId, producerEpoch,
  coordinatorEpoch, currentTxnFirstOffset, lastTimestamp}` (`currentTxnFirstOffset` null when no transaction is
  open) plus `{firstSequence, lastSequence, lastOffset, offsetDelta, timestamp}` for a producer with a data batch
  left; offset checkpoints
  `{topic, partition, offset}`; leader-epoch checkpoint `{epoch, startOffset}`; meta.properties one object of
  its keys; `.kafka_cleanshutdown` `{brokerEpoch}` (null for an empty or pre-3.7 marker).

Errors: whatever could be decoded is emitted first, then a `DumpError` item, rendered as `{"error", "position"}`
or `Found error at position N: <message>`, and `FileDump.failed` becomes true. A length field below the minimum,
an unknown magic or bad framing stops the dump there; a trailing partial batch (a truncated file) is reported at
the position where it starts; a trailing partial index entry at the first byte of the partial entry. A batch
whose CRC does not match is shown with `isvalid: false` and does not stop the dump (like Kafka); records that
cannot be decoded (deep iteration, or any compressed magic 0/1 wrapper, whose inner records give `baseOffset`)
report an error after the batch and the dump goes on with the next batch, whose framing is intact. A `.txnindex` entry
whose version byte is above 0 stops its dump with an error, as does a producer snapshot whose version, CRC or
length does not check (Kafka prints that error instead of the snapshot). Index
entries stop, without an error, at the first entry after slot 0 whose offset equals the base offset: the
zero-filled preallocated tail an unclean shutdown leaves (Kafka's rule).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from storage import file_names
from storage.errors import CorruptCheckpointError, KafkaStorageError, StorageError
from storage.files.checkpoint_file import EPOCH_ENTRY_FORMATTER, OFFSET_ENTRY_FORMATTER, CheckpointFile, EpochEntry
from storage.files.clean_shutdown import parse_clean_shutdown
from storage.files.meta_properties import MetaProperties, parse_properties
from storage.partition.producer_snapshot import SnapshotEntry, decode_snapshot
from storage.records.compression import CompressionType
from storage.records.file_records import AnyBatch, FileRecords
from storage.records.layout import CONTROL_KEY, END_TXN_MARKER_VALUE, NO_SEQUENCE, SEQUENCE_MODULUS, ControlRecordType
from storage.records.legacy_records import LegacyRecord
from storage.records.record import Record
from storage.records.record_batch import RecordBatch
from storage.segment.offset_index import OffsetIndex, OffsetPosition
from storage.segment.time_index import TimeIndex, TimestampOffset
from storage.segment.transaction_index import ENTRY_SIZE as TXN_ENTRY_SIZE
from storage.segment.transaction_index import AbortedTxn, read_entries

# meta.properties and the clean-shutdown marker are a few hundred bytes; a larger file is not one of them.
MAX_SMALL_FILE_BYTES = 1024 * 1024
# A producer snapshot holds 46 bytes per producer and a `.txnindex` 34 per aborted transaction in one segment:
# 256 MiB is ~5.8 million producers or ~7.9 million aborts, far past what a partition keeps.
MAX_SNAPSHOT_BYTES = MAX_TXN_INDEX_BYTES = 256 * 1024 * 1024
RECORD_INDENT = "|"
_CONTROL_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)}


class FileKind(enum.Enum):
    """The file kinds dump-log reads; the value is the `kind` of the JSON header row."""

    LOG = "log"
    KRAFT_SNAPSHOT = "snapshot"
    OFFSET_INDEX = "index"
    TIME_INDEX = "timeindex"
    TXN_INDEX = "txnindex"
    PRODUCER_SNAPSHOT = "producer-snapshot"
    OFFSET_CHECKPOINT = "offset-checkpoint"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    META_PROPERTIES = "meta.properties"
    CLEAN_SHUTDOWN = "clean-shutdown"


_SEGMENT_KINDS = {
    file_names.LOG_SUFFIX: FileKind.LOG,
    file_names.INDEX_SUFFIX: FileKind.OFFSET_INDEX,
    file_names.TIME_INDEX_SUFFIX: FileKind.TIME_INDEX,
    file_names.TXN_INDEX_SUFFIX: FileKind.TXN_INDEX,
}
_NAMED_KINDS = {
    file_names.RECOVERY_POINT_CHECKPOINT: FileKind.OFFSET_CHECKPOINT,
    file_names.LOG_START_OFFSET_CHECKPOINT: FileKind.OFFSET_CHECKPOINT,
    file_names.REPLICATION_OFFSET_CHECKPOINT: FileKind.OFFSET_CHECKPOINT,
    file_names.CLEANER_OFFSET_CHECKPOINT: FileKind.OFFSET_CHECKPOINT,
    file_names.LEADER_EPOCH_CHECKPOINT: FileKind.LEADER_EPOCH_CHECKPOINT,
    file_names.META_PROPERTIES: FileKind.META_PROPERTIES,
    file_names.CLEAN_SHUTDOWN_FILE: FileKind.CLEAN_SHUTDOWN,
}
SUPPORTED_FILES = (
    ".log, .index, .timeindex, .txnindex, producer .snapshot files, KRaft *.checkpoint snapshots, "
    "leader-epoch-checkpoint, meta.properties, .kafka_cleanshutdown and the offset checkpoints "
    "(recovery-point-offset-checkpoint, log-start-offset-checkpoint, replication-offset-checkpoint, "
    "cleaner-offset-checkpoint)"
)


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A file to dump: its kind and what its name says (segment base offset, KRaft snapshot id)."""

    path: Path
    kind: FileKind
    base_offset: int | None = None
    snapshot_id: tuple[int, int] | None = None  # (end offset, epoch)


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """`--print-data-log` shows keys and values and implies `--deep-iteration` (record lines), as in Kafka."""

    print_data_log: bool = False
    deep_iteration: bool = False

    @property
    def decode_records(self) -> bool:
        return self.print_data_log or self.deep_iteration


@dataclass(frozen=True, slots=True)
class DumpedBatch:
    """One batch of a `.log`/snapshot; `records` is set when they were decoded (deep iteration, legacy), `codec`
    is None for a codec id Kafka does not define."""

    batch: AnyBatch
    records: tuple[Record | LegacyRecord, ...] | None
    codec: CompressionType | None


@dataclass(frozen=True, slots=True)
class OffsetCheckpointEntry:
    """One `topic partition offset` line of a log-dir offset checkpoint."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class PropertiesDump:
    """The key/value pairs of a meta.properties file, in file order."""

    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class CleanShutdownDump:
    """The broker epoch a `.kafka_cleanshutdown` marker holds (None: empty, pre-3.7 or unreadable)."""

    broker_epoch: int | None


@dataclass(frozen=True, slots=True)
class DumpError:
    """Where and why a dump stopped or skipped data; `position` is a byte position in the file."""

    message: str
    position: int | None


DumpItem = (
    DumpedBatch
    | OffsetPosition
    | TimestampOffset
    | OffsetCheckpointEntry
    | EpochEntry
    | AbortedTxn
    | SnapshotEntry
    | PropertiesDump
    | CleanShutdownDump
    | DumpError
)


def classify(path: Path) -> FileInfo | None:
    """What kind of file `path` names, or None for a file dump-log cannot read (see `SUPPORTED_FILES`)."""
    path = Path(path)
    name = path.name
    if name.endswith(file_names.PRODUCER_SNAPSHOT_SUFFIX):
        return FileInfo(path, FileKind.PRODUCER_SNAPSHOT)
    segment = file_names.parse_segment_name(name)
    if segment is not None:
        base_offset, suffix, _ = segment
        kind = _SEGMENT_KINDS.get(suffix)
        return None if kind is None else FileInfo(path, kind, base_offset=base_offset)
    if name in _NAMED_KINDS:
        return FileInfo(path, _NAMED_KINDS[name])
    if name.endswith(file_names.KRAFT_SNAPSHOT_SUFFIX):
        return FileInfo(path, FileKind.KRAFT_SNAPSHOT, snapshot_id=file_names.parse_kraft_snapshot_name(name))
    for suffix, kind in _SEGMENT_KINDS.items():
        if name.endswith(suffix):
            return FileInfo(path, kind)
    return None


class FileDump:
    """The dump of one file, as items, JSON rows or text lines; `failed` is true once a `DumpError` was emitted.

    Iterate one of `items`, `json_rows`, `json_lines` or `text_lines` once; the file is read lazily.
    """

    def __init__(self, info: FileInfo, options: DumpOptions = DumpOptions()) -> None:
        self.info = info
        self.options = options
        self.failed = False

    def items(self) -> Iterator[DumpItem]:
        """The decoded items, then a `DumpError` if the file is damaged or unreadable."""
        try:
            for item in self._kind_items():
                if isinstance(item, DumpError):
                    self.failed = True
                yield item
        except StorageError as exc:
            self.failed = True
            yield _error(exc, None)

    def json_rows(self) -> Iterator[dict[str, object]]:
        """One row per item (see the module docstring)."""
        for item in self.items():
            yield _json_row(item, self.options)

    def json_lines(self) -> Iterator[str]:
        for row in self.json_rows():
            yield json.dumps(row)

    def text_lines(self) -> Iterator[str]:
        """kafka-dump-log's text: `Dumping <file>`, a header line for logs and snapshots, one line per item."""
        yield f"Dumping {self.info.path}"
        yield from self._header_lines()
        emitted = False
        for item in self.items():
            emitted = True
            yield from _text_lines(item, self.options)
        if not emitted and self.info.kind == FileKind.OFFSET_INDEX:
            yield f"{self.info.path} is empty."

    def _header_lines(self) -> Iterator[str]:
        info = self.info
        if info.kind == FileKind.LOG and info.base_offset is not None:
            yield f"Log starting offset: {info.base_offset}"
        elif info.kind == FileKind.KRAFT_SNAPSHOT:
            if info.path.name == file_names.BOOTSTRAP_CHECKPOINT:
                yield "KRaft bootstrap snapshot"
            elif info.snapshot_id is not None:
                yield f"Snapshot end offset: {info.snapshot_id[0]}, epoch: {info.snapshot_id[1]}"

    def _kind_items(self) -> Iterator[DumpItem]:
        kind = self.info.kind
        path = self.info.path
        if kind in (FileKind.LOG, FileKind.KRAFT_SNAPSHOT):
            yield from _log_items(path, self.options)
        elif kind == FileKind.OFFSET_INDEX:
            yield from _index_items(OffsetIndex(path, self.info.base_offset or 0, writable=False))
        elif kind == FileKind.TIME_INDEX:
            yield from _index_items(TimeIndex(path, self.info.base_offset or 0, writable=False))
        elif kind == FileKind.TXN_INDEX:
            yield from _txn_index_items(path)
        elif kind == FileKind.PRODUCER_SNAPSHOT:
            yield from decode_snapshot(_read_file(path, MAX_SNAPSHOT_BYTES), path)
        elif kind == FileKind.OFFSET_CHECKPOINT:
            for (topic, partition), offset in CheckpointFile(path, OFFSET_ENTRY_FORMATTER, read_only=True).read():
                yield OffsetCheckpointEntry(topic, partition, offset)
        elif kind == FileKind.LEADER_EPOCH_CHECKPOINT:
            yield from CheckpointFile(path, EPOCH_ENTRY_FORMATTER, read_only=True).read()
        elif kind == FileKind.META_PROPERTIES:
            yield from _meta_properties_items(path)
        else:
            yield CleanShutdownDump(parse_clean_shutdown(_read_small_file(path)))


# --- reading -----------------------------------------------------------------------------------------


def _error(exc: StorageError, fallback_position: int | None) -> DumpError:
    message = exc.message if exc.offset is None else f"{exc.message} (offset {exc.offset})"
    return DumpError(message, exc.position if exc.position is not None else fallback_position)


def _log_items(path: Path, options: DumpOptions) -> Iterator[DumpItem]:
    records_file = FileRecords(path, read_only=True)
    end = 0
    try:
        try:
            for batch in records_file.batches():
                yield from _batch_items(batch, options)
                end = batch.position + batch.size_in_bytes
        except StorageError as exc:
            yield _error(exc, end)
            return
        if end < records_file.size:
            yield DumpError(
                f"file is truncated: the last {records_file.size - end} bytes are a partial batch", position=end
            )
    finally:
        records_file.close_handlers()


def _batch_items(batch: AnyBatch, options: DumpOptions) -> Iterator[DumpItem]:
    try:
        codec: CompressionType | None = batch.compression
    except StorageError as exc:
        yield DumpedBatch(batch, None, None)
        yield _error(exc, batch.position)
        return
    problem: StorageError | None = None
    records: tuple[Record | LegacyRecord, ...] | None = None
    # A magic 0/1 compressed wrapper only knows its last offset; its base offset and count need the inner records.
    if options.decode_records or not isinstance(batch, RecordBatch):
        try:
            records = tuple(batch.records())
        except StorageError as exc:
            problem = exc
    yield DumpedBatch(batch, records, codec)
    if problem is not None:
        yield _error(problem, batch.position)


def _index_items(index: OffsetIndex | TimeIndex) -> Iterator[DumpItem]:
    try:
        for slot in range(index.entries):
            entry = index.entry(slot)
            if slot > 0 and entry.offset == index.base_offset:
                break
            yield entry
        partial = index.length_bytes % index.ENTRY_SIZE
        if partial:
            yield DumpError(
                f"index is truncated: the last {partial} bytes are a partial {index.ENTRY_SIZE}-byte entry",
                position=index.length_bytes - partial,
            )
    finally:
        index.close()


def _txn_index_items(path: Path) -> Iterator[DumpItem]:
    data = _read_file(path, MAX_TXN_INDEX_BYTES)
    whole = len(data) - len(data) % TXN_ENTRY_SIZE
    for position in range(0, whole, TXN_ENTRY_SIZE):
        try:
            (entry,) = read_entries(data[position : position + TXN_ENTRY_SIZE])
        except StorageError as exc:
            yield DumpError(exc.message, position)
            return
        yield entry
    if whole < len(data):
        yield DumpError(
            f"index is truncated: the last {len(data) - whole} bytes are a partial {TXN_ENTRY_SIZE}-byte entry",
            position=whole,
        )


def _read_file(path: Path, max_bytes: int) -> bytes:
    try:
        with open(path, "rb") as stream:
            data = stream.read(max_bytes + 1)
    except OSError as exc:
        raise KafkaStorageError(f"cannot read file: {exc.strerror or exc}", path=path) from exc
    if len(data) > max_bytes:
        raise CorruptCheckpointError(
            f"file is larger than {max_bytes} bytes, too large for its kind", path=path, position=0
        )
    return data


def _read_small_file(path: Path) -> bytes:
    return _read_file(path, MAX_SMALL_FILE_BYTES)


def _meta_properties_items(path: Path) -> Iterator[DumpItem]:
    data = _read_small_file(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield DumpError("meta.properties is not UTF-8", exc.start)
        return
    properties = parse_properties(text, path=path)
    yield PropertiesDump(properties)
    MetaProperties.from_properties(properties)


# --- rendering ---------------------------------------------------------------------------------------


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _record_sequence(batch: AnyBatch, record: Record | LegacyRecord) -> int:
    if not isinstance(batch, RecordBatch) or batch.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (batch.base_sequence + record.offset - batch.base_offset) % SEQUENCE_MODULUS


def batch_fields(item: DumpedBatch) -> dict[str, object]:
    """The batch-level fields of a dumped batch, v2 and legacy alike (the JSON row without `records`)."""
    batch = item.batch
    if isinstance(batch, RecordBatch):
        base_offset: int | None = batch.base_offset
        count: int | None = batch.records_count
        timestamp_type = batch.timestamp_type.kafka_name
        v2_fields: tuple[object, ...] = (
            batch.is_transactional,
            batch.is_control,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.last_sequence,
            batch.partition_leader_epoch,
        )
        delete_horizon_ms = batch.delete_horizon_ms
    else:
        base_offset = item.records[0].offset if item.records else None
        count = None if item.records is None else len(item.records)
        timestamp_type = batch.timestamp_type_name
        v2_fields = (False, False, -1, -1, NO_SEQUENCE, NO_SEQUENCE, -1)
        delete_horizon_ms = None
    (is_transactional, is_control, producer_id, producer_epoch, base_sequence, last_sequence, leader_epoch) = v2_fields
    return {
        "baseOffset": base_offset,
        "lastOffset": batch.last_offset,
        "count": count,
        "position": batch.position,
        "size": batch.size_in_bytes,
        "magic": batch.magic,
        "compresscodec": "unknown" if item.codec is None else item.codec.kafka_name,
        "crc": batch.crc,
        "isvalid": batch.is_valid(),
        "isTransactional": is_transactional,
        "isControl": is_control,
        "producerId": producer_id,
        "producerEpoch": producer_epoch,
        "baseSequence": base_sequence,
        "lastSequence": last_sequence,
        "partitionLeaderEpoch": leader_epoch,
        "maxTimestamp": batch.max_timestamp,
        "timestampType": timestamp_type,
        "deleteHorizonMs": delete_horizon_ms,
    }


def _record_row(batch: AnyBatch, record: Record | LegacyRecord, options: DumpOptions) -> dict[str, object]:
    if options.print_data_log:
        return {
            "offset": record.offset,
            "timestamp": record.timestamp,
            "key": _hex(record.key),
            "value": _hex(record.value),
            "headers": [{"key": key, "value": _hex(value)} for key, value in record.headers],
        }
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "keySize": _size(record.key),
        "valueSize": _size(record.value),
        "sequence": _record_sequence(batch, record),
        "headerKeys": [key for key, _ in record.headers],
    }


def _json_row(item: DumpItem, options: DumpOptions) -> dict[str, object]:
    if isinstance(item, DumpedBatch):
        row = batch_fields(item)
        if options.decode_records and item.records is not None:
            row["records"] = [_record_row(item.batch, record, options) for record in item.records]
        return row
    if isinstance(item, OffsetPosition):
        return {"offset": item.offset, "position": item.position}
    if isinstance(item, TimestampOffset):
        return {"timestamp": item.timestamp, "offset": item.offset}
    if isinstance(item, OffsetCheckpointEntry):
        return {"topic": item.topic, "partition": item.partition, "offset": item.offset}
    if isinstance(item, EpochEntry):
        return {"epoch": item.epoch, "startOffset": item.start_offset}
    if isinstance(item, AbortedTxn):
        return {
            "version": item.version,
            "producerId": item.producer_id,
            "firstOffset": item.first_offset,
            "lastOffset": item.last_offset,
            "lastStableOffset": item.last_stable_offset,
        }
    if isinstance(item, SnapshotEntry):
        return _snapshot_row(item)
    if isinstance(item, PropertiesDump):
        return dict(item.properties)
    if isinstance(item, CleanShutdownDump):
        return {"brokerEpoch": item.broker_epoch}
    return {"error": item.message, "position": item.position}


def _batch_line(item: DumpedBatch) -> str:
    fields = batch_fields(item)
    if isinstance(item.batch, RecordBatch):
        horizon = fields["deleteHorizonMs"]
        head = (
            f"baseOffset: {fields['baseOffset']} lastOffset: {fields['lastOffset']} count: {fields['count']} "
            f"baseSequence: {fields['baseSequence']} lastSequence: {fields['lastSequence']} "
            f"producerId: {fields['producerId']} producerEpoch: {fields['producerEpoch']} "
            f"partitionLeaderEpoch: {fields['partitionLeaderEpoch']} "
            f"isTransactional: {_java_bool(bool(fields['isTransactional']))} "
            f"isControl: {_java_bool(bool(fields['isControl']))} "
            f"deleteHorizonMs: {'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'}"
        )
    else:
        head = f"offset: {fields['lastOffset']}"
    return (
        f"{head} position: {fields['position']} {fields['timestampType']}: {fields['maxTimestamp']} "
        f"size: {fields['size']} magic: {fields['magic']} compresscodec: {fields['compresscodec']} "
        f"crc: {fields['crc']} isvalid: {_java_bool(bool(fields['isvalid']))}"
    )


def _snapshot_row(entry: SnapshotEntry) -> dict[str, object]:
    row: dict[str, object] = {
        "producerId": entry.producer_id,
        "producerEpoch": entry.epoch,
        "coordinatorEpoch": entry.coordinator_epoch,
        "currentTxnFirstOffset": entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else None,
        "lastTimestamp": entry.timestamp,
    }
    if entry.last_offset >= 0:
        row.update(
            firstSequence=(entry.last_sequence - entry.offset_delta) % SEQUENCE_MODULUS,
            lastSequence=entry.last_sequence,
            lastOffset=entry.last_offset,
            offsetDelta=entry.offset_delta,
            timestamp=entry.timestamp,
        )
    return row


def _snapshot_line(entry: SnapshotEntry) -> str:
    """Kafka's `dumpProducerIdSnapshot` line: Java's `OptionalLong` text, and the first (only) batch if any."""
    txn = entry.current_txn_first_offset
    line = (
        f"producerId: {entry.producer_id} producerEpoch: {entry.epoch} coordinatorEpoch: {entry.coordinator_epoch} "
        f"currentTxnFirstOffset: {f'OptionalLong[{txn}]' if txn >= 0 else 'OptionalLong.empty'} "
        f"lastTimestamp: {entry.timestamp} "
    )
    if entry.last_offset >= 0:
        first_sequence = (entry.last_sequence - entry.offset_delta) % SEQUENCE_MODULUS
        line += (
            f"firstSequence: {first_sequence} lastSequence: {entry.last_sequence} lastOffset: {entry.last_offset} "
            f"offsetDelta: {entry.offset_delta} timestamp: {entry.timestamp}"
        )
    return line


def _control_text(record: Record | LegacyRecord) -> str:
    key = record.key or b""
    if len(key) < CONTROL_KEY.size:
        return f" controlType: {ControlRecordType.UNKNOWN.name}({ControlRecordType.UNKNOWN.value})"
    _, type_id = CONTROL_KEY.unpack_from(key)
    control_type = ControlRecordType.from_key(key)
    value = record.value or b""
    if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT) and len(value) >= END_TXN_MARKER_VALUE.size:
        _, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(value)
        return f" endTxnMarker: {control_type.name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {control_type.name}({type_id})"


def _text(data: bytes) -> str:
    # Kafka's default StringDecoder (UTF-8, malformed input replaced by U+FFFD), but with control characters escaped
    # so that a binary key or payload (every __consumer_offsets record) cannot break the one-line-per-record layout.
    return data.decode("utf-8", errors="replace").translate(_CONTROL_ESCAPES)


def _record_line(item: DumpedBatch, record: Record | LegacyRecord, options: DumpOptions) -> str:
    batch = item.batch
    timestamp_type = batch.timestamp_type.kafka_name if isinstance(batch, RecordBatch) else batch.timestamp_type_name
    line = (
        f"{RECORD_INDENT} offset: {record.offset} {timestamp_type}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)}"
    )
    is_control = isinstance(batch, RecordBatch) and batch.is_control
    if isinstance(batch, RecordBatch):
        header_keys = ",".join(key for key, _ in record.headers)
        line += f" sequence: {_record_sequence(batch, record)} headerKeys: [{header_keys}]"
        if is_control:
            line += _control_text(record)
    if options.print_data_log and not is_control:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _text_lines(item: DumpItem, options: DumpOptions) -> Iterator[str]:
    if isinstance(item, DumpedBatch):
        yield _batch_line(item)
        if options.decode_records and item.records is not None:
            for record in item.records:
                yield _record_line(item, record, options)
    elif isinstance(item, OffsetPosition):
        yield f"offset: {item.offset} position: {item.position}"
    elif isinstance(item, TimestampOffset):
        yield f"timestamp: {item.timestamp} offset: {item.offset}"
    elif isinstance(item, OffsetCheckpointEntry):
        yield f"topic: {item.topic} partition: {item.partition} offset: {item.offset}"
    elif isinstance(item, EpochEntry):
        yield f"epoch: {item.epoch} startOffset: {item.start_offset}"
    elif isinstance(item, AbortedTxn):
        yield (
            f"version: {item.version} producerId: {item.producer_id} firstOffset: {item.first_offset} "
            f"lastOffset: {item.last_offset} lastStableOffset: {item.last_stable_offset}"
        )
    elif isinstance(item, SnapshotEntry):
        yield _snapshot_line(item)
    elif isinstance(item, PropertiesDump):
        for key, value in item.properties.items():
            yield f"{key}={value}"
    elif isinstance(item, CleanShutdownDump):
        epoch = "unknown (empty or pre-3.7 marker)" if item.broker_epoch is None else item.broker_epoch
        yield f"clean shutdown marker, brokerEpoch: {epoch}"
    elif item.position is None:
        yield f"Found error: {item.message}"
    else:
        yield f"Found error at position {item.position}: {item.message}"

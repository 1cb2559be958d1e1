"""Every file-name rule of a Kafka log dir, and the parsers back (Kafka's `LogFileUtils`).

Layout of one log dir (one entry of `log.dirs`)::

    meta.properties                      broker/cluster identity (Java properties)
    .lock                                OS file lock held while a broker owns the dir
    .kafka_cleanshutdown                 present only after a clean shutdown
    recovery-point-offset-checkpoint     text checkpoints: version, count, "topic partition offset" lines
    log-start-offset-checkpoint
    replication-offset-checkpoint
    cleaner-offset-checkpoint
    <topic>-<partition>/                 one folder per partition log
        00000000000000000000.log         record batches; name = base offset, 20 digits zero-padded
        00000000000000000000.index       offset index (8-byte entries)
        00000000000000000000.timeindex   time index (12-byte entries)
        00000000000000000000.txnindex    aborted transactions (34-byte entries)
        <offset>.snapshot                producer-state snapshot
        leader-epoch-checkpoint, partition.metadata
        high-watermark.state             raybroker's: the offsets published to same-node readers (one page)
    <topic>-<partition>.<32 hex>-delete/ a deleted partition's folder, removed after file.delete.delay.ms
    <topic>-<partition>.<32 hex>-stray/  a partition whose topic was deleted while the broker was down, likewise

Suffixes appended after a normal name mark files in flight: `.deleted` (waiting for the async unlink),
`.cleaned` (a compaction result not yet swapped in), `.swap` (a swap in progress); checkpoint and
properties files are rewritten through `<name>.tmp`. No other module builds a file name.
"""

from __future__ import annotations

import re
from pathlib import Path

from storage.arguments import is_int
from storage.errors import InvalidTopicError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TMP_SUFFIX = ".tmp"

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
IN_FLIGHT_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)

META_PROPERTIES = "meta.properties"
LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
HIGH_WATERMARK_FILE = "high-watermark.state"

OFFSET_DIGITS = 20
MAX_TOPIC_LENGTH = 249
MAX_PARTITION = 2**31 - 1
MAX_FILE_NAME_LENGTH = 255
# Patterns are applied with `fullmatch` (`$` would also accept a trailing newline) and spell digits as [0-9]
# (`\d` would also accept non-ASCII digits, which Kafka's names never contain).
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_SEGMENT_NAME = re.compile(r"([0-9]{20})(\.[a-z]+)((?:\.deleted|\.cleaned|\.swap)?)")


def offset_name(offset: int) -> str:
    """The 20-digit zero-padded form of an offset, as in `00000000000000368769`."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def log_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """`<dir>/<base>.log[suffix]`."""
    return directory / f"{offset_name(base_offset)}{LOG_SUFFIX}{suffix}"


def partition_metadata_file(partition_dir: Path) -> Path:
    """`<topic>-<partition>/partition.metadata`: the partition's topic id (`storage.files.partition_metadata`)."""
    return partition_dir / PARTITION_METADATA


def high_watermark_file(partition_dir: Path) -> Path:
    """`<topic>-<partition>/high-watermark.state`."""
    return partition_dir / HIGH_WATERMARK_FILE


def index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """`<dir>/<base>.index[suffix]`."""
    return directory / f"{offset_name(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """`<dir>/<base>.timeindex[suffix]`."""
    return directory / f"{offset_name(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """`<dir>/<base>.txnindex[suffix]`."""
    return directory / f"{offset_name(base_offset)}{TXN_INDEX_SUFFIX}{suffix}"


def producer_snapshot_file(directory: Path, offset: int) -> Path:
    """`<dir>/<offset>.snapshot`."""
    return directory / f"{offset_name(offset)}{PRODUCER_SNAPSHOT_SUFFIX}"


def segment_files(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, ...]:
    """The .log, .index, .timeindex and .txnindex files of one segment, with an optional in-flight suffix."""
    name = offset_name(base_offset)
    return tuple(directory / f"{name}{kind}{suffix}" for kind in SEGMENT_SUFFIXES)


def parse_segment_name(name: str) -> tuple[int, str, str] | None:
    """`00000000000000000042.log.swap` -> (42, ".log", ".swap"); None for names that are not segment files."""
    match = _SEGMENT_NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2), match.group(3)


def segment_suffix(name: str) -> str | None:
    """`00000000000000000042.log.swap` -> ".log"; None for names that are not segment files."""
    parsed = parse_segment_name(name)
    return None if parsed is None else parsed[1]


def with_suffix(path: Path, suffix: str) -> Path:
    """`path` with an in-flight suffix appended (`x.log` -> `x.log.deleted`)."""
    return path.with_name(path.name + suffix)


def without_suffix(path: Path, suffix: str) -> Path:
    """`path` with a trailing in-flight suffix removed (`x.log.swap` -> `x.log`)."""
    if not path.name.endswith(suffix):
        raise ValueError(f"{path} does not end with {suffix}")
    return path.with_name(path.name[: -len(suffix)])


def tmp_file(path: Path) -> Path:
    """The temporary name a checkpoint or properties file is written under before its atomic rename."""
    return with_suffix(path, TMP_SUFFIX)


def validate_topic(topic: str) -> str:
    """Kafka's topic-name rules: `[a-zA-Z0-9._-]`, 1..249 chars, not `.` or `..`. Returns the name."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"invalid topic name {topic!r}: must be a non-empty string")
    if topic in (".", ".."):
        raise InvalidTopicError(f"invalid topic name {topic!r}: '.' and '..' are not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(f"invalid topic name: {len(topic)} chars, the limit is {MAX_TOPIC_LENGTH}")
    if not _TOPIC_CHARS.fullmatch(topic):
        raise InvalidTopicError(f"invalid topic name {topic!r}: only [a-zA-Z0-9._-] are allowed")
    return topic


def partition_dir_name(topic: str, partition: int) -> str:
    """`<topic>-<partition>`, the folder of one partition log."""
    validate_topic(topic)
    # Kafka's partition ids are int32: a larger one could not be written to the offset checkpoints.
    if not is_int(partition) or not 0 <= partition <= MAX_PARTITION:
        raise InvalidTopicError(f"invalid partition {partition!r}: must be an int in 0..{MAX_PARTITION}")
    name = f"{topic}-{partition}"
    # A 249-char topic leaves room for 5 partition digits only: a longer name would fail mkdir (ENAMETOOLONG),
    # an I/O error that takes the log dir offline, so it is refused here as a bad name.
    if len(name) > MAX_FILE_NAME_LENGTH:
        raise InvalidTopicError(f"partition folder name {name[:20]}...-{partition} is longer than 255 chars")
    return name


DELETE_DIR_SUFFIX = "-delete"
_DELETE_DIR = re.compile(r"(.+)-([0-9]+)\.([0-9a-f]{32})-delete")
STRAY_DIR_SUFFIX = "-stray"
_STRAY_DIR = re.compile(r"(.+)-([0-9]+)\.([0-9a-f]{32})-stray")


def _renamed_dir_name(topic: str, partition: int, unique_hex: str, suffix: str) -> str:
    """`<topic>-<partition>.<32-hex><suffix>`; Kafka truncates the topic so the whole name fits in 255 characters."""
    tail = f"-{partition}.{unique_hex}{suffix}"
    return topic[: MAX_FILE_NAME_LENGTH - len(tail)] + tail


def delete_dir_name(topic: str, partition: int, unique_hex: str) -> str:
    """`<topic>-<partition>.<32-hex>-delete`: a partition folder waiting for asynchronous deletion."""
    return _renamed_dir_name(topic, partition, unique_hex, DELETE_DIR_SUFFIX)


def is_delete_dir_name(name: str) -> bool:
    """Whether `name` is a partition folder renamed for asynchronous deletion."""
    return _DELETE_DIR.fullmatch(name) is not None


def stray_dir_name(topic: str, partition: int, unique_hex: str) -> str:
    """`<topic>-<partition>.<32-hex>-stray`: the folder of a partition whose topic the cluster no longer has
    (deleted while this broker was down), moved aside at startup instead of loaded (Kafka's stray logs)."""
    return _renamed_dir_name(topic, partition, unique_hex, STRAY_DIR_SUFFIX)


def parse_stray_dir_name(name: str) -> tuple[str, int] | None:
    """`my-topic-3.<32-hex>-stray` -> ("my-topic", 3) (the topic as truncated in the name); None otherwise."""
    match = _STRAY_DIR.fullmatch(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


FUTURE_DIR_SUFFIX = "-future"
_FUTURE_DIR = re.compile(r"(.+)-([0-9]+)\.([0-9a-f]{32})-future")


def future_dir_name(topic: str, partition: int, unique_hex: str) -> str:
    """`<topic>-<partition>.<32-hex>-future` (Kafka's `UnifiedLog.logFutureDirName`): the copy of a partition's log
    being filled in another log dir of the same broker, which replaces the log once it has caught up. Unlike the
    `-delete` name the topic is never truncated (the copy must name its partition): a name over 255 characters is
    refused with `InvalidTopicError`, as Kafka's AlterReplicaLogDirs refuses it."""
    name = f"{partition_dir_name(topic, partition)}.{unique_hex}{FUTURE_DIR_SUFFIX}"
    if len(name) > MAX_FILE_NAME_LENGTH:
        raise InvalidTopicError(f"the topic name is too long: {name[:20]}... has more than 255 chars")
    return name


def future_dir_name_too_long(topic: str, partition: int) -> bool:
    """Whether `future_dir_name` of this partition would pass 255 characters (Kafka's AlterReplicaLogDirs check, made
    before any other: the name's characters are not judged here)."""
    return len(f"{topic}-{partition}.{'0' * 32}{FUTURE_DIR_SUFFIX}") > MAX_FILE_NAME_LENGTH


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    """`my-topic-3.<32-hex>-future` -> ("my-topic", 3); None otherwise."""
    match = _FUTURE_DIR.fullmatch(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """`my-topic-3` -> ("my-topic", 3) (the topic may contain `-`: split at the last one); None otherwise.

    Names of partitions being deleted (`...-delete`), moved (`...-future`) or stray (`...-stray`) are not
    live partitions and give None.
    """
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isascii() or not partition.isdigit():
        return None
    if not _TOPIC_CHARS.fullmatch(topic) or topic in (".", "..") or len(topic) > MAX_TOPIC_LENGTH:
        return None
    return topic, int(partition)


# KRaft metadata snapshots (`__cluster_metadata-0/<end offset>-<epoch>.checkpoint`) and the bootstrap snapshot
# (`bootstrap.checkpoint` in the metadata log dir) are v2 batch sequences, like `.log` files.
KRAFT_SNAPSHOT_SUFFIX = ".checkpoint"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
_KRAFT_SNAPSHOT_NAME = re.compile(r"([0-9]{20})-([0-9]{10})\.checkpoint")


def parse_kraft_snapshot_name(name: str) -> tuple[int, int] | None:
    """`00000000000000007364-0000000001.checkpoint` -> (7364, 1): the snapshot's end offset and epoch; else None."""
    match = _KRAFT_SNAPSHOT_NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))

"""`partition.metadata`: the id of the topic a partition folder belongs to (Kafka's `PartitionMetadataFile`, KIP-516).

Grammar (UTF-8 text, exactly as Kafka writes it: two lines, the second without a line end)::

    version: 0
    topic_id: <the topic id, 22 characters of unpadded base64url>

e.g. `version: 0\\ntopic_id: nigi0dJNRASJVYh5eRn0Vg` (`storage.kafka_uuid` spells ids).

Reading follows Kafka's `PartitionMetadataReadBuffer`: the first two lines (ended by `\\n`, `\\r` or `\\r\\n`, as
Java's `readLine`) are each split at the first `:` followed by blanks into a key and a value, and only the values
are checked: the version an int of at least 0 (a newer version reads, so a downgrade keeps its folders), the topic
id a Kafka Uuid other than the zero id. Anything else raises `CorruptCheckpointError` with the path; lines after
the second are ignored.

Why: a topic deleted while a broker was down and created again under the same name has a new id, so a folder is
known for the old topic's by its id rather than by its name. `record_topic_id` writes the file of a new partition and
refuses (`InconsistentTopicIdError`, Kafka's INCONSISTENT_TOPIC_ID) a folder whose file names another id.

Crash behaviour: written through `storage.file_io.write_atomically` (`partition.metadata.tmp`, fsync, atomic
rename, directory fsync), so a crash leaves the whole file or none; a missing file reads as None and is written
again by the next `record_topic_id`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from storage.errors import CorruptCheckpointError, InconsistentTopicIdError
from storage.file_io import read_if_exists, write_atomically
from storage.file_names import partition_metadata_file
from storage.kafka_uuid import ZERO_UUID, parse_uuid, uuid_text

CURRENT_VERSION = 0
# Kafka splits each line with the regex `:\s+`; Java's `\s` is ASCII whitespace only.
_KEY_VALUE = re.compile(r":[ \t\n\x0b\f\r]+")
_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The file's content: its format version and the topic id."""

    version: int
    topic_id: uuid.UUID

    def encode(self) -> bytes:
        """The file's bytes, as Kafka's `PartitionMetadata.encode` writes them."""
        return f"version: {self.version}\ntopic_id: {uuid_text(self.topic_id)}".encode()


def parse_partition_metadata(text: str, path: Path | str = "partition.metadata") -> PartitionMetadata:
    """The content of a `partition.metadata` file (see the module docstring); `CorruptCheckpointError` naming
    `path` for text that breaks the grammar."""
    lines = _LINE_END.split(text, maxsplit=2)
    if len(lines) < 2:
        raise CorruptCheckpointError("partition.metadata holds fewer than two lines", path=path)
    version_text, topic_id_text = (_value(line, path) for line in lines[:2])
    if not re.fullmatch(r"[+-]?[0-9]+", version_text) or int(version_text) < CURRENT_VERSION:
        raise CorruptCheckpointError(f"unrecognized partition.metadata version {version_text!r}", path=path)
    try:
        topic_id = parse_uuid(topic_id_text)
    except ValueError as exc:
        raise CorruptCheckpointError(f"malformed topic id in partition.metadata: {exc}", path=path) from None
    if topic_id == ZERO_UUID:
        raise CorruptCheckpointError("invalid topic id in partition.metadata: the zero id", path=path)
    return PartitionMetadata(int(version_text), topic_id)


def _value(line: str, path: Path | str) -> str:
    parts = _KEY_VALUE.split(line)
    if len(parts) != 2:
        raise CorruptCheckpointError(f"malformed line in partition.metadata: {line!r}", path=path)
    return parts[1]


def read_partition_metadata(partition_dir: Path) -> PartitionMetadata | None:
    """The partition folder's `partition.metadata`, or None when it has none; `CorruptCheckpointError` for a file
    that breaks the grammar, `KafkaStorageError` when it cannot be read."""
    path = partition_metadata_file(partition_dir)
    raw = read_if_exists(path, path.name)
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"partition.metadata is not UTF-8: {exc}", path=path) from None
    return parse_partition_metadata(text, path)


def write_partition_metadata(partition_dir: Path, topic_id: uuid.UUID) -> None:
    """Writes (or replaces) the folder's `partition.metadata` naming `topic_id`, durably."""
    if topic_id == ZERO_UUID:
        raise InconsistentTopicIdError("a partition's topic id cannot be the zero id", path=partition_dir)
    write_atomically(partition_metadata_file(partition_dir), PartitionMetadata(CURRENT_VERSION, topic_id).encode())


def record_topic_id(partition_dir: Path, topic_id: uuid.UUID) -> None:
    """Makes the folder's `partition.metadata` name `topic_id`: written when missing, left alone when it already
    does; `InconsistentTopicIdError` when it names another id (the folder is another topic's)."""
    found = read_partition_metadata(partition_dir)
    if found is None:
        write_partition_metadata(partition_dir, topic_id)
    elif found.topic_id != topic_id:
        raise InconsistentTopicIdError(
            f"{partition_dir.name} belongs to topic id {uuid_text(found.topic_id)}, not {uuid_text(topic_id)}",
            path=partition_dir,
        )

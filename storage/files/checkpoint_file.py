"""Kafka's text checkpoint files (`CheckpointFile`, `OffsetCheckpointFile`, `LeaderEpochCheckpointFile`).

Grammar (UTF-8 text, every line ended by `\\n` when written)::

    <version>            int32, decimal; 0 for every file below
    <count>              int32, decimal; N >= 0
    <entry line> * N     fields separated by one space when written

| file (names in `storage/file_names.py`) | where         | entry line               | Python entry                   |
|-----------------------------------------|---------------|--------------------------|--------------------------------|
| recovery-point-offset-checkpoint        | log dir       | `topic partition offset` | `{(topic, partition): offset}` |
| log-start-offset-checkpoint             | log dir       | `topic partition offset` | same                           |
| replication-offset-checkpoint           | log dir       | `topic partition offset` | same                           |
| cleaner-offset-checkpoint               | log dir       | `topic partition offset` | same                           |
| leader-epoch-checkpoint                 | partition dir | `epoch startOffset`      | `[EpochEntry(epoch, start)]`   |

partition and epoch are int32, offsets int64; topic is any run of non-whitespace characters.

Reading follows Kafka's `CheckpointReadBuffer`: lines end at `\\n`, `\\r` or `\\r\\n` (Java's `readLine`), an entry
line is split on runs of ASCII whitespace with trailing empty fields dropped (Java's `split("\\\\s+")`, so a
leading blank makes the line malformed). An empty file, or one holding only the version line, reads as no
entries. A version other than the expected one, a non-integer version/count, a malformed entry line, or a count
that differs from the number of entry lines raises `CorruptCheckpointError` carrying the path and the byte
position of the offending line. Entries keep the file's order, so a file Kafka wrote reads and rewrites to the
same bytes.

Crash behaviour: `write` replaces the file through `storage.file_io.write_atomically` (`<name>.tmp`, fsync,
atomic rename, directory fsync), so a crash leaves either the old or the new file, never a mix; a stale `.tmp`
is never read and is overwritten by the next write. The file is created empty when a writable `CheckpointFile`
is opened on a missing path (Kafka does the same), and a missing file reads as no entries. Such a 0-byte file is
what a broker leaves for a checkpoint it never wrote (e.g. the cleaner-offset-checkpoint of a broker that never
compacted); it rewrites as `0\\n0\\n`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Generic, NamedTuple, Protocol, TypeVar

from storage.arguments import is_int
from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_io import read_if_exists, write_atomically

T = TypeVar("T")

CHECKPOINT_VERSION = 0
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Java's Integer.parseInt / Long.parseLong accept an optional sign and decimal digits, nothing else.
_JAVA_INT = re.compile(r"^[+-]?[0-9]+$")
# Java's `\s`: space, tab, newline, vertical tab, form feed, carriage return.
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_LINE_END = re.compile(r"\r\n|\r|\n")


class EntryFormatter(Protocol[T]):
    """Converts one checkpoint entry to its line and back (Kafka's `EntryFormatter`)."""

    def to_line(self, entry: T) -> str:
        """The entry's line without its newline; raises `ValueError` for an entry the format cannot hold."""
        ...

    def from_line(self, line: str) -> T | None:
        """The entry a line holds, or None when the line is malformed."""
        ...


class EpochEntry(NamedTuple):
    """One line of a leader-epoch-checkpoint: the first offset written under a leader epoch."""

    epoch: int
    start_offset: int


TopicPartitionOffset = tuple[tuple[str, int], int]


def _parse_java_int(text: str, low: int, high: int) -> int | None:
    if not _JAVA_INT.match(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def _java_split(line: str) -> list[str]:
    fields = _JAVA_WHITESPACE.split(line)
    while fields and not fields[-1]:
        fields.pop()
    return fields


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if not is_int(value) or not low <= value <= high:
        raise ValueError(f"{name} {value!r} is not an integer in [{low}, {high}]")
    return value


class OffsetEntryFormatter:
    """`topic partition offset` lines of the four log-dir offset checkpoints."""

    def to_line(self, entry: TopicPartitionOffset) -> str:
        (topic, partition), offset = entry
        if not isinstance(topic, str) or not topic or _JAVA_WHITESPACE.search(topic):
            raise ValueError(f"topic {topic!r} is empty or holds whitespace, which the line format cannot carry")
        _check_int("partition", partition, INT32_MIN, INT32_MAX)
        _check_int("offset", offset, INT64_MIN, INT64_MAX)
        return f"{topic} {partition} {offset}"

    def from_line(self, line: str) -> TopicPartitionOffset | None:
        fields = _java_split(line)
        if len(fields) != 3 or not fields[0]:
            return None
        partition = _parse_java_int(fields[1], INT32_MIN, INT32_MAX)
        offset = _parse_java_int(fields[2], INT64_MIN, INT64_MAX)
        if partition is None or offset is None:
            return None
        return (fields[0], partition), offset


class EpochEntryFormatter:
    """`epoch startOffset` lines of a partition's leader-epoch-checkpoint."""

    def to_line(self, entry: EpochEntry) -> str:
        epoch, start_offset = entry
        _check_int("epoch", epoch, INT32_MIN, INT32_MAX)
        _check_int("start offset", start_offset, INT64_MIN, INT64_MAX)
        return f"{epoch} {start_offset}"

    def from_line(self, line: str) -> EpochEntry | None:
        fields = _java_split(line)
        if len(fields) != 2:
            return None
        epoch = _parse_java_int(fields[0], INT32_MIN, INT32_MAX)
        start_offset = _parse_java_int(fields[1], INT64_MIN, INT64_MAX)
        if epoch is None or start_offset is None:
            return None
        return EpochEntry(epoch, start_offset)


OFFSET_ENTRY_FORMATTER = OffsetEntryFormatter()
EPOCH_ENTRY_FORMATTER = EpochEntryFormatter()


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(character index of the line start, line) for each line, as Java's `BufferedReader.readLine` splits."""
    start = 0
    for match in _LINE_END.finditer(text):
        yield start, text[start : match.start()]
        start = match.end()
    if start < len(text):
        yield start, text[start:]


def parse_checkpoint_text(
    text: str,
    formatter: EntryFormatter[T],
    *,
    version: int = CHECKPOINT_VERSION,
    path: str | Path | None = None,
) -> list[T]:
    """The entries of a checkpoint's text, in file order; raises `CorruptCheckpointError` (with `path`)."""

    def corrupt(message: str, char_index: int) -> CorruptCheckpointError:
        return CorruptCheckpointError(message, path=path, position=len(text[:char_index].encode("utf-8")))

    lines = _lines(text)
    first = next(lines, None)
    if first is None:
        return []
    start, line = first
    read_version = _parse_java_int(line, INT32_MIN, INT32_MAX)
    if read_version is None:
        raise corrupt(f"malformed version line {line!r} in checkpoint file", start)
    if read_version != version:
        raise corrupt(f"unrecognised checkpoint version {read_version}, expected version {version}", start)
    second = next(lines, None)
    if second is None:
        return []
    count_start, line = second
    expected_count = _parse_java_int(line, 0, INT32_MAX)
    if expected_count is None:
        raise corrupt(f"malformed entry count line {line!r} in checkpoint file", count_start)
    entries: list[T] = []
    for line_number, (start, line) in enumerate(lines, start=3):
        entry = formatter.from_line(line)
        if entry is None:
            raise corrupt(f"malformed line {line_number} in checkpoint file: {line!r}", start)
        entries.append(entry)
    if len(entries) != expected_count:
        raise corrupt(f"expected {expected_count} entries in checkpoint file, found {len(entries)}", count_start)
    return entries


def format_checkpoint_text(
    entries: Iterable[T],
    formatter: EntryFormatter[T],
    *,
    version: int = CHECKPOINT_VERSION,
    path: str | Path | None = None,
) -> str:
    """The text Kafka writes for `entries`; raises `CorruptCheckpointError` for an entry the format cannot hold."""
    try:
        lines = [formatter.to_line(entry) for entry in entries]
    except (ValueError, TypeError) as exc:
        raise CorruptCheckpointError(f"refusing to write checkpoint entry: {exc}", path=path) from exc
    return "".join(f"{line}\n" for line in (str(version), str(len(lines)), *lines))


class CheckpointFile(Generic[T]):
    """One checkpoint file: `write` replaces it atomically, `read` parses it strictly (see the module docstring).

    Reads and writes of one instance are serialized by a lock, as Kafka's are, because checkpoint tasks run on
    scheduler threads while the log manager may write the same file at shutdown.
    """

    def __init__(
        self,
        path: Path,
        formatter: EntryFormatter[T],
        *,
        version: int = CHECKPOINT_VERSION,
        read_only: bool = False,
    ) -> None:
        self._path = Path(path)
        self._formatter = formatter
        self._version = version
        self._read_only = read_only
        self._lock = threading.Lock()
        if not read_only:
            try:
                with open(self._path, "xb"):
                    pass
            except FileExistsError:
                pass
            except OSError as exc:
                raise KafkaStorageError(f"failed to create checkpoint file: {exc.strerror or exc}", path=path) from exc

    @property
    def path(self) -> Path:
        return self._path

    def write(self, entries: Iterable[T]) -> None:
        """Replace the file's entries with `entries`, in their iteration order."""
        if self._read_only:
            raise KafkaStorageError("checkpoint file was opened read-only", path=self._path)
        text = format_checkpoint_text(entries, self._formatter, version=self._version, path=self._path)
        with self._lock:
            write_atomically(self._path, text.encode("utf-8"))

    def read(self) -> list[T]:
        """The file's entries in file order; a missing file has none."""
        with self._lock:
            data = read_if_exists(self._path, "checkpoint file")
        if data is None:
            return []
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError("checkpoint file is not UTF-8", path=self._path, position=exc.start) from exc
        return parse_checkpoint_text(text, self._formatter, version=self._version, path=self._path)


class OffsetCheckpointFile:
    """A log-dir offset checkpoint (recovery point, log start, replication, cleaner) as `{(topic, partition): offset}`.

    The mapping keeps the file's line order; a partition listed twice keeps its last offset (Kafka's `toMap`).
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._file = CheckpointFile(path, OFFSET_ENTRY_FORMATTER, read_only=read_only)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self._file.write(offsets.items())

    def read(self) -> dict[tuple[str, int], int]:
        return dict(self._file.read())


class LeaderEpochCheckpointFile:
    """A partition's leader-epoch-checkpoint as a list of `EpochEntry(epoch, start_offset)` in file order."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._file = CheckpointFile(path, EPOCH_ENTRY_FORMATTER, read_only=read_only)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, entries: Sequence[EpochEntry | tuple[int, int]]) -> None:
        self._file.write(EpochEntry(*entry) for entry in entries)

    def read(self) -> list[EpochEntry]:
        return self._file.read()

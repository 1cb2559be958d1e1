"""`meta.properties`: the identity of a log dir (Kafka's `MetaProperties` / `PropertiesUtils`).

A Java properties file as `Properties.store(writer, "")` writes it, UTF-8::

    #                                   the empty comment Kafka passes
    #Thu Jul 18 18:09:58 IST 2024       java.util.Date.toString() at write time (we write UTC)
    broker.id=0                         one key=value line per property
    cluster.id=XB4QhweWTe-kZwMNW25y1A
    version=0

| key            | v0 (ZooKeeper)         | v1 (KRaft) | value                                                   |
|----------------|------------------------|------------|---------------------------------------------------------|
| `version`      | `0` (also when absent) | `1`        | decimal                                                 |
| `broker.id`    | optional               | (not read) | int32, the node id                                      |
| `node.id`      | (not read)             | required   | int32                                                   |
| `cluster.id`   | optional               | required   | string                                                  |
| `directory.id` | optional               | optional   | Kafka Uuid: 16 bytes as base64url, no padding, 22 chars |

Any other key is kept as it was read and written back. Brokers on Java 18+ write the keys sorted (the JDK's
canonical `store` order, seen in the Kafka 3.7.1 and cp-kafka samples); older JVMs wrote hash-table order. We
write sorted and read any order. Keys and values are escaped as `Properties.store(Writer)` does (`\\`, `=`, `:`,
`#`, `!`, tab/newline/CR/form feed, spaces in keys and a leading space in values); non-ASCII is written as UTF-8.
The reader implements `Properties.load`: `#`/`!` comment lines, `key=value`, `key:value` or `key value`,
backslash line continuation, `\\uXXXX` escapes, duplicate keys keep the last value.

Errors: a version other than 0 or 1, a v1 file without `cluster.id` or `node.id`, a node id that is not an
int32, a malformed `directory.id` or `\\uXXXX` escape, or bytes that are not UTF-8 raise `CorruptCheckpointError`
with the path. Crash behaviour: written through `meta.properties.tmp` with fsync, atomic rename and a directory
fsync (`storage.file_io.write_atomically`), so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import CorruptCheckpointError, KafkaStorageError
from storage.file_io import write_atomically
from storage.files.checkpoint_file import INT32_MAX, INT32_MIN
from storage.kafka_uuid import random_uuid, uuid_text

VERSION_KEY = "version"
CLUSTER_ID_KEY = "cluster.id"
BROKER_ID_KEY = "broker.id"
NODE_ID_KEY = "node.id"
DIRECTORY_ID_KEY = "directory.id"
SUPPORTED_VERSIONS = (0, 1)

_JAVA_INT = re.compile(r"^[+-]?[0-9]+$")
_DIRECTORY_ID = re.compile(r"^[A-Za-z0-9_-]{22}(?:==)?$")
_NATURAL_LINE_END = re.compile(r"\r\n|\r|\n")
# Properties.load treats only these three as blanks (not vertical tab or other Unicode spaces).
_BLANKS = " \t\f"
_LOAD_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_STORE_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\"}
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _node_id_key(version: int) -> str:
    return BROKER_ID_KEY if version == 0 else NODE_ID_KEY


def _is_directory_id(text: str) -> bool:
    if not _DIRECTORY_ID.match(text):
        return False
    try:
        return len(base64.urlsafe_b64decode(text[:22] + "==")) == 16
    except (binascii.Error, ValueError):
        return False


@dataclass(frozen=True)
class MetaProperties:
    """The identity stored in one log dir's meta.properties; validated on creation.

    `extra` holds the keys raybroker does not interpret, sorted by key, so two objects read from files that
    differ only in key order are equal.
    """

    version: int
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: str | None = None
    extra: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.version not in SUPPORTED_VERSIONS:
            raise CorruptCheckpointError(f"unknown meta.properties version {self.version!r}")
        if self.version == 1 and self.cluster_id is None:
            raise CorruptCheckpointError("meta.properties version 1 requires cluster.id")
        if self.cluster_id is not None and not isinstance(self.cluster_id, str):
            raise CorruptCheckpointError(f"cluster.id {self.cluster_id!r} is not a string")
        if self.version == 1 and self.node_id is None:
            raise CorruptCheckpointError("meta.properties version 1 requires node.id")
        if self.node_id is not None and (
            not isinstance(self.node_id, int)
            or isinstance(self.node_id, bool)
            or not INT32_MIN <= self.node_id <= INT32_MAX
        ):
            raise CorruptCheckpointError(f"node id {self.node_id!r} is not an int32")
        if self.directory_id is not None and not _is_directory_id(self.directory_id):
            raise CorruptCheckpointError(f"directory.id {self.directory_id!r} is not a base64url Kafka Uuid")
        if not all(
            isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(s, str) for s in pair) for pair in self.extra
        ):
            raise CorruptCheckpointError("extra properties must be (key, value) pairs of strings")
        known = {VERSION_KEY, CLUSTER_ID_KEY, DIRECTORY_ID_KEY, _node_id_key(self.version)}
        clashes = sorted(key for key, _ in self.extra if key in known)
        if clashes:
            raise CorruptCheckpointError(f"extra properties repeat known keys {clashes}")
        object.__setattr__(self, "extra", tuple(sorted(self.extra)))

    def to_properties(self) -> dict[str, str]:
        """The key/value pairs Kafka writes for this object, plus the extra keys."""
        props = dict(self.extra)
        props[VERSION_KEY] = str(self.version)
        if self.cluster_id is not None:
            props[CLUSTER_ID_KEY] = self.cluster_id
        if self.node_id is not None:
            props[_node_id_key(self.version)] = str(self.node_id)
        if self.directory_id is not None:
            props[DIRECTORY_ID_KEY] = self.directory_id
        return props

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> MetaProperties:
        """Kafka's `MetaProperties.Builder(Properties)`: a missing version means 0; raises `CorruptCheckpointError`."""
        remaining = dict(props)
        version_text = remaining.pop(VERSION_KEY, "0").strip()
        if not _JAVA_INT.match(version_text):
            raise CorruptCheckpointError(f"invalid meta.properties version string {version_text!r}")
        version = int(version_text)
        if version not in SUPPORTED_VERSIONS:
            raise CorruptCheckpointError(f"unknown meta.properties version {version}")
        node_id_key = _node_id_key(version)
        node_id_text = remaining.pop(node_id_key, None)
        node_id = None
        if node_id_text is not None:
            if not _JAVA_INT.match(node_id_text):
                raise CorruptCheckpointError(f"unable to read {node_id_key} {node_id_text!r} as a base-10 number")
            node_id = int(node_id_text)
        return cls(
            version=version,
            cluster_id=remaining.pop(CLUSTER_ID_KEY, None),
            node_id=node_id,
            directory_id=remaining.pop(DIRECTORY_ID_KEY, None),
            extra=tuple(remaining.items()),
        )


def new_directory_id() -> str:
    """A random Kafka Uuid for `directory.id`, in Kafka's text form (`storage.kafka_uuid`: base64url, no padding,
    22 chars; never reserved, never starting with `-`)."""
    return uuid_text(random_uuid())


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based natural line number, logical line) pairs, as `Properties.load`'s LineReader builds them."""
    natural = _NATURAL_LINE_END.split(text)
    index = 0
    while index < len(natural):
        line_number = index + 1
        line = natural[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and index < len(natural):
            line = line[:-1] + natural[index].lstrip(_BLANKS)
            index += 1
        if _continues(line):
            line = line[:-1]
        yield line_number, line


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes joins the next natural line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str, line_number: int) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\" or index == len(text):
            out.append(char)
            continue
        char = text[index]
        index += 1
        if char == "u":
            digits = text[index : index + 4]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\uxxxx encoding on line {line_number}")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_LOAD_ESCAPES.get(char, char))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line, following `Properties.load0`."""
    key_end = len(line)
    value_start = len(line)
    has_separator = False
    backslash = False
    for index, char in enumerate(line):
        if not backslash and char in "=:":
            key_end, value_start, has_separator = index, index + 1, True
            break
        if not backslash and char in _BLANKS:
            key_end, value_start = index, index + 1
            break
        backslash = not backslash if char == "\\" else False
    while value_start < len(line):
        char = line[value_start]
        if char not in _BLANKS:
            if has_separator or char not in "=:":
                break
            has_separator = True
        value_start += 1
    return line[:key_end], line[value_start:]


def parse_properties(text: str, *, path: str | Path | None = None) -> dict[str, str]:
    """`Properties.load` of `text`, in first-appearance key order; raises `CorruptCheckpointError`."""
    props: dict[str, str] = {}
    for line_number, line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        try:
            props[_unescape(raw_key, line_number)] = _unescape(raw_value, line_number)
        except ValueError as exc:
            raise CorruptCheckpointError(str(exc), path=path) from exc
    return props


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char == " ":
            out.append("\\ " if is_key or index == 0 else " ")
        elif char in "=:#!":
            out.append("\\" + char)
        else:
            out.append(_STORE_ESCAPES.get(char, char))
    return "".join(out)


def java_date_text(epoch_ms: int) -> str:
    """`java.util.Date.toString()` of a UTC instant: `Thu Oct 10 11:57:10 UTC 2024` (English names, any locale)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return (
        f"{_DAYS[moment.weekday()]} {_MONTHS[moment.month - 1]} {moment.day:02d} "
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d} UTC {moment.year}"
    )


def format_properties(props: dict[str, str], *, epoch_ms: int) -> str:
    """`Properties.store(writer, "")` text on Java 18+: empty comment, date comment, keys sorted."""
    lines = ["#", f"#{java_date_text(epoch_ms)}"]
    lines += [f"{_escape(key, is_key=True)}={_escape(props[key], is_key=False)}" for key in sorted(props)]
    return "".join(f"{line}\n" for line in lines)


def parse_meta_properties(text: str, *, path: str | Path | None = None) -> MetaProperties:
    """The `MetaProperties` a meta.properties text holds; raises `CorruptCheckpointError` carrying `path`."""
    props = parse_properties(text, path=path)
    try:
        return MetaProperties.from_properties(props)
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(exc.message, path=path) from exc


def format_meta_properties(meta: MetaProperties, *, clock: Clock = SYSTEM_CLOCK) -> str:
    """The text `write_meta_properties` writes, dated by `clock`."""
    return format_properties(meta.to_properties(), epoch_ms=clock.milliseconds())


def read_meta_properties(path: Path) -> MetaProperties:
    """Read and validate a meta.properties file; a missing or unreadable file raises `KafkaStorageError`."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KafkaStorageError(f"failed to read meta.properties: {exc.strerror or exc}", path=path) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError("meta.properties is not UTF-8", path=path, position=exc.start) from exc
    return parse_meta_properties(text, path=path)


def write_meta_properties(path: Path, meta: MetaProperties, *, clock: Clock = SYSTEM_CLOCK) -> None:
    """Atomically replace `path` with `meta` (tmp + fsync + rename + directory fsync)."""
    text = format_meta_properties(meta, clock=clock)
    if parse_meta_properties(text, path=path) != meta:
        raise CorruptCheckpointError("meta.properties text does not read back as the object written", path=path)
    write_atomically(Path(path), text.encode("utf-8"))


def with_directory_id(meta: MetaProperties) -> MetaProperties:
    """`meta` with a fresh `directory.id` if it has none (Kafka generates and writes one back at startup)."""
    if meta.directory_id is not None:
        return meta
    return dataclasses.replace(meta, directory_id=new_directory_id())

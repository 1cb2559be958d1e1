"""Read-only decoding of Kafka's legacy message sets (magic 0 and 1), so logs written before Kafka 0.11 open.

raybroker never writes this format; it only reads it, the way Kafka's `LegacyRecord` and
`AbstractLegacyRecordBatch` do. All integers are big-endian.

    MessageSet => [LogEntry]
    LogEntry   => Offset MessageSize Message
      Offset      => int64    absolute offset (a compressed wrapper holds the LAST inner offset)
      MessageSize => int32    bytes of Message (>= 14 for magic 0, >= 22 for magic 1)
    Message (v0) => Crc Magic Attributes Key Value
    Message (v1) => Crc Magic Attributes Timestamp Key Value
      Crc        => uint32   CRC-32 (IEEE, zlib.crc32) over Magic .. end of Value
      Magic      => int8     0 or 1
      Attributes => int8     bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4);
                             bit 3 timestamp type, magic 1 only (0 CreateTime, 1 LogAppendTime); bits 4-7 unused
      Timestamp  => int64    milliseconds, magic 1 only (magic 0 reads as -1, "NoTimestampType")
      Key        => int32 length (-1 = null) + bytes
      Value      => int32 length (-1 = null) + bytes

| bytes of a log entry | v0 | v1 |
|----------------------|----|----|
| offset + size        | 0-11 | 0-11 |
| crc                  | 12-15 | 12-15 |
| magic                | 16 | 16 |
| attributes           | 17 | 17 |
| timestamp            | -  | 18-25 |
| key length           | 18-21 | 26-29 |

Compressed wrapper: a message whose codec is not none; its Value is the compressed concatenation of inner log
entries of the same magic, none of them compressed (a nested wrapper is corrupt). Magic 1 inner offsets are
relative (0..n-1) and the absolute offset of inner record i is `wrapper_offset - last_relative + relative_i`;
magic 0 inner offsets are already absolute. A magic 1 wrapper with LogAppendTime gives every inner record the
wrapper's timestamp. Snappy values are xerial-framed; magic 0 lz4 values carry the wrong frame header checksum
of Kafka 0.8/0.9 (xxHash32 taken from the frame magic instead of from FLG), which Kafka ignores for magic 0, so
it is recomputed here before the frame is decoded. The CRC does not cover Offset or MessageSize.

File iteration follows Kafka's `FileLogInputStream`: it stops silently when 17 or fewer bytes remain (not enough
for a header up to magic) or when the entry extends past the end (a partial tail left by a crash), and raises
`CorruptRecordError` for a size below 14. Every decoding error is a `CorruptRecordError` carrying the file path
and the entry's byte position.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import xxhash

from storage.errors import CorruptRecordError
from storage.records.compression import CompressionType, decompress
from storage.records.layout import (
    COMPRESSION_CODEC_MASK,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TimestampType,
)

_LOG_HEADER = struct.Struct(
    ">q"  # offset
    "i"  # message_size
)
# LOG_OVERHEAD (offset and size), MAGIC_OFFSET and HEADER_SIZE_UP_TO_MAGIC are the bytes every magic shares.
_MESSAGE_HEADER = struct.Struct(
    ">I"  # crc
    "b"  # magic
    "b"  # attributes
)
_TIMESTAMP = struct.Struct(">q")
_LENGTH = struct.Struct(">i")  # key or value length, -1 = null

CRC_OFFSET = LOG_OVERHEAD
TIMESTAMP_OFFSET = LOG_OVERHEAD + _MESSAGE_HEADER.size
KEY_OFFSET_V0 = TIMESTAMP_OFFSET
KEY_OFFSET_V1 = TIMESTAMP_OFFSET + _TIMESTAMP.size
RECORD_OVERHEAD_V0 = KEY_OFFSET_V0 - LOG_OVERHEAD + 2 * _LENGTH.size
RECORD_OVERHEAD_V1 = KEY_OFFSET_V1 - LOG_OVERHEAD + 2 * _LENGTH.size

_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_FLG_DICT_ID = 0x01


@dataclass(frozen=True, slots=True)
class LegacyRecord:
    """One record of a legacy message set, with its absolute offset."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[()] = ()


class LegacyBatch:
    """One top-level log entry (a plain message, or a compressed wrapper) over a buffer.

    The constructor checks only the framing (size, magic); key, value, codec and inner records are decoded on
    use, so a tool can still show the header of an entry whose body is damaged.
    """

    __slots__ = (
        "_entry",
        "_path",
        "_records",
        "attributes",
        "crc",
        "magic",
        "offset",
        "position",
        "size_in_bytes",
        "timestamp",
    )
    attributes: int
    offset: int
    crc: int
    magic: int
    timestamp: int

    def __init__(
        self,
        buffer: bytes | memoryview,
        position: int = 0,
        *,
        path: str | None = None,
        file_position: int = 0,
    ) -> None:
        view = memoryview(buffer).cast("B")
        self._path = path
        self.position = file_position
        self._records: tuple[LegacyRecord, ...] | None = None
        if position < 0 or len(view) - position < HEADER_SIZE_UP_TO_MAGIC:
            raise self._corrupt(f"log entry header needs {HEADER_SIZE_UP_TO_MAGIC} bytes, {len(view) - position} left")
        self.offset, message_size = _LOG_HEADER.unpack_from(view, position)
        if message_size < RECORD_OVERHEAD_V0:
            raise self._corrupt(f"message size {message_size} is smaller than the minimum {RECORD_OVERHEAD_V0}")
        if message_size > len(view) - position - LOG_OVERHEAD:
            raise self._corrupt(
                f"log entry declares {message_size} message bytes, only {len(view) - position - LOG_OVERHEAD} remain"
            )
        self.size_in_bytes = LOG_OVERHEAD + message_size
        self._entry = view[position : position + self.size_in_bytes]
        self.crc, self.magic, attributes = _MESSAGE_HEADER.unpack_from(self._entry, CRC_OFFSET)
        self.attributes = attributes & 0xFF
        if self.magic == 0:
            self.timestamp = NO_TIMESTAMP
        elif self.magic == 1:
            if message_size < RECORD_OVERHEAD_V1:
                raise self._corrupt(f"magic 1 message size {message_size} is smaller than {RECORD_OVERHEAD_V1}")
            (self.timestamp,) = _TIMESTAMP.unpack_from(self._entry, TIMESTAMP_OFFSET)
        else:
            raise self._corrupt(f"magic {self.magic} is not a legacy message format (0 or 1)")

    @property
    def compression(self) -> CompressionType:
        codec_id = self.attributes & COMPRESSION_CODEC_MASK
        if codec_id > CompressionType.LZ4:
            raise self._corrupt(f"codec id {codec_id} is not allowed in a magic {self.magic} message")
        return CompressionType(codec_id)

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime; 0 for magic 0, which has no timestamp (see `timestamp_type_name`)."""
        if self.magic == 0:
            return 0
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def timestamp_type_name(self) -> str:
        """What kafka-dump-log prints: `NoTimestampType` for magic 0, else `CreateTime` or `LogAppendTime`."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE.kafka_name
        return TimestampType(self.timestamp_type).kafka_name

    @property
    def key(self) -> bytes | None:
        return self._key_and_value()[0]

    @property
    def value(self) -> bytes | None:
        return self._key_and_value()[1]

    @property
    def base_offset(self) -> int:
        """The first inner offset of a wrapper (decompresses it), else the entry's own offset."""
        if self.attributes & COMPRESSION_CODEC_MASK == 0:
            return self.offset
        return self._decoded()[0].offset

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def max_timestamp(self) -> int:
        """The entry's timestamp (a wrapper carries its inner records' max); -1 for magic 0."""
        return self.timestamp

    def is_valid(self) -> bool:
        return self.crc == zlib.crc32(self._entry[MAGIC_OFFSET:])

    def ensure_valid(self) -> None:
        computed = zlib.crc32(self._entry[MAGIC_OFFSET:])
        if computed != self.crc:
            raise self._corrupt(f"message is corrupt (stored crc = {self.crc}, computed crc = {computed})")

    def records(self) -> list[LegacyRecord]:
        """The message itself, or the inner records of a wrapper with absolute offsets."""
        return list(self._decoded())

    def _decoded(self) -> tuple[LegacyRecord, ...]:
        if self._records is None:
            if self.compression == CompressionType.NONE:
                key, value = self._key_and_value()
                self._records = (LegacyRecord(self.offset, self.timestamp, key, value),)
            else:
                self._records = self._unwrap()
        return self._records

    def _key_and_value(self) -> tuple[bytes | None, bytes | None]:
        position = KEY_OFFSET_V0 if self.magic == 0 else KEY_OFFSET_V1
        key, position = self._read_bytes(position, "key")
        value, position = self._read_bytes(position, "value")
        if position != self.size_in_bytes:
            raise self._corrupt(f"{self.size_in_bytes - position} bytes follow the value of the message")
        return key, value

    def _read_bytes(self, position: int, field: str) -> tuple[bytes | None, int]:
        # A message is at least RECORD_OVERHEAD bytes, so the key length always fits; the value length does not
        # when the key's bytes run into it.
        if self.size_in_bytes - position < _LENGTH.size:
            raise self._corrupt(f"{field} length is truncated")
        (length,) = _LENGTH.unpack_from(self._entry, position)
        position += _LENGTH.size
        if length == -1:
            return None, position
        if length < 0 or length > self.size_in_bytes - position:
            raise self._corrupt(f"{field} length {length} does not fit the {self.size_in_bytes - position} bytes left")
        return bytes(self._entry[position : position + length]), position + length

    def _unwrap(self) -> tuple[LegacyRecord, ...]:
        compressed = self.value
        if compressed is None:
            raise self._corrupt("compressed wrapper message has a null value")
        data = self._inflate(compressed)
        inner: list[LegacyBatch] = []
        position = 0
        # Each inner entry takes at least LOG_OVERHEAD + 14 = 26 bytes, so this loop runs at most len(data) / 26 times.
        while position < len(data):
            entry = LegacyBatch(data, position, path=self._path, file_position=self.position)
            self._check_inner(entry, inner[-1].offset if inner else None)
            inner.append(entry)
            position += entry.size_in_bytes
        if not inner:
            raise self._corrupt("compressed wrapper message holds no inner messages")
        shift = self._inner_offset_shift(inner[-1].offset)
        if inner[0].offset + shift < 0:
            raise self._corrupt(f"inner message offset {inner[0].offset + shift} is negative")
        stamp = self.magic == 1 and self.timestamp_type == 1
        records = []
        for entry in inner:
            key, value = entry._key_and_value()
            records.append(LegacyRecord(entry.offset + shift, self.timestamp if stamp else entry.timestamp, key, value))
        return tuple(records)

    def _check_inner(self, entry: LegacyBatch, previous_offset: int | None) -> None:
        if entry.magic != self.magic:
            raise self._corrupt(f"inner message magic {entry.magic} differs from wrapper magic {self.magic}")
        if entry.attributes & COMPRESSION_CODEC_MASK:
            raise self._corrupt("compressed wrapper message nests another compressed message")
        if not entry.is_valid():
            raise self._corrupt(f"inner message at offset {entry.offset} fails its crc check")
        if previous_offset is not None and entry.offset <= previous_offset:
            raise self._corrupt(f"inner message offsets do not increase ({previous_offset} then {entry.offset})")

    def _inner_offset_shift(self, last_inner_offset: int) -> int:
        if self.magic == 0:
            return 0
        # Kafka's DeepRecordsIterator: some librdkafka versions produced wrapper offset 0, read as relative base 0.
        if self.offset == 0:
            return 0
        if self.offset < last_inner_offset:
            raise self._corrupt(f"wrapper offset {self.offset} is below its last inner offset {last_inner_offset}")
        return self.offset - last_inner_offset

    def _inflate(self, compressed: bytes) -> bytes:
        codec = self.compression
        if codec == CompressionType.LZ4 and self.magic == 0:
            compressed = self._fix_old_lz4_header(compressed)
        try:
            return decompress(codec, compressed)
        except CorruptRecordError as exc:
            raise self._corrupt(exc.message) from exc

    def _fix_old_lz4_header(self, frame: bytes) -> bytes:
        # Kafka 0.8/0.9 hashed the frame magic + FLG + BD instead of the descriptor alone; Kafka skips the byte
        # for magic 0, and recomputing it lets the standard frame decoder (which checks it) read the frame.
        if len(frame) <= len(_LZ4_FRAME_MAGIC) or not frame.startswith(_LZ4_FRAME_MAGIC):
            return frame
        flg = frame[4]
        checksum_at = 6 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0) + (4 if flg & _LZ4_FLG_DICT_ID else 0)
        if len(frame) <= checksum_at:
            raise self._corrupt("lz4 frame header is truncated")
        checksum = (xxhash.xxh32_intdigest(frame[4:checksum_at]) >> 8) & 0xFF
        return frame[:checksum_at] + bytes((checksum,)) + frame[checksum_at + 1 :]

    def _corrupt(self, message: str) -> CorruptRecordError:
        return CorruptRecordError(message, path=self._path, position=self.position)


def iter_legacy_batches(
    buffer: bytes | memoryview, *, path: str | None = None, base_position: int = 0
) -> Iterator[LegacyBatch]:
    """Walk consecutive top-level entries; `base_position` is the file position of `buffer[0]`."""
    view = memoryview(buffer).cast("B")
    position = 0
    # Every entry is at least LOG_OVERHEAD + 14 = 26 bytes, so this loop runs at most len(view) / 26 times.
    while len(view) - position > HEADER_SIZE_UP_TO_MAGIC:
        _, message_size = _LOG_HEADER.unpack_from(view, position)
        if message_size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"message size {message_size} is smaller than the minimum {RECORD_OVERHEAD_V0}",
                path=path,
                position=base_position + position,
            )
        if message_size > len(view) - position - LOG_OVERHEAD:
            return
        entry = LegacyBatch(view, position, path=path, file_position=base_position + position)
        yield entry
        position += entry.size_in_bytes

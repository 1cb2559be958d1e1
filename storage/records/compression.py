"""Record-batch codecs, framed exactly as Kafka frames them (bytes after the 61-byte v2 header).

| id | codec  | framing                                                                                  |
|----|--------|------------------------------------------------------------------------------------------|
| 0  | none   | records as they are                                                                      |
| 1  | gzip   | one RFC 1952 gzip stream                                                                 |
| 2  | snappy | xerial snappy-java stream: 16-byte header `\\x82SNAPPY\\x00`, int32 BE version 1, int32 BE  |
|    |        | min-compatible 1, then [int32 BE block length][raw snappy block]... (32 KiB input blocks). |
|    |        | Readers also accept one raw snappy block, as librdkafka writes.                           |
| 3  | lz4    | LZ4 frame: FLG 0x60 (v01, independent blocks, no checksums, no content size), BD 0x40    |
|    |        | (64 KiB blocks)                                                                          |
| 4  | zstd   | one standard zstd frame (Kafka's default level 3), content size not required             |

The codecs themselves come from well-kept libraries (`zlib`, `cramjam`, `lz4`, `zstandard`); only the
xerial block framing is done here because no library writes it. Every decode error is raised as
`CorruptRecordError`, and decompression stops at `max_output_bytes` so a hostile batch cannot make us
allocate without bound.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from storage.errors import CorruptRecordError, UnsupportedCompressionTypeError


class CompressionType(enum.IntEnum):
    """Kafka's codec ids (batch attribute bits 0-2) and their `compression.type` names."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """`none`, `gzip`, `snappy`, `lz4`, `zstd` (what kafka-dump-log prints as `compresscodec`)."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Accepts Kafka's names (`none`/`uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`)."""
        key = name.strip().lower()
        if key == "uncompressed":
            key = "none"
        for codec in cls:
            if codec.kafka_name == key:
                return codec
        raise UnsupportedCompressionTypeError(f"unknown compression type {name!r}")

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        """The codec for attribute bits 0-2; ids 5-7 are not defined by Kafka."""
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec_id}") from None


# A v2 batch is bounded by max.message.bytes (1 MiB default) compressed; 64 MiB of inflated records
# leaves room for highly compressible batches while refusing decompression bombs.
DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, min-compatible version
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
# snappy-java's default block size: input is cut into 32 KiB chunks, each compressed on its own.
XERIAL_BLOCK_BYTES = 32 * 1024

ZSTD_DEFAULT_LEVEL = 3


def compress(codec: CompressionType, data: bytes, level: int | None = None) -> bytes:
    """Compress the records section of a batch with Kafka's framing for `codec`."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        compressor = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec == CompressionType.LZ4:
        framed: bytes = lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
        return framed
    if codec == CompressionType.ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")


def decompress(
    codec: CompressionType, data: bytes | memoryview, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
) -> bytes:
    """Inflate the records section of a batch; `CorruptRecordError` on any malformed input."""
    try:
        if codec == CompressionType.NONE:
            return bytes(data)
        if codec == CompressionType.GZIP:
            out = zlib.decompressobj(47)  # 32 + 15: accept a gzip (or zlib) header, full window
            result = out.decompress(data, max_output_bytes)
            if out.unconsumed_tail:
                raise CorruptRecordError(f"gzip records inflate beyond {max_output_bytes} bytes")
            if not out.eof:
                raise CorruptRecordError("gzip stream is truncated")
            return result
        if codec == CompressionType.SNAPPY:
            return _snappy_decompress(bytes(data), max_output_bytes)
        if codec == CompressionType.LZ4:
            lz4_out = lz4.frame.LZ4FrameDecompressor()
            inflated: bytes = lz4_out.decompress(bytes(data), max_length=max_output_bytes)
            if not lz4_out.eof:
                raise CorruptRecordError("lz4 frame is truncated or inflates beyond the limit")
            return inflated
        if codec == CompressionType.ZSTD:
            return _zstd_decompress(memoryview(data), max_output_bytes)
    except CorruptRecordError:
        raise
    except (zlib.error, RuntimeError, ValueError, zstandard.ZstdError, cramjam.DecompressionError) as exc:
        raise CorruptRecordError(f"cannot decompress {codec.kafka_name} records: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"unknown compression codec {codec!r}")


# zstd's decompressor returns everything a call's input inflates to, and a 4-byte RLE block (3-byte header,
# 1 byte) inflates to the 128 KiB block maximum: 32768x. Feeding at most remaining/32768 input bytes per call
# (never fewer than 64, i.e. at most 2 MiB of output) keeps the total within the limit plus 2 MiB.
ZSTD_MAX_EXPANSION = 32768
_ZSTD_MIN_INPUT_CHUNK_BYTES = 64


def _zstd_decompress(data: memoryview, max_output_bytes: int) -> bytes:
    zstd_out = zstandard.ZstdDecompressor().decompressobj()
    chunks = []
    total = 0
    position = 0
    while position < len(data) and not zstd_out.eof:
        step = max(_ZSTD_MIN_INPUT_CHUNK_BYTES, (max_output_bytes - total) // ZSTD_MAX_EXPANSION)
        chunk = zstd_out.decompress(bytes(data[position : position + step]))
        position += step
        total += len(chunk)
        if total > max_output_bytes:
            raise CorruptRecordError(f"zstd records inflate beyond {max_output_bytes} bytes")
        chunks.append(chunk)
    if not zstd_out.eof:
        raise CorruptRecordError("zstd frame is truncated")
    return b"".join(chunks)


def _xerial_compress(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    view = memoryview(data)
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes, max_output_bytes: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _raw_snappy(data, max_output_bytes)
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("snappy xerial header is truncated")
    position = _XERIAL_HEADER.size
    chunks = []
    total = 0
    while position < len(data):
        if position + 4 > len(data):
            raise CorruptRecordError("snappy xerial block length is truncated", position=position)
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise CorruptRecordError(f"snappy xerial block of {length} bytes overruns the data", position=position)
        chunk = _raw_snappy(data[position : position + length], max_output_bytes - total)
        total += len(chunk)
        chunks.append(chunk)
        position += length
    return b"".join(chunks)


def _raw_snappy(block: bytes, max_output_bytes: int) -> bytes:
    # A raw snappy block starts with its uncompressed length as a varint: check it before inflating.
    length = 0
    for shift, byte in zip(range(0, 35, 7), block[:5], strict=False):
        length |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
    if length > max_output_bytes:
        raise CorruptRecordError(f"snappy block claims {length} bytes, beyond the {max_output_bytes}-byte limit")
    return bytes(cramjam.snappy.decompress_raw(block))

"""Tests for `storage.records.compression`: Kafka's framing of every codec, interop with kafka-python, limits."""

from __future__ import annotations

import contextlib
import gzip
import random
import struct
import tracemalloc
from pathlib import Path

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from storage.errors import CorruptRecordError, UnsupportedCompressionTypeError
from storage.records.compression import (
    XERIAL_BLOCK_BYTES,
    CompressionType,
    compress,
    decompress,
)

CODECS = list(CompressionType)
COMPRESSED = [codec for codec in CompressionType if codec != CompressionType.NONE]
RECORDS_OFFSET = 61  # v2 batch header size: the compressed records start here
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"  # 0x184D2204 little-endian
ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"  # 0xFD2FB528 little-endian
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)

# Sizes around the framing boundaries: empty, tiny, one xerial block (32 KiB) and one lz4 block (64 KiB).
SIZES = [0, 1, 100, XERIAL_BLOCK_BYTES - 1, XERIAL_BLOCK_BYTES, 40_000, 65_536, 70_000, 200_000]


def compressible(size: int, seed: int = 7) -> bytes:
    """Record-like bytes: repeated words with some noise, so every codec actually compresses them."""
    rng = random.Random(seed)
    words = [b"key", b"value", b"topic", b"partition", b"offset", b"\x00\x01", b"{}"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + bytes([rng.randrange(256)])
    return bytes(out[:size])


def incompressible(size: int, seed: int = 11) -> bytes:
    return random.Random(seed).randbytes(size)


def xxh32_short(data: bytes, seed: int = 0) -> int:
    """XXH32 for inputs shorter than 16 bytes (all the lz4 header checksum needs), from the xxHash spec."""
    prime1, prime2, prime3, prime4, prime5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(value: int, bits: int) -> int:
        return ((value << bits) | (value >> (32 - bits))) & mask

    assert len(data) < 16
    acc = (seed + prime5 + len(data)) & mask
    position = 0
    while position + 4 <= len(data):
        (lane,) = struct.unpack_from("<I", data, position)
        acc = (rotl((acc + lane * prime3) & mask, 17) * prime4) & mask
        position += 4
    for byte in data[position:]:
        acc = (rotl((acc + byte * prime5) & mask, 11) * prime1) & mask
    acc ^= acc >> 15
    acc = (acc * prime2) & mask
    acc ^= acc >> 13
    acc = (acc * prime3) & mask
    acc ^= acc >> 16
    return acc


def xerial_blocks(stream: bytes) -> list[bytes]:
    """Splits a xerial snappy stream into its raw snappy blocks (an independent reader of the framing)."""
    assert stream[:16] == XERIAL_HEADER
    position = 16
    blocks = []
    while position < len(stream):
        (length,) = struct.unpack_from(">i", stream, position)
        blocks.append(stream[position + 4 : position + 4 + length])
        position += 4 + length
    assert position == len(stream)
    return blocks


def lz4_blocks(frame: bytes) -> list[tuple[int, bool]]:
    """(size, stored uncompressed) of each data block of a Kafka-style lz4 frame (no checksums, no size)."""
    position = 7  # magic 4, FLG, BD, HC
    blocks = []
    while True:
        (word,) = struct.unpack_from("<I", frame, position)
        position += 4
        if word == 0:
            break
        size = word & 0x7FFFFFFF
        blocks.append((size, bool(word & 0x80000000)))
        position += size
    assert position == len(frame), "the end mark must be the last 4 bytes"
    return blocks


def sample_batch(kafka_samples_dir: Path, relative: str, position: int, size: int) -> bytes:
    data = (kafka_samples_dir / relative).read_bytes()
    return data[position : position + size]


# --- round trips ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_round_trip_compressible_data(codec: CompressionType, size: int) -> None:
    data = compressible(size)
    encoded = compress(codec, data)
    assert decompress(codec, encoded) == data
    if codec != CompressionType.NONE and size >= 1000:
        assert len(encoded) < len(data)


@pytest.mark.parametrize("size", [0, 1, 40_000, 70_000])
@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_round_trip_incompressible_data(codec: CompressionType, size: int) -> None:
    data = incompressible(size)
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.kafka_name)
def test_decompress_accepts_memoryview_and_bytearray(codec: CompressionType) -> None:
    data = compressible(5000)
    encoded = compress(codec, data)
    framed = b"\xaa" * RECORDS_OFFSET + encoded
    assert decompress(codec, memoryview(framed)[RECORDS_OFFSET:]) == data
    assert decompress(codec, bytearray(encoded)) == data


@pytest.mark.parametrize("level", [1, 9])
def test_gzip_level_changes_output_not_content(level: int) -> None:
    data = compressible(50_000)
    assert decompress(CompressionType.GZIP, compress(CompressionType.GZIP, data, level)) == data


@pytest.mark.parametrize("level", [-5, 1, 19])
def test_zstd_level_changes_output_not_content(level: int) -> None:
    data = compressible(50_000)
    assert decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, data, level)) == data


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip_arbitrary_bytes(codec: CompressionType, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


# --- Kafka's framing, byte by byte ----------------------------------------------------------------------


def test_none_is_identity() -> None:
    data = compressible(1000)
    assert compress(CompressionType.NONE, data) == data
    assert decompress(CompressionType.NONE, data) == data


def test_gzip_is_one_rfc1952_stream() -> None:
    data = compressible(70_000)
    encoded = compress(CompressionType.GZIP, data)
    assert encoded[:2] == b"\x1f\x8b"
    assert encoded[2] == 8  # CM = deflate
    assert gzip.decompress(encoded) == data


@pytest.mark.parametrize("size", [0, 1, XERIAL_BLOCK_BYTES, XERIAL_BLOCK_BYTES + 1, 70_000, 200_000])
def test_snappy_is_xerial_framed_in_32_kib_input_blocks(size: int) -> None:
    data = compressible(size)
    encoded = compress(CompressionType.SNAPPY, data)
    assert encoded[:8] == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", encoded, 8) == (1, 1)  # version 1, min-compatible version 1
    blocks = xerial_blocks(encoded)
    assert len(blocks) == -(-size // XERIAL_BLOCK_BYTES)
    chunks = [snappy.decompress(block) for block in blocks]
    assert [len(chunk) for chunk in chunks[:-1]] == [XERIAL_BLOCK_BYTES] * (len(chunks) - 1)
    assert b"".join(chunks) == data


@pytest.mark.parametrize("size", [0, 1, 5000, 100_000])
def test_raw_unframed_snappy_decodes_too(size: int) -> None:
    data = compressible(size)
    assert decompress(CompressionType.SNAPPY, snappy.compress(data)) == data


@pytest.mark.parametrize("size", [0, 1, 65_536, 70_000, 200_000])
def test_lz4_frame_has_kafka_flags_and_64_kib_independent_blocks(size: int) -> None:
    data = incompressible(size)
    encoded = compress(CompressionType.LZ4, data)
    assert encoded[:4] == LZ4_FRAME_MAGIC
    flg, bd, header_checksum = encoded[4], encoded[5], encoded[6]
    assert flg == 0x60  # version 01, independent blocks, no block/content checksum, no content size
    assert bd == 0x40  # 64 KiB maximum block size
    assert header_checksum == (xxh32_short(bytes([flg, bd])) >> 8) & 0xFF
    blocks = lz4_blocks(encoded)
    assert all(block_size <= 65_536 for block_size, _ in blocks)
    assert len(blocks) == -(-size // 65_536)
    assert encoded[-4:] == b"\x00\x00\x00\x00"


def test_xxh32_oracle_matches_published_vectors() -> None:
    # Test vectors of the reference implementation: XXH32("", 0) and XXH32("a", 0).
    assert xxh32_short(b"") == 0x02CC5D05
    assert xxh32_short(b"a") == 0x550D7456


def test_zstd_is_one_standard_frame() -> None:
    data = compressible(70_000)
    encoded = compress(CompressionType.ZSTD, data)
    assert encoded[:4] == ZSTD_FRAME_MAGIC
    assert zstandard.ZstdDecompressor().decompress(encoded) == data


# The first 7 bytes of every lz4 batch a Kafka 3.6 broker's Java producer wrote (`KafkaLZ4BlockOutputStream`):
# magic, FLG 0x60 (version 01, independent blocks), BD 0x40 (64 KiB blocks), header checksum 0x82. No licensed
# sample holds an lz4 batch, so the header is pinned here rather than read from one.
KAFKA_LZ4_FRAME_HEADER = bytes.fromhex("04224d18604082")


@pytest.mark.parametrize("size", [0, 1, 70_000])
def test_lz4_header_equals_a_real_kafka_broker_batch(size: int) -> None:
    ours = compress(CompressionType.LZ4, compressible(size))
    assert ours[:7] == KAFKA_LZ4_FRAME_HEADER  # magic, FLG, BD and header checksum


def test_snappy_header_equals_a_real_kafka_broker_batch(kafka_samples_dir: Path) -> None:
    batch = sample_batch(
        kafka_samples_dir, "seanorth__kafka-server@9626fa1e/kafka-logs/some-topic-0/00000000000000000000.log", 0, 221
    )
    assert batch[21 + 1] & 0x07 == CompressionType.SNAPPY
    kafka_stream = batch[RECORDS_OFFSET:]
    assert kafka_stream[:16] == XERIAL_HEADER
    records = decompress(CompressionType.SNAPPY, kafka_stream)
    assert b"".join(snappy.decompress(block) for block in xerial_blocks(kafka_stream)) == records
    assert compress(CompressionType.SNAPPY, records)[:16] == kafka_stream[:16]


def test_gzip_of_a_real_kafka_broker_batch(kafka_samples_dir: Path) -> None:
    batch = sample_batch(
        kafka_samples_dir, "BiggerBrain__kafka@0af19244/data/lsx1-0/00000000000000000000.log", 1164, 117
    )
    assert batch[21 + 1] & 0x07 == CompressionType.GZIP
    assert decompress(CompressionType.GZIP, batch[RECORDS_OFFSET:]) == gzip.decompress(batch[RECORDS_OFFSET:])


# --- interop with kafka-python's codecs ------------------------------------------------------------------

KAFKA_PYTHON_ENCODERS = {
    CompressionType.GZIP: kafka_codec.gzip_encode,
    CompressionType.SNAPPY: kafka_codec.snappy_encode,
    CompressionType.LZ4: kafka_codec.lz4_encode,
    CompressionType.ZSTD: kafka_codec.zstd_encode,
}
KAFKA_PYTHON_DECODERS = {
    CompressionType.GZIP: kafka_codec.gzip_decode,
    CompressionType.SNAPPY: kafka_codec.snappy_decode,
    CompressionType.LZ4: kafka_codec.lz4_decode,
    CompressionType.ZSTD: kafka_codec.zstd_decode,
}


@pytest.mark.parametrize("size", [1, 100, 40_000, 70_000, 200_000])
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda codec: codec.kafka_name)
def test_decodes_kafka_python_output(codec: CompressionType, size: int) -> None:
    data = compressible(size)
    assert decompress(codec, KAFKA_PYTHON_ENCODERS[codec](data)) == data


@pytest.mark.parametrize("size", [1, 100, 40_000, 70_000, 200_000])
@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda codec: codec.kafka_name)
def test_kafka_python_decodes_our_output(codec: CompressionType, size: int) -> None:
    data = compressible(size)
    assert KAFKA_PYTHON_DECODERS[codec](compress(codec, data)) == data


def test_decodes_kafka_python_unframed_snappy() -> None:
    data = compressible(50_000)
    assert decompress(CompressionType.SNAPPY, kafka_codec.snappy_encode(data, xerial_compatible=False)) == data


# --- corrupt and truncated input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD], ids=lambda codec: codec.kafka_name
)
def test_every_truncation_is_corrupt(codec: CompressionType) -> None:
    encoded = compress(codec, compressible(3000))
    for cut in range(len(encoded)):
        with pytest.raises(CorruptRecordError):
            decompress(codec, encoded[:cut])


def test_snappy_truncation_inside_a_block_or_header_is_corrupt() -> None:
    encoded = compress(CompressionType.SNAPPY, compressible(70_000))
    boundaries = {16}
    position = 16
    while position < len(encoded):
        (length,) = struct.unpack_from(">i", encoded, position)
        position += 4 + length
        boundaries.add(position)
    # A xerial stream has no end mark: a cut between blocks is a shorter valid stream (the batch's record
    # count catches it), every other cut must be refused. Cuts before byte 8 no longer carry the magic and
    # are read as a raw block.
    near_boundaries = {cut + delta for cut in boundaries for delta in range(-5, 6)}
    for cut in sorted(set(range(1, 64)) | set(range(64, len(encoded), 7)) | near_boundaries):
        if cut in boundaries or not 0 < cut < len(encoded):
            continue
        with pytest.raises(CorruptRecordError):
            decompress(CompressionType.SNAPPY, encoded[:cut])


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda codec: codec.kafka_name)
@pytest.mark.parametrize("garbage", [b"", b"\xff", b"not compressed at all", bytes(range(256)) * 4])
def test_garbage_is_corrupt(codec: CompressionType, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


def test_gzip_checksum_mismatch_is_corrupt() -> None:
    encoded = bytearray(compress(CompressionType.GZIP, compressible(5000)))
    encoded[-8] ^= 0xFF  # first byte of the CRC-32 trailer
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.GZIP, bytes(encoded))


def test_snappy_block_length_overrunning_the_data_is_corrupt() -> None:
    encoded = bytearray(compress(CompressionType.SNAPPY, compressible(5000)))
    struct.pack_into(">i", encoded, 16, len(encoded))
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, bytes(encoded))
    struct.pack_into(">i", encoded, 16, -1)
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, bytes(encoded))


def test_snappy_xerial_header_alone_truncated_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, XERIAL_HEADER[:12])


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    size=st.integers(0, 5000),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_damaged_streams_raise_only_corrupt_record_error(
    codec: CompressionType, size: int, flips: list[tuple[int, int]]
) -> None:
    data = compressible(size)
    encoded = bytearray(compress(codec, data))
    for position, mask in flips:
        encoded[position % len(encoded)] ^= mask
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, bytes(encoded), max_output_bytes=1 << 20)


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_corrupt_record_error(codec: CompressionType, data: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        decompress(codec, data, max_output_bytes=1 << 20)


# --- decompression bombs ------------------------------------------------------------------------------

BOMB_BYTES = 64 * 1024 * 1024
LIMIT_BYTES = 1024 * 1024


@pytest.fixture(scope="module")
def bombs() -> dict[str, tuple[CompressionType, bytes]]:
    zeros = bytes(BOMB_BYTES)
    return {
        "gzip": (CompressionType.GZIP, compress(CompressionType.GZIP, zeros)),
        "snappy": (CompressionType.SNAPPY, compress(CompressionType.SNAPPY, zeros)),
        "snappy-raw": (CompressionType.SNAPPY, snappy.compress(zeros[: 4 * LIMIT_BYTES])),
        "lz4": (CompressionType.LZ4, compress(CompressionType.LZ4, zeros)),
        "lz4-with-content-size": (CompressionType.LZ4, lz4.frame.compress(zeros, store_size=True)),
        "zstd": (CompressionType.ZSTD, compress(CompressionType.ZSTD, zeros)),
        "zstd-without-content-size": (
            CompressionType.ZSTD,
            zstandard.ZstdCompressor(write_content_size=False).compress(zeros),
        ),
    }


BOMB_NAMES = ["gzip", "snappy", "snappy-raw", "lz4", "lz4-with-content-size", "zstd", "zstd-without-content-size"]


@pytest.mark.parametrize("name", BOMB_NAMES)
def test_decompression_bomb_is_refused_without_inflating_it(
    bombs: dict[str, tuple[CompressionType, bytes]], name: str
) -> None:
    codec, bomb = bombs[name]
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            decompress(codec, bomb, max_output_bytes=LIMIT_BYTES)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The limit plus codec buffers, far below the 64 MiB the bomb inflates to.
    assert peak_bytes < 8 * LIMIT_BYTES


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda codec: codec.kafka_name)
def test_output_of_exactly_the_limit_is_accepted_one_more_byte_is_not(codec: CompressionType) -> None:
    data = compressible(100_000)
    encoded = compress(codec, data)
    assert decompress(codec, encoded, max_output_bytes=len(data)) == data
    with pytest.raises(CorruptRecordError):
        decompress(codec, encoded, max_output_bytes=len(data) - 1)


# --- codec names and ids ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("none", CompressionType.NONE),
        ("uncompressed", CompressionType.NONE),
        ("gzip", CompressionType.GZIP),
        ("snappy", CompressionType.SNAPPY),
        ("lz4", CompressionType.LZ4),
        ("zstd", CompressionType.ZSTD),
        (" ZSTD ", CompressionType.ZSTD),
    ],
)
def test_from_name(name: str, codec: CompressionType) -> None:
    assert CompressionType.from_name(name) is codec


@pytest.mark.parametrize("name", ["", "producer", "brotli", "lz4hc", "zstd2"])
def test_from_name_unknown(name: str) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        CompressionType.from_name(name)


def test_ids_and_names_are_kafkas() -> None:
    assert {codec.kafka_name: int(codec) for codec in CompressionType} == {
        "none": 0,
        "gzip": 1,
        "snappy": 2,
        "lz4": 3,
        "zstd": 4,
    }
    for codec in CompressionType:
        assert CompressionType.from_id(int(codec)) is codec
        assert CompressionType.from_name(codec.kafka_name) is codec


@pytest.mark.parametrize("codec_id", [-1, 5, 6, 7, 8, 255])
def test_from_id_unknown(codec_id: int) -> None:
    with pytest.raises(UnsupportedCompressionTypeError):
        CompressionType.from_id(codec_id)

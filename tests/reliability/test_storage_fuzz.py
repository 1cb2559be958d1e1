"""Hostile bytes into every storage decoder: only the typed errors of `storage/errors.py` may escape, nothing
hangs (hypothesis deadline + pytest-timeout), and a size field claiming 2 GiB is refused before allocation.

| target                                      | input                                                          |
|---------------------------------------------|----------------------------------------------------------------|
| `file_records.iter_any_batches` + records   | arbitrary bytes; valid batches of magic 0, 1, 2 and every codec |
|                                             | with bytes mutated and the CRC fixed up (so decoding goes past  |
|                                             | the checksum into sizes, varints and codecs)                    |
| `compression.decompress`                    | arbitrary bytes, every codec                                    |
| `OffsetIndex` / `TimeIndex`                 | an arbitrary file: open, sanity check, lookups                 |
| `checkpoint_file.parse_checkpoint_text`     | arbitrary text, and mutated valid files                         |
| `meta_properties.read_meta_properties`      | arbitrary bytes                                                 |
| `Log.append` (the client path)              | arbitrary bytes and mutated (CRC fixed) batches: rejected whole |
|                                             | with a typed error, or appended and read back                   |

Examples per target: `scaled(300, 3000)`; `test_zz_report_fuzz_examples` prints the totals.
"""

from __future__ import annotations

import contextlib
import struct
import tracemalloc
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from storage.config.log_config import LogConfig
from storage.errors import RaybrokerError
from storage.files.checkpoint_file import OFFSET_ENTRY_FORMATTER, parse_checkpoint_text
from storage.files.meta_properties import read_meta_properties
from storage.partition.log import Log
from storage.records.compression import CompressionType, compress, decompress
from storage.records.file_records import FileRecords, iter_any_batches
from storage.records.record_batch import ATTRIBUTES_OFFSET, CRC_OFFSET, LENGTH_OFFSET, RecordBatchBuilder
from storage.segment.offset_index import OffsetIndex
from storage.segment.time_index import TimeIndex
from tests.reliability.modes import scaled

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(scaled(300, 3600))]

START_MS = 1_700_000_000_000
EXAMPLES = scaled(300, 3000)
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=5000,  # ms per example: generous with every core busy, but a hang fails
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
COUNTS: Counter[str] = Counter()
# A legacy (magic 0/1) entry: offset int64, size int32, crc uint32 over [16, end); magic at 16.
LEGACY_CRC_FROM = 16


def v2_batch(codec: CompressionType, count: int = 3) -> bytes:
    builder = RecordBatchBuilder(compression=codec)
    for n in range(count):
        builder.append(f"k{n}".encode(), f"value-{n}".encode() * 4, timestamp=START_MS + n, headers=[("h", b"v")])
    return builder.build()


def legacy_batch(magic: int, codec: CompressionType) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for n in range(3):
        builder.append(n, timestamp=START_MS + n if magic else None, key=f"k{n}".encode(), value=b"v" * 20)
    return bytes(builder.build())


LEGACY_CODECS = (CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4)
SEEDS = [v2_batch(codec) for codec in CompressionType] + [
    legacy_batch(magic, codec) for magic in (0, 1) for codec in LEGACY_CODECS
]


def fix_crc(data: bytearray) -> bytes:
    """Recomputes the checksum of a (mutated) first batch so decoding goes past it."""
    if len(data) > ATTRIBUTES_OFFSET and data[LEGACY_CRC_FROM] == 2:
        struct.pack_into(">I", data, CRC_OFFSET, crc32c.crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    elif len(data) > LEGACY_CRC_FROM:
        struct.pack_into(">I", data, LEGACY_CRC_FROM - 4, zlib.crc32(bytes(data[LEGACY_CRC_FROM:])))
    return bytes(data)


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["set", "insert", "delete"]))
        if kind == "set":
            data[position] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[position:position] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[position : position + draw(st.integers(1, 8))]
        if not data:
            return b""
    # Keep the size field consistent half of the time, so the decoder does not always stop at the framing.
    if draw(st.booleans()) and len(data) >= 12:
        struct.pack_into(">i", data, LENGTH_OFFSET, len(data) - 12)
    return fix_crc(data) if draw(st.booleans()) else bytes(data)


HOSTILE = st.one_of(st.binary(max_size=300), mutated_batches())


def decode_everything(data: bytes) -> int:
    """Walks every batch and record of `data`; returns the number of records."""
    records = 0
    for batch in iter_any_batches(data):
        batch.ensure_valid()
        records += len(batch.records())
    return records


@FUZZ
@given(data=HOSTILE)
def test_batch_decoders_raise_only_typed_errors(data: bytes) -> None:
    COUNTS["batch decoders"] += 1
    with contextlib.suppress(RaybrokerError):
        decode_everything(data)


@FUZZ
@given(codec=st.sampled_from(list(CompressionType)), data=st.binary(max_size=400), prefix=st.booleans())
def test_decompress_raises_only_typed_errors(codec: CompressionType, data: bytes, prefix: bool) -> None:
    COUNTS["decompress"] += 1
    if prefix and codec != CompressionType.NONE:
        # Start from a valid frame so the codec parses past its magic before meeting the garbage.
        data = compress(codec, b"kafka" * 50)[: len(data) % 64 + 4] + data
    with contextlib.suppress(RaybrokerError):
        decompress(codec, data)


@FUZZ
@given(content=st.binary(max_size=200), targets=st.lists(st.integers(-(2**40), 2**40), max_size=5))
def test_index_files_open_and_look_up_with_only_typed_errors(
    tmp_path: Path, content: bytes, targets: list[int]
) -> None:
    COUNTS["index files"] += 1
    for suffix, index_type in (("index", OffsetIndex), ("timeindex", TimeIndex)):
        path = tmp_path / f"00000000000000000100.{suffix}"
        path.write_bytes(content)
        try:
            index = index_type(path, 100, max_index_size=1024, writable=False)
        except RaybrokerError:
            continue
        try:
            index.sanity_check()
            for target in targets:
                index.lookup(target)
            index.entries_list()
        except RaybrokerError:
            pass
        finally:
            index.close()


CHECKPOINT = "0\n2\ntopic-a 0 15\ntopic-b 3 1200\n"


@st.composite
def checkpoint_texts(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.text(max_size=120))
    text = list(CHECKPOINT)
    for _ in range(draw(st.integers(1, 3))):
        text[draw(st.integers(0, len(text) - 1))] = draw(st.characters())
    return "".join(text)


@FUZZ
@given(text=checkpoint_texts())
def test_checkpoint_parser_raises_only_typed_errors(text: str) -> None:
    COUNTS["checkpoint parser"] += 1
    try:
        entries = parse_checkpoint_text(text, OFFSET_ENTRY_FORMATTER)
    except RaybrokerError:
        return
    assert all(isinstance(offset, int) for _, offset in entries)


META = b"#\nversion=1\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\ndirectory.id=Bq6S0z4kS5qYwK3u8nPPzg\n"


@FUZZ
@given(
    data=st.one_of(
        st.binary(max_size=200),
        st.tuples(st.integers(0, len(META) - 1), st.binary(min_size=1, max_size=4)).map(
            lambda cut: META[: cut[0]] + cut[1] + META[cut[0] + len(cut[1]) :]
        ),
    )
)
def test_meta_properties_parser_raises_only_typed_errors(tmp_path: Path, data: bytes) -> None:
    COUNTS["meta.properties parser"] += 1
    path = tmp_path / "meta.properties"
    path.write_bytes(data)
    with contextlib.suppress(RaybrokerError):
        read_meta_properties(path)


@pytest.fixture(scope="module")
def fuzz_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Log]:
    log = Log.open(tmp_path_factory.mktemp("fuzz") / "topic-0", LogConfig(segment_bytes=64 * 1024))
    yield log
    log.close()


@FUZZ
@given(data=HOSTILE)
def test_client_append_rejects_hostile_bytes_whole_or_stores_them_readably(fuzz_log: Log, data: bytes) -> None:
    COUNTS["Log.append"] += 1
    end = fuzz_log.log_end_offset
    try:
        info = fuzz_log.append(data)
    except RaybrokerError:
        assert fuzz_log.log_end_offset == end, "a rejected append must write nothing"
        return
    assert info.first_offset == end and fuzz_log.log_end_offset == info.last_offset + 1
    assert [record.offset for record in fuzz_log.records(end)] == sent_offsets(data, end)


def sent_offsets(data: bytes, first_offset: int) -> list[int]:
    """The offsets an accepted append's records read back at, as Kafka assigns them: each batch's base offset
    follows the records counted before it, and each record keeps its offset delta. A compressed batch's deltas
    must run 0, 1, 2, ... (the validator refuses others); an uncompressed batch's are stored as sent, as Kafka's
    `LogValidator.assignOffsetsNonCompressed` stores them, so a batch that repeats a delta reads back a repeated
    offset."""
    offsets: list[int] = []
    base = first_offset
    for batch in iter_any_batches(data):
        offsets.extend(base + record.offset - batch.base_offset for record in batch.records())
        base += batch.records_count
    return offsets


# --- bounded memory --------------------------------------------------------------------------------------

TWO_GIB = 2**31 - 1


def claims_two_gib(magic: int) -> bytes:
    """A header whose size field claims 2 GiB, followed by a few bytes."""
    header = bytearray(SEEDS[0][:61] if magic == 2 else legacy_batch(magic, CompressionType.NONE)[:34])
    struct.pack_into(">i", header, LENGTH_OFFSET, TWO_GIB)
    return bytes(header) + b"\x00" * 64


def peak_bytes(action: object) -> int:
    tracemalloc.start()
    try:
        action()  # type: ignore[operator]
    except RaybrokerError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("magic", [0, 1, 2])
def test_a_batch_claiming_two_gib_is_refused_before_allocation(tmp_path: Path, magic: int) -> None:
    data = claims_two_gib(magic)
    limit = 16 * 1024 * 1024  # far below the claimed 2 GiB: nothing is sized from the claim
    assert peak_bytes(lambda: decode_everything(data)) < limit
    log = Log.open(tmp_path / "topic-0", LogConfig())
    try:
        assert peak_bytes(lambda: log.append(data)) < limit
        assert log.log_end_offset == 0
    finally:
        log.close()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    records = FileRecords(path, read_only=True)
    try:
        assert peak_bytes(lambda: list(records.batches(0))) < limit
    finally:
        records.close()
    COUNTS["2 GiB claims"] += 3


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_a_decompression_bomb_stops_at_the_output_limit(codec: CompressionType) -> None:
    bomb = compress(codec, bytes(8 * 1024 * 1024))
    limit_bytes = 1024 * 1024
    with pytest.raises(RaybrokerError):
        decompress(codec, bomb, max_output_bytes=limit_bytes)
    assert peak_bytes(lambda: decompress(codec, bomb, max_output_bytes=limit_bytes)) < 4 * limit_bytes
    COUNTS["decompression bombs"] += 1


def test_zz_report_fuzz_examples() -> None:
    """Prints the examples run per target (run with -s to see it)."""
    print(f"\n{sum(COUNTS.values())} fuzz examples: {dict(sorted(COUNTS.items()))}")


def test_seeds_cover_every_magic_and_codec() -> None:
    """The mutation seeds decode cleanly before mutation (so mutations start from real batches)."""
    for seed in SEEDS:
        assert decode_everything(seed) == 3
    assert {seed[16] for seed in SEEDS} == {0, 1, 2}
